"""Reader benchmark: each reader against the machine's own limit, in the same run.

    mpiexec -n 2 python -m hpcio.bench --data DIR [DIR...] --readers naive,coordinated,memory \\
        --cache cold,warm --shuffle none,chunk,global --batch 64 --repeat 3 [--hint k=v ...]

For every dataset, cache state and shuffle mode, the runs are interleaved (limits, then
reader A, B, C; again for every repeat, the order rotated by one each repeat) so that a
slow minute of a shared VM hits all of them alike, and so does the position in the
sequence (on this VM the first cold read of a file after other work is often slower:
the host caches the virtual disk); the table gives medians and the spread (min..max)
over the repeats.

Measured quantities (per run; ``t`` is the slowest rank's time from its first request
to its last batch, because a step finishes when every rank has its batch):

* ``rec/s/rank``: records of a rank / that rank's time, mean over ranks;
* ``MB/s``: all ranks' record bytes / ``t`` (10^6 bytes);
* ``seq``: the issue's "plain sequential read of the same files", like ``dd bs=8M``: one
  stream, rank 0 reads every file start to end in 8 MiB ``preadv`` calls into a
  page-aligned buffer while the other ranks wait (sleeping) at a barrier;
  ``x seq`` = a reader's MB/s / ``seq`` MB/s of the same repeat and cache state;
* ``seq-ranks``: every rank at once reads its contiguous share of the files laid end to
  end (rank r of n the r-th 1/n): n far-apart streams; ``x ranks`` = MB/s / ``seq-ranks``;
* ``seq-direct``: ``seq`` with ``O_DIRECT`` (``dd iflag=direct``; when the file system
  allows it);
* ``random`` (beside global shuffle, cold): one ``pread`` per record, in the global-shuffle
  plan's order, at most ``--random-records`` per rank — the floor of random access;
* ``dev/rec``: bytes the data's whole disk read (``/proc/diskstats``, node-wide, during the
  run) / record bytes delivered — read amplification (memory-mapped reads show up here);
* ``stall``: seconds the consumer waited for batches (mean over ranks);
* ``cpu_s`` (JSON only): CPU seconds of every rank's process during its run (all its
  threads, user and system), summed over ranks: what the run cost the node's cores,
  which other work on a shared machine changes less than the time;
* ``resident``: fraction of the files in the page cache just before the run (mincore).

Cold: every file is dropped from the page cache before each cold run (fdatasync +
POSIX_FADV_DONTNEED on every node, and drop_caches with ``--drop-caches``), and readers
are created after eviction (so LMDB maps nothing stale). On a VM the host's cache may
still serve "cold" reads: cold figures are upper bounds. The JSON holds every run.

Other work on the machine is measured as ours: ``--wait-quiet S`` starts each run only
after a second in which the node's CPUs were < 15% busy and its disks idle (every rank of
this job sleeping meanwhile), waiting up to S s; each run records that second (``quiet``)
and the 1-minute load average before and after it (``loadavg``).
"""

import os
import sys
import time

import numpy as np

from .explain.benchtable import RATIOS, summarize, table
from .cache import cache_state
from .cli import (MAX_SECONDS, ArgumentParser, add_plan_arguments, add_reader_arguments,
                  integer, number, parse_key_values, seconds)
from .cli import reader_spec as parse_reader  # name[:key=value...], bench's --readers
from .data.dataset import NO_CRC, open_dataset
from .errors import guard, HpcioError, lookup
from .fsutil import aligned_empty, atomic_json, fs_type
from .measure import probes
from .measure.probes import block_device, disk_read_bytes, loadavg, read_ahead_kb
from .mpiutil import idle_barrier, on_root
from .outputs import claim_file
from .plan import SHUFFLES, make_plan
from .progress import Progress
from .readers import check_dataset, make_reader

__all__ = ["main", "parse_reader", "claim_out", "LIMITS", "run_reader", "run_limit",
           "wait_quiet"]

PIECE = 8 << 20


def _verified(reader, verify):
    """A parsed reader spec with its ``verify`` mode (``verify`` unless it sets one);
    an unverified reader's label says so, so every figure it gives does."""
    label, name, opts = reader
    opts.setdefault("verify", verify)
    if opts["verify"] == "off" and "verify=off" not in label:
        label += ":verify=off"
    return label, name, opts


