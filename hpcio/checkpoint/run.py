"""``python -m hpcio.checkpoint run``: MLPerf Storage's checkpoint sequence, timed.

Write ``--checkpoints`` checkpoints (``global_epoch1_step<k>/`` in ``--dir``), clear the page
cache of their files, read them back in the same order; every rank restores the shard of
its target rank (itself, or with ``--rank-shift`` the rank one node further, so that no
rank reads what its own node wrote and cached).

Per checkpoint, as DLIO measures and MLPerf Storage publishes (units GiB, which both call
GB):

* ``write_s``: the slowest rank's time from a barrier to its shard durable (written and
  fsync'd: the writer's own fsync, ``MPI_File_sync``, DCP's ``sync_files``);
  ``write_GiB_per_s`` = checkpoint bytes / ``write_s``; likewise ``read_s`` (to the
  shard in memory) and ``read_GiB_per_s``. ``commit_s`` is rank 0's time after that to
  gather where each tensor went, write the manifest and the ``complete`` marker (both
  fsync'd): a separate figure, not in ``write_s``.
* the published figure is the arithmetic mean of the per-checkpoint rates
  (``save_checkpoint_io_mean_GB_per_second``, MLPerf Storage Rules 4.3.6), not total bytes
  over total time; stdev is the population's (numpy's default, as DLIO).

Each checkpoint holds ``manifest.json`` (readable without hpcio: layout, writer, per tensor
rank, DLIO file, key, dtype, shape, data file, offset and length where the writer says,
CRC-32C) and, written last, ``complete``: a checkpoint without it is never read. Every
restore is checked tensor by tensor against the manifest's CRC-32C (after the timed read):
a mismatch names the file and offset. A restore refuses a checkpoint of another layout,
world size or writer in one line naming both.

Results: a run directory (``--out``) with ``checkpoint.yaml`` (the resolved options),
``env.json``, ``summary.json`` and ``summary.txt``, written atomically.
"""

import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field

import numpy as np

from ..cache import cold_scope, drop_caches, resident_fraction
from ..cli import parse_key_values
from ..errors import HpcioError, describe, report_to
from ..fsutil import atomic_json, atomic_write, evict, free_bytes
from ..measure import darshan
from ..measure.rundir import RunDir, capture_env
from ..mpiutil import on_root
from ..world import init_world
from .command import default_out
from .layout import GIB, Layout, load_model
from .state import crc32c_of, make_state, tensor_records
from .writers import make_writer

__all__ = ["run", "Job", "MANIFEST", "COMPLETE", "FORMAT", "checkpoint_name", "read_manifest",
           "placed", "commit"]

MANIFEST = "manifest.json"
COMPLETE = "complete"
FORMAT = "hpcio-checkpoint"
_NAME = re.compile(r"global_epoch(\d+)_step(\d+)$")


def checkpoint_name(k):
    """DLIO's directory name of the k-th checkpoint (epoch 1, step k)."""
    return f"global_epoch1_step{k}"


@dataclass
class Job:
    """What a writer needs of the job: ranks, layout, options, and whose shard it reads."""

    world: object
    layout: Layout
    options: dict = field(default_factory=dict)
    fault: tuple = None
    target: int = 0

    @property
    def comm(self):
        return self.world.comm

    @property
    def rank(self):
        return self.world.rank

    @property
    def size(self):
        return self.world.size


def _fault():
    v = os.environ.get("HPCIO_CKPT_FAULT")
    if not v:
        return None
    try:
        r, k = v.split(":")
        return int(r), int(k)
    except ValueError:
        raise HpcioError(f"HPCIO_CKPT_FAULT={v!r}: expected <rank>:<checkpoint>",
                         everywhere=True)


def read_manifest(directory):
    """A checkpoint's manifest (a dict), or an :class:`HpcioError` naming what is wrong."""
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(os.path.join(directory, COMPLETE)):
        raise HpcioError(f"{directory}: incomplete checkpoint (no '{COMPLETE}' marker: its "
                         f"write did not finish); not restored")
    try:
        with open(path) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        raise HpcioError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})")
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise HpcioError(f"{path}: not a manifest of hpcio.checkpoint")
    return m