# ---- limits: what the machine itself delivers -------------------------------------
def _ranges(sizes, rank, size):
    """This rank's share of the files concatenated: [(file k, start, end), ...]."""
    total = int(sum(sizes))
    lo, hi = total * rank // size, total * (rank + 1) // size
    out, base = [], 0
    for k, n in enumerate(sizes):
        a, b = max(lo, base), min(hi, base + int(n))
        if a < b:
            out.append((k, a - base, b - base))
        base += int(n)
    return out


def _read_ranges(ds, ranges, direct=False):
    """Read ``ranges`` [(file k, start, end), ...] in 8 MiB ``preadv`` calls into one
    page-aligned buffer; (bytes inside the ranges, calls)."""
    buf = aligned_empty(PIECE)
    mv = memoryview(buf)
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    nbytes = calls = 0
    for k, a, b in ranges:
        fd = os.open(ds.path(k), flags)
        try:
            pos = a - (a % 4096) if direct else a
            while pos < b:
                n = os.preadv(fd, [mv[:PIECE]], pos)
                calls += 1
                if n <= 0:
                    break
                nbytes += max(0, min(pos + n, b) - max(pos, a))
                pos += n
        finally:
            os.close(fd)
    return nbytes, calls


def _seq(ds, comm, direct=False, **_):
    """One stream, like ``dd bs=8M``: rank 0 reads every file start to end, the other
    ranks wait at a barrier; the time is from the common start to the barrier after it."""
    nbytes = calls = 0
    t0 = time.perf_counter()
    if comm.rank == 0:
        sizes = ds.index.file_bytes
        nbytes, calls = _read_ranges(ds, [(k, 0, int(n)) for k, n in enumerate(sizes)],
                                     direct)
    idle_barrier(comm)
    return {"records": 0, "bytes": nbytes, "seconds": time.perf_counter() - t0,
            "calls": calls}


def _seq_ranks(ds, comm, **_):
    """Every rank at once reads its contiguous share of the files laid end to end (rank
    ``r`` of ``n`` the ``r``-th ``1/n``): ``n`` far-apart streams."""
    t0 = time.perf_counter()
    nbytes, calls = _read_ranges(ds, _ranges(ds.index.file_bytes, comm.rank, comm.size))
    return {"records": 0, "bytes": nbytes, "seconds": time.perf_counter() - t0,
            "calls": calls}


def _seq_direct(ds, comm, **kw):
    """``seq`` with ``O_DIRECT`` (``dd iflag=direct``): the disk without the page cache."""
    try:
        return _seq(ds, comm, direct=True)
    except OSError as e:  # on rank 0: the others wait in _seq's barrier
        idle_barrier(comm)
        return {"skipped": f"O_DIRECT: {e.strerror}"}


def _random(ds, comm, plan=None, limit=2000, **_):
    """One pread per record in plan order (global shuffle): the random-access floor."""
    idx = ds.index
    ids = plan.ids[:limit]
    fil, off, ln = idx.file[ids].tolist(), idx.offset[ids].tolist(), idx.length[ids].tolist()
    buf = aligned_empty(int(idx.length.max()) if len(idx.length) else 1)
    mv = memoryview(buf)
    fds = {}
    t0 = time.perf_counter()
    try:
        for j, o, n in zip(fil, off, ln):
            fd = fds.get(j)
            if fd is None:
                fd = fds[j] = os.open(ds.path(j), os.O_RDONLY)
            os.preadv(fd, [mv[:n]], o)
    finally:
        for fd in fds.values():
            os.close(fd)
    return {"records": len(ids), "bytes": int(sum(ln)), "seconds": time.perf_counter() - t0,
            "calls": len(ids)}


LIMITS = {"seq": _seq, "seq-ranks": _seq_ranks, "seq-direct": _seq_direct,
          "random": _random}


# ---- one run ------------------------------------------------------------------------
def run_reader(reader, comm, plan, compute_s=0.0, label=None):
    """Run one epoch of ``plan`` (sleeping ``compute_s`` per batch, an emulated training
    step); this rank's figures. The reader's counters are reset first. With ``label``,
    rank 0 prints a progress line every 20 s of a long epoch."""
    reader.stats.reset()
    progress = Progress(plan.steps, "batch", label, mode="lines") \
        if label and comm.rank == 0 else None
    comm.Barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for b in reader.epoch(plan):
        if compute_s:
            time.sleep(compute_s)
        if progress is not None:
            progress.update()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = reader.stats
    return {"records": st.records, "bytes": st.bytes, "seconds": dt, "cpu_s": cpu,
            "calls": st.calls,
            "io_s": st.io_s, "stall_s": st.wait_s, "verify_s": st.verify_s,
            "minflt": st.minflt, "majflt": st.majflt, "verify": reader.verify}


class Readers:
    """The readers of one dataset. Readers that may map the data (``naive``: LMDB maps its
    file, and mapped pages cannot be evicted) are made afresh for every run, after the
    cache state is set — as a framework opens its dataset at start-up. The others are made
    once, warmed up with a short untimed epoch (ROMIO's and the ring's buffers allocated and
    touched, as in the second epoch of a training run), and reused; a memory reader's
    up-front load is reported as ``load_s``."""

    FRESH = ("naive",)

    def __init__(self, specs, ds, comm, warmup_plan):
        self.specs, self.ds, self.comm, self.kept, self.load_s = specs, ds, comm, {}, {}
        for label, name, opts in specs.values():
            if name in self.FRESH:
                continue
            r = self.kept[label] = make_reader(name, ds, comm, **opts)
            self.load_s[label] = r.stats.load_s
            for _ in r.epoch(warmup_plan):
                pass

    def run(self, label, plan, compute_s, progress=None):
        _, name, opts = self.specs[label]
        if label in self.kept:
            return run_reader(self.kept[label], self.comm, plan, compute_s, progress)
        r = make_reader(name, self.ds, self.comm, **opts)
        try:
            return run_reader(r, self.comm, plan, compute_s, progress)
        finally:
            r.close()

    def close(self):
        for r in self.kept.values():
            r.close()
        self.kept = {}


def run_limit(kind, ds, comm, plan, random_records):
    comm.Barrier()
    return LIMITS[kind](ds, comm, plan=plan, limit=random_records)


def _reduce(comm, res):
    """Combine ranks' figures once per run (never per step)."""
    every = comm.gather(res, root=0)
    if comm.rank != 0:
        return None
    if any("skipped" in e for e in every):
        return {"skipped": next(e["skipped"] for e in every if "skipped" in e)}
    t = max(e["seconds"] for e in every)
    out = {"seconds": t, "records": sum(e["records"] for e in every),
           "bytes": sum(e["bytes"] for e in every)}
    out["mb_s"] = out["bytes"] / t / 1e6 if t > 0 else 0.0
    out["rec_s"] = out["records"] / t if t > 0 else 0.0
    out["rec_s_rank"] = float(np.mean([e["records"] / e["seconds"] if e["seconds"] > 0 else 0
                                       for e in every]))
    for k in ("calls", "minflt", "majflt", "cpu_s"):
        if k in every[0]:
            out[k] = sum(e[k] for e in every)
    for k in ("io_s", "stall_s", "verify_s"):
        if k in every[0]:
            out[k] = float(np.mean([e[k] for e in every]))
    if "verify" in every[0]:
        out["verify"] = every[0]["verify"]
    return out


def wait_quiet(comm, max_wait, cpu=0.15, disk_mib_s=5.0):
    """:func:`hpcio.measure.probes.wait_quiet` on rank 0 while every rank of this job
    sleeps (its own CPU would count as other work); the result on every rank."""
    out = probes.wait_quiet(max_wait, cpu, disk_mib_s) if comm.rank == 0 else None
    idle_barrier(comm)
    return comm.bcast(out, root=0)