def _layout_line(rec, writer):
    return (f"{rec.get('model')} TP{rec.get('tp')} x PP{rec.get('pp')} x DP{rec.get('dp')} "
            f"ZeRO-{rec.get('zero_stage')}, {rec.get('world')} ranks, scale "
            f"{rec.get('scale')}, writer {writer}")


def check_compatible(manifest, layout, writer, where):
    """One line naming both when the checkpoint at ``where`` was written with another
    layout, world size or writer than this job's."""
    mine = layout.record()
    theirs = manifest.get("layout") or {}
    keys = [k for k in mine if mine[k] != theirs.get(k)]
    keys += ["writer"] if manifest.get("writer") != writer else []
    if keys:
        raise HpcioError(f"{where}: written as {_layout_line(theirs, manifest.get('writer'))}"
                         f"; this job is {_layout_line(mine, writer)} (differs in "
                         f"{', '.join(keys)})")


def _align(args, hints, directory):
    """Where each rank's region may start: ``--align``, else the stripe size asked for
    (``--hint striping_unit=``), else ``st_blksize`` of the directory (Lustre's stripe
    size, GPFS's block size), at least 4 KiB."""
    if args.align:
        return args.align
    unit = hints.get("striping_unit", "")
    if unit.isdigit() and int(unit) > 0:
        return int(unit)
    return max(4096, os.stat(directory).st_blksize)


def _claim_dir(directory, force, phase):
    """Rank 0, before anything is written: the checkpoint directory for ``phase``."""
    if phase == "read":
        if not os.path.isdir(directory):
            raise HpcioError(f"--dir {directory}: no such checkpoint directory")
        return
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise HpcioError(f"--dir {directory}: exists and is not a directory")
    if os.path.isdir(directory) and os.listdir(directory) and not force:
        raise HpcioError(f"--dir {directory}: exists and is not empty: checkpoints are "
                         f"never written over (--force replaces the checkpoints in it)")
    os.makedirs(directory, exist_ok=True)


def _found(directory, count):
    """Names of the complete checkpoints in ``directory``, in step order (at most
    ``count``)."""
    names = sorted((n for n in os.listdir(directory) if _NAME.match(n)),
                   key=lambda n: tuple(map(int, _NAME.match(n).groups())))
    if not names:
        raise HpcioError(f"--dir {directory}: holds no checkpoint (global_epoch*_step*)")
    return names[:count]


def _stats(values):
    a = np.asarray(values, dtype=float)
    return (float(a.mean()), float(a.std())) if a.size else (None, None)


def _evict_all(job, directory, names):
    """Drop the checkpoints' files from this node's page cache (split between the node's
    ranks); (files, resident fraction after, on this node's first rank)."""
    paths = sorted(os.path.join(directory, n, f) for n in names
                   for f in os.listdir(os.path.join(directory, n))
                   if os.path.isfile(os.path.join(directory, n, f)))
    w = job.world
    for p in paths[w.local_rank::w.local_size]:
        evict(p)
    if w.node_comm is not None and w.size > 1:
        w.node_comm.Barrier()
    return len(paths), resident_fraction(paths) if w.local_rank == 0 else None


def _write_failure(exc, path):
    """Why a writer failed, in words: the OS error inside (DCP gathers its ranks'
    exceptions; MPI-IO says "Other I/O error" for a full disk), and a file system that
    is full said as such."""
    inner = [exc] + [f[0] if isinstance(f, tuple) else f
                     for f in (getattr(exc, "failures", None) or {}).values()]
    os_err = next((e for e in inner if isinstance(e, OSError) and e.strerror), None)
    why = describe(os_err or exc)
    try:
        free = free_bytes(path)
    except OSError:
        free = None
    if free is not None and free < (1 << 20) and "full" not in why:
        return f"its file system is full ({free:,} bytes free; the writer said: {why})"
    return why


def placed(where, crcs, rank):
    """A rank's writer's answer (where each tensor went) with what the manifest says of
    each tensor (:func:`~.state.tensor_records`) and the rank."""
    for w in where:
        w.update(crcs[w["key"]])
        w["rank"] = rank
    return where


def commit(path, writer, layout, tensors, **extra):
    """Rank 0, once every rank's shard is durable: ``manifest.json``, then the
    ``complete`` marker; the one writer of both (:func:`read_manifest` reads them)."""
    data_files = sorted({w["data_file"] for w in tensors if w.get("data_file")})
    manifest = {
        "format": FORMAT, "version": 1, "name": os.path.basename(path),
        "writer": writer.name, "layout": layout.record(), "bytes": layout.total_bytes,
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": [{"name": f, "bytes": os.path.getsize(os.path.join(path, f))}
                  for f in data_files],
        "hints": getattr(writer, "used_hints", None), "tensors": tensors, **extra}
    if writer.name == "coordinated":
        manifest["align"] = writer.plan.align
    atomic_json(os.path.join(path, MANIFEST), manifest, compact=True)
    atomic_write(os.path.join(path, COMPLETE),
                 lambda f: f.write(manifest["written"].encode() + b"\n"))


def _write_one(job, writer, directory, k, state, crcs, files):
    """Write checkpoint ``k``; (its name, this rank's seconds, rank 0's commit seconds)."""
    comm = job.comm
    name = checkpoint_name(k)
    path = os.path.join(directory, name)
    if job.rank == 0:
        if os.path.exists(path):  # --force: an earlier checkpoint of this name
            shutil.rmtree(path)
        os.makedirs(path)
    comm.Barrier()
    t0 = time.perf_counter()
    try:
        where = writer.save(path, state, files, k)
    except (HpcioError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        # one line for the job: what failed, and what is left
        raise HpcioError(f"{path}: checkpoint {k} not written: {_write_failure(e, path)}; "
                         f"it has no '{COMPLETE}' marker (a restore refuses it), the "
                         f"checkpoints before it are untouched") from e
    took = time.perf_counter() - t0
    gathered = comm.gather((took, placed(where, crcs, job.rank)), root=0)
    commit_s = None
    if job.rank == 0:
        t1 = time.perf_counter()
        commit(path, writer, job.layout, [w for _, ws in gathered for w in ws])
        commit_s = time.perf_counter() - t1
        gathered = [g[0] for g in gathered]
    comm.Barrier()
    return name, gathered, commit_s


def _verify(got, manifest, target, path):
    """Every restored tensor of rank ``target`` against the manifest's CRC-32C."""
    for t in manifest["tensors"]:
        if t["rank"] != target:
            continue
        x = got.get(t["key"])
        if x is None:
            raise HpcioError(f"{path}: restore of rank {target} lacks tensor {t['key']}")
        crc = crc32c_of(x)
        if crc != t["crc32c"] or x.numel() != t["shape"][0]:
            at = (f"{t['data_file']} offset {t['offset']} ({t['length']} bytes)"
                  if t.get("offset") is not None else
                  f"{t.get('data_file') or 'its DCP file'}")
            raise HpcioError(f"{os.path.join(path, at)}: tensor {t['key']} of rank {target} "
                             f"has CRC-32C {crc:08x}, the manifest says {t['crc32c']:08x}: "
                             f"the checkpoint changed after it was written; not restored")


def _read_one(job, writer, directory, name, files):
    path = os.path.join(directory, name)
    manifest = on_root(job.comm, lambda: read_manifest(path), share=True)
    on_root(job.comm, lambda: check_compatible(manifest, job.layout, writer.name, path))
    job.comm.Barrier()
    t0 = time.perf_counter()
    got = writer.load(path, files, manifest)
    took = time.perf_counter() - t0
    t1 = time.perf_counter()
    _verify(got, manifest, job.target, path)
    verify = time.perf_counter() - t1
    del got
    return job.comm.gather((took, verify), root=0)


def run(args):
    """The ``run`` subcommand (collective)."""
    world = init_world()
    comm = world.comm
    layout = Layout(load_model(args.model), world.size, args.scale)
    directory = os.path.abspath(args.dir)
    on_root(comm, lambda: _claim_dir(directory, args.force, args.phase))
    out = args.out or default_out(args.writer, args.model, world.size)
    run_dir = RunDir.create(out, comm)
    report_to(run_dir.path)
    hints = parse_key_values(args.hint, "--hint")
    options = {"mpiio": args.mpiio, "files": args.files, "align": _align(args, hints, directory),
               "hints": hints, "round_bytes": args.round_mib << 20}
    shift = world.local_size if args.rank_shift else 0
    job = Job(world, layout, options, _fault(), (world.rank + shift) % world.size)
    config = {"command": "hpcio.checkpoint run", "model": layout.model.name,
              "model_config": layout.model.source, "writer": args.writer,
              "phase": args.phase, "checkpoints": args.checkpoints, "dir": directory,
              "ranks": world.size, "nodes": world.nodes, "layout": layout.record(),
              "layout_text": layout.describe(), "rank_shift": shift,
              "cache": args.cache, "seed": args.seed,
              "coordinated": options if args.writer == "coordinated" else None}
    env = capture_env(world, directory, args.cache)
    traced = darshan.preloaded_library()   # --darshan, or a launcher's LD_PRELOAD
    if world.rank == 0 and traced:          # rank 0 writes the log at MPI_Finalize
        log = darshan.set_logfile(darshan.log_path(run_dir.path, "run"))
        env["darshan"] = dict(darshan.info(traced), log=log)
    if world.rank == 0:
        run_dir.yaml("checkpoint.yaml", config)
        run_dir.write_env(env)
    writer = make_writer(args.writer, job)
    per_ckpt, names = [], []
    try:
        if args.phase in ("both", "write"):
            files = layout.files(world.rank)
            state = make_state(files, args.seed, world.rank)
            crcs = tensor_records(state, files)
            for k in range(1, args.checkpoints + 1):
                name, took, commit = _write_one(job, writer, directory, k, state, crcs, files)
                names.append(name)
                if world.rank == 0:
                    per_ckpt.append({"name": name, "write_rank_s": took, "commit_s": commit})
            del state
        else:
            names = on_root(comm, lambda: _found(directory, args.checkpoints), share=True)
            per_ckpt = [{"name": n} for n in names] if world.rank == 0 else []
        cache = None
        if args.phase in ("both", "read"):
            cache = _clear(job, directory, names, args)
            files = layout.files(job.target)
            for i, name in enumerate(names):
                got = _read_one(job, writer, directory, name, files)
                if world.rank == 0:
                    per_ckpt[i]["read_rank_s"] = [g[0] for g in got]
                    per_ckpt[i]["verify_s"] = max(g[1] for g in got)
    finally:
        writer.close()
    if world.rank == 0:
        summary, text = summarize(config, layout, per_ckpt, cache, run_dir.path,
                                  getattr(writer, "used_hints", None))
        run_dir.write_summary(summary, text)
        print(text, end="", flush=True)
    comm.Barrier()
    return 0


def _clear(job, directory, names, args):
    """The page cache of the checkpoints' files, before the reads (rank 0's record)."""
    if args.cache == "asis":
        return {"mode": "asis"}
    t0 = time.perf_counter()
    n, resident = _evict_all(job, directory, names)
    dropped = False
    if args.drop_caches and job.world.local_rank == 0:
        dropped = drop_caches()
    comm = job.comm
    res = comm.gather((job.world.hostname, resident, dropped), root=0)
    comm.Barrier()
    if job.rank != 0:
        return None
    nodes = [{"host": h, "resident_after": r, "drop_caches": d} for h, r, d in res
             if r is not None]
    return {"mode": "cold", "files": n, "seconds": time.perf_counter() - t0,
            "nodes": nodes, **cold_scope(directory, args.drop_caches,
                                         all(x["drop_caches"] for x in nodes))}


def summarize(config, layout, per_ckpt, cache, path, hints):
    """(summary.json's dict, summary.txt's text) on rank 0."""
    size = layout.total_bytes
    gib = size / GIB
    for c in per_ckpt:
        for what in ("write", "read"):
            ranks = c.get(f"{what}_rank_s")
            if ranks:
                c[f"{what}_s"] = max(ranks)
                c[f"{what}_GiB_per_s"] = gib / c[f"{what}_s"] if c[f"{what}_s"] > 0 else None
    metric = {"checkpoint_size_GB": gib}
    for what, mlperf in (("write", "save"), ("read", "load")):
        rates = [c[f"{what}_GiB_per_s"] for c in per_ckpt if c.get(f"{what}_GiB_per_s")]
        secs = [c[f"{what}_s"] for c in per_ckpt if c.get(f"{what}_s")]
        m, s = _stats(rates)
        metric[f"{mlperf}_checkpoint_io_mean_GB_per_second"] = m
        metric[f"{mlperf}_checkpoint_io_stdev_GB_per_second"] = s
        m, s = _stats(secs)
        metric[f"{mlperf}_checkpoint_duration_mean_seconds"] = m
        metric[f"{mlperf}_checkpoint_duration_stdev_seconds"] = s
    model_b, opt_b = layout.split_bytes()
    summary = {
        "source": "hpcio.checkpoint", "complete": True, "writer": config["writer"],
        "model": config["model"], "layout": config["layout_text"], "ranks": config["ranks"],
        "nodes": config["nodes"], "checkpoint_bytes": size, "model_bytes": model_b,
        "optimizer_bytes": opt_b, "checkpoints": per_ckpt, "metric": metric,
        "cache": cache, "rank_shift": config["rank_shift"],
        "rank_shift_note": ("no shift: one node" if config["rank_shift"] and
                            config["nodes"] == 1 else None),
        "mpiio_hints": hints,
        "units": "GB = GiB = 2^30 bytes, as DLIO and MLPerf Storage name them",
        "definitions": {
            "write_s": "slowest rank's time from a barrier to its shard written and fsync'd",
            "read_s": "slowest rank's time from a barrier to its shard in memory (cache "
                      "cleared before the reads as 'cache' says)",
            "commit_s": "rank 0's time to gather the tensors' places and write manifest.json "
                        "and complete (not in write_s)",
            "verify_s": "slowest rank's CRC-32C check of its restored shard (not in read_s)",
            "mean_GB_per_second": "arithmetic mean of the per-checkpoint rates "
                                  "(MLPerf Storage Rules 4.3.6); stdev of the population",
        },
    }
    lines = [f"hpcio.checkpoint: {config['layout_text']}, writer {config['writer']}, "
             f"{gib:.3f} GiB per checkpoint ({model_b / GIB:.3f} model + {opt_b / GIB:.3f} "
             f"optimizer)",
             f"  {'checkpoint':<22} {'write s':>9} {'write GiB/s':>12} {'read s':>9} "
             f"{'read GiB/s':>11}"]

    def fmt(v, spec):
        return format(v, spec) if v is not None else "-"
    for c in per_ckpt:
        lines.append(f"  {c['name']:<22} {fmt(c.get('write_s'), '9.3f')} "
                     f"{fmt(c.get('write_GiB_per_s'), '12.3f')} {fmt(c.get('read_s'), '9.3f')} "
                     f"{fmt(c.get('read_GiB_per_s'), '11.3f')}")
    lines.append(f"  mean of per-checkpoint rates (MLPerf): write "
                 f"{fmt(metric['save_checkpoint_io_mean_GB_per_second'], '.3f')} GiB/s, read "
                 f"{fmt(metric['load_checkpoint_io_mean_GB_per_second'], '.3f')} GiB/s")
    if cache and cache.get("mode") == "cold":
        res = [n["resident_after"] for n in cache["nodes"]]
        lines.append(f"  cache before reads: {cache['files']} files evicted (fdatasync + "
                     f"fadvise DONTNEED), {100 * max(res):.1f}% still resident; not cleared: "
                     f"{'; '.join(cache['not_cleared']) or 'none'}")
    elif cache:
        lines.append("  cache before reads: left as it was (--cache asis)")
    lines.append(f"  results: {path}")
    return summary, "\n".join(lines) + "\n"