# ---- main ---------------------------------------------------------------------------
def claim_out(path, force=False):
    """Before any run: an existing result is refused (unless ``force``) and the folder is
    made, so a benchmark of an hour does not end on an unwritable or clobbered file."""
    if os.path.isdir(path):
        raise HpcioError(f"--out {path} is a directory: give the JSON file to write")
    claim_file(path, "--out", lambda p: False, True)  # never in a run's or dataset's
    if os.path.lexists(path) and not force:
        raise HpcioError(f"--out {path} exists (--force replaces it)")
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise HpcioError(f"--out {path}: cannot make {d}: {e.strerror}")
    if not os.access(d, os.W_OK):
        raise HpcioError(f"--out {path}: {d} is not writable")
    if os.path.lexists(path) and not (os.path.isfile(path) and os.access(path, os.W_OK)):
        raise HpcioError(f"--out {path} is not a writable file")


def build_parser():
    p = ArgumentParser(prog="python -m hpcio.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", nargs="+", required=True, help="dataset directories")
    p.add_argument("--readers", default="naive,coordinated,memory",
                   help="comma-separated reader specs name[:key=value...], e.g. "
                        "coordinated:mechanism=nonblocking or coordinated:collective=false")
    p.add_argument("--cache", default="cold,warm", help="cache states: cold, warm, asis")
    add_plan_arguments(p, "none,chunk,global", many=True)
    p.add_argument("--repeat", type=integer(1), default=3, help="interleaved repeats (>= 3 for a "
                   "median worth reading)")
    p.add_argument("--steps", type=integer(1), default=None,
                   help="at most this many steps per epoch (default: the whole epoch)")
    p.add_argument("--warmup-steps", type=integer(0), default=64,
                   help="steps of the untimed warm-up epoch of each kept reader")
    add_reader_arguments(p, "the reader's label says verify=off beside every figure",
                         old_prefetch="--prefetch")
    p.add_argument("--compute-ms", type=number(0.0, MAX_SECONDS * 1e3), default=0.0,
                   help="emulated compute per batch (sleep) to show prefetch overlap")
    p.add_argument("--limits", default="seq,seq-ranks,seq-direct,random",
                   help="machine limits to measure beside the readers: seq (one stream, "
                        "dd bs=8M), seq-ranks (every rank its share at once), seq-direct "
                        "(seq with O_DIRECT), random (global shuffle only)")
    p.add_argument("--random-records", type=integer(1), default=2000,
                   help="records per rank for the random-read floor")
    p.add_argument("--wait-quiet", type=seconds, default=0.0, metavar="S",
                   help="before each run wait up to S s for a second of idle CPUs (< 15%%) "
                        "and disks (< 5 MiB/s) on this node (0: do not wait)")
    p.add_argument("--drop-caches", action="store_true",
                   help="cold: also echo 1 > /proc/sys/vm/drop_caches (root only)")
    p.add_argument("--check-shards", action="store_true",
                   help="check every shard's sha256 against the manifest first (reads all)")
    p.add_argument("--out", default=None,
                   help="JSON file with every run (default: runs/bench-<time>.json)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    p.add_argument("--quiet", action="store_true",
                   help="no progress lines (one per run, and every 20 s of a long one)")
    return p


def main(argv=None):
    a = build_parser().parse_args(argv)  # --help and bad flags: before MPI starts
    from mpi4py import MPI  # mpi4py: importing it starts MPI, after --help and bad flags
    comm = MPI.COMM_WORLD
    readers = [_verified(parse_reader(s), a.verify) for s in a.readers.split(",") if s]
    hints = parse_key_values(a.hint, "--hint")
    for _, name, opts in readers:
        if name == "coordinated":
            if hints:
                opts.setdefault("hints", hints)
            if a.reader_prefetch is not None:
                opts.setdefault("prefetch", a.reader_prefetch)
    caches = [c for c in a.cache.split(",") if c]
    shuffles = [s for s in a.shuffle.split(",") if s]
    for s in shuffles:
        lookup(SHUFFLES, s, "shuffle mode")
    limits = [x for x in a.limits.split(",") if x]
    for x in limits:
        if x not in LIMITS:
            raise HpcioError(f"unknown limit {x!r} (choose from {', '.join(LIMITS)})",
                             everywhere=True)
    out_path = a.out or os.path.join("runs", time.strftime("bench-%Y%m%d-%H%M%S.json"))
    on_root(comm, lambda: claim_out(out_path, a.force))
    rank0 = comm.rank == 0
    runs = []
    meta = {"ranks": comm.size, "batch": a.batch, "hints": hints, "readers": a.readers,
            "verify": {label: o["verify"] for label, _, o in readers},
            "limits": {k: " ".join((LIMITS[k].__doc__ or "").split()) for k in limits},
            "ratios": {k: f"MB/s / MB/s of {v} (same repeat)" for k, v in RATIOS.items()},
            "mpi": MPI.Get_library_version().splitlines()[0].strip(), "datasets": {}}
    for root in a.data:
        ds = open_dataset(root, comm)
        for _, name, opts in readers:
            check_dataset(name, ds, opts)
        if a.check_shards:
            on_root(comm, ds.verify_checksums)
        if ds.index.crc is None and comm.rank == 0 and \
                any(o["verify"] == "records" for _, _, o in readers):
            print(NO_CRC.format(root=ds.root), file=sys.stderr, flush=True)
        name = os.path.basename(os.path.normpath(root))
        dev = block_device(ds.root)
        meta["datasets"][name] = {
            "root": ds.root, "format": ds.format, "encoding": ds.encoding,
            "records": ds.records, "record_bytes": ds.nbytes(),
            "file_bytes": int(ds.index.file_bytes.sum()), "files": len(ds.index.files),
            "fs": fs_type(ds.root), "device": dev, "read_ahead_kb": read_ahead_kb(ds.root)}
        todo = []
        for rep in range(a.repeat):
            for cache in caches:
                for shuffle in shuffles:
                    whats = [x for x in limits if x != "random" or shuffle == "global"]
                    whats += [r[0] for r in readers]
                    k = rep % len(whats)  # rotated: no run is always first of a group
                    todo += [(rep, cache, shuffle, w) for w in whats[k:] + whats[:k]]
        specs = {r[0]: r for r in readers}

        def plan_of(epoch, shuffle, steps=a.steps):
            return make_plan(ds.records, comm.size, comm.rank, a.batch, epoch=epoch,
                             seed=a.seed, shuffle=shuffle, block=a.block,
                             window=a.window).head(steps)

        pool = Readers(specs, ds, comm, plan_of(10**6, "global", steps=a.warmup_steps))
        meta["datasets"][name]["load_s"] = pool.load_s
        for n, (rep, cache, shuffle, what) in enumerate(todo):
            plan = plan_of(rep, shuffle)
            quiet = wait_quiet(comm, a.wait_quiet) if a.wait_quiet > 0 else None
            state = cache_state(cache, ds, comm, drop=a.drop_caches)
            load0 = loadavg()
            dev0 = disk_read_bytes([dev]) if rank0 and dev else None
            if what in specs:
                res = pool.run(what, plan, a.compute_ms / 1e3, None if a.quiet else
                               f"[{n + 1}/{len(todo)}] {name} {cache} {shuffle} {what}")
            else:
                res = run_limit(what, ds, comm, plan, a.random_records)
            dev1 = disk_read_bytes([dev]) if rank0 and dev else None
            out = _reduce(comm, res)
            if rank0:
                out.update(dataset=name, cache=cache, shuffle=shuffle, what=what,
                           repeat=rep, resident=state.get("resident"),
                           loadavg=[load0, loadavg()], quiet=quiet)
                if dev0 is not None and dev1 is not None and out.get("bytes"):
                    out["device_bytes"] = dev1 - dev0
                    out["amplification"] = (dev1 - dev0) / out["bytes"]
                runs.append(out)
                if not a.quiet:
                    fig = (f"{out['mb_s']:9.1f} MB/s {out['rec_s_rank']:11,.0f} rec/s/rank"
                           if "mb_s" in out else out.get("skipped", ""))
                    print(f"[{n + 1}/{len(todo)}] {name} {cache} {shuffle} {what}: {fig}",
                          file=sys.stderr, flush=True)
        pool.close()
        comm.Barrier()
    if rank0:
        rows = summarize(runs)
        print(table(rows), flush=True)
        atomic_json(out_path, {"meta": meta, "summary": rows, "runs": runs})
        print(f"wrote {out_path}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.bench"))
