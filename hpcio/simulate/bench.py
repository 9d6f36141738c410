"""``python -m hpcio.simulate bench``: measure on the node what a prediction hangs on, so
calibration pins it instead of fitting it from stall (``calibrate --costs``).

Per reader (one rank, the trainer's emulated data path: the reader's epoch through the
read-only loader, records checked as ``hpcio.train`` checks them), an epoch cold (every file
evicted, and its copies on the testbed's bricks; drop_caches with ``--drop-caches``) and the
same epoch again hot (every page resident):

* ``cpu_us_per_sample``: the rank's process CPU (user + system, all threads) per record, hot:
  what a sample costs when no byte comes from the storage;
* ``cpu_ms_per_mib``: the CPU of the cold epoch less the hot one's, per MiB the storage sent
  (the files' pages resident after the cold epoch, by mincore): the rank's, the file-system
  client's (the processes serving the mount, e.g. GlusterFS's FUSE daemon) and the storage
  servers' where they run on this node (``--servers``; the single-machine testbed's bricks
  share its cores); its parts beside it, and ``outside_cpu_ms_per_mib`` (client and
  servers: what a run's own process CPU leaves out). A reader whose reads leave no page
  cached (``O_DIRECT``) reads the storage hot as cold: its CPU is not split (None).

The storage, by cold ``pread`` of ``--probe-records`` records, the page cache emptied before
each set: small (4 KiB at each record's start) and large (each record whole):

* ``latency_us``: the median wall time of a small cold pread (one request to the storage);
* ``request_cpu_us`` and ``cpu_ms_per_mib_raw``: the CPU (as above) per request and per MiB,
  solved from the two sets (small and large records cost alike per request).

The node: ``run_queue_quantum_ms``, the longest a CPU-bound process holds a core when the
cores are oversubscribed (:func:`run_queue_quantum`). And ``barrier_ms_per_step`` per rank
count, the median of ``--runs``' ``barrier_s_per_step`` (the last rank's wait at a step's
barrier), where runs measured it.

Every figure is measured ``--repeat`` times, interleaved (readers, then the probes, again for
every repeat), and written as median, min, max and the repeats. Other work through the
same client or servers (a shared testbed) is kept out (:meth:`Meter.measured`: quiet
windows around each measurement, their rate subtracted, a disturbed one done again); other
work on the node stretches the latency: the 1-minute load average is recorded before and
after.
"""

import glob
import multiprocessing
import os
import socket
import time

import numpy as np
import yaml

from ..cache import TESTBED_STATE, evict, resident_bytes
from ..cli import integer, reader_spec
from ..data.dataset import open_dataset
from ..errors import HpcioError
from ..explain.runs import expand
from ..measure.probes import loadavg
from ..outputs import claim_file
from ..readers import make_reader
from ..train.emulate import ReadOnly
from ..fsutil import evict as evict_file, fs_type
from ..plan import make_plan
from .measured import figure, write_costs
from .workload import workload_from_run

__all__ = ["measure", "add_parser", "node_cpu", "proc_cpu"]

SMALL = 4096
MIB = 2 ** 20
SERVERS = ("glusterfsd",)     # the testbed's bricks (scripts/pfs-local.sh)
TICK = os.sysconf("SC_CLK_TCK")
QUANTUM_PERCENTILE = 90    # of the stretches a spinning process runs: the quantum
GAP_S = 50e-6             # a spinning process not run for this long was preempted
QUIET_S = 0.5             # the background CPU rate is measured over this long
QUIET_CPU = 0.03          # ... and a window is quiet below this share of a core
QUIET_WAIT_S = 30.0       # waited for at most, before a measurement
TRIES = 4                 # measurements disturbed by others' work are done again

DEFINITIONS = {
    "cpu_us_per_sample": "the rank's process CPU (user + system, all threads) per record "
                         "of a hot epoch (every page resident): paid on a cache hit too",
    "cpu_ms_per_mib": "CPU of the rank, the file system's client processes and the storage "
                      "servers on this node, cold epoch less hot, per MiB the storage sent "
                      "(pages resident after the cold epoch): paid only for bytes from "
                      "the storage",
    "outside_cpu_ms_per_mib": "cpu_ms_per_mib less the rank's own part: what a run's "
                              "process CPU (summary.json client_cpu_s_per_sample) leaves out",
    "latency_us": "median wall time of a cold 4 KiB pread at a record's start",
    "request_cpu_us": "node CPU (as cpu_ms_per_mib) per cold pread, from small and large "
                      "records",
    "cpu_ms_per_mib_raw": "node CPU (as cpu_ms_per_mib) per MiB of cold preads, from small "
                          "and large records",
    "run_queue_quantum_ms": "90th percentile of the stretches a CPU-bound process runs "
                            "before another takes its core, one more spinning process than "
                            "cores (others waking cut the shorter ones)",
    "barrier_ms_per_step": "runs' barrier_s_per_step (the last rank's wait at a step's "
                           "barrier), median over the runs of each rank count",
}


def proc_cpu(pid):
    """CPU seconds (user + system) of process ``pid`` so far; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(rest[11]) + int(rest[12])) / TICK


def node_cpu():
    """Busy CPU seconds of the whole node so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:8]]
    return (sum(v) - v[3] - v[4]) / TICK


def _mount_point(path):
    p = os.path.realpath(path)
    while not os.path.ismount(p):
        p = os.path.dirname(p)
    return p


def _procs(mount, servers):
    """({client pids}, {server pids}): processes whose command line names the mount point
    (a FUSE client), and processes named in ``servers``; this process is neither."""
    client, serv = set(), set()
    me = os.getpid()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == me:
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{d}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if comm in servers:
            serv.add(int(d))
        elif mount != "/" and mount.encode() in argv:
            client.add(int(d))
    return client, serv


class Meter:
    """CPU seconds of the parts that pay for a read: the rank (this process), the client
    processes, the servers on this node, and the whole node. Other work through the same
    client or servers (a shared testbed) is taken out: their CPU rate over
    :data:`QUIET_S` just before a measurement, times its length, is subtracted."""

    def __init__(self, mount, servers):
        self.client, self.servers = _procs(mount, servers)
        self.rate = {"client": 0.0, "servers": 0.0}
        self.background = []            # (client, servers) CPU per second, each time
        self.disturbed = 0              # measurements done again: others' work disturbed them

    def now(self):
        return {"rank": time.process_time(),
                "client": sum(proc_cpu(p) for p in self.client),
                "servers": sum(proc_cpu(p) for p in self.servers), "node": node_cpu(),
                "wall": time.perf_counter()}

    def quiet(self, wait_s=None):
        """Wait (up to ``wait_s``, default :data:`QUIET_WAIT_S`) for a :data:`QUIET_S`
        window in which the client and the servers spend at most :data:`QUIET_CPU` of a
        core for others; their rate in the last window (subtracted by :meth:`since`).
        Whether the window was quiet."""
        end = time.perf_counter() + (QUIET_WAIT_S if wait_s is None else wait_s)
        while True:
            t0 = self.now()
            time.sleep(QUIET_S)
            t1 = self.now()
            dt = t1["wall"] - t0["wall"]
            self.rate = {k: (t1[k] - t0[k]) / dt for k in ("client", "servers")}
            calm = sum(self.rate.values()) <= QUIET_CPU
            if calm or time.perf_counter() > end:
                self.background.append((self.rate["client"], self.rate["servers"]))
                return calm

    def measured(self, work, prepare=lambda: None, done=lambda state: None):
        """``work(prepare())`` between two quiet windows (``done(state)`` after each try):
        the CPU it cost by part (:meth:`since`) and its result; done again (at most
        :data:`TRIES` times) when others' work through the client or servers disturbed a
        window, the last try kept and counted in ``disturbed``."""
        for k in range(TRIES):
            state = prepare()
            try:
                self.quiet()
                t0 = self.now()
                out = work(state)
                cpu = self.since(t0, self.now())
            finally:
                done(state)
            if self.quiet(0.0):
                break
        self.disturbed += k
        return cpu, out

    def since(self, t0, t1):
        dt = t1["wall"] - t0["wall"]
        d = {k: t1[k] - t0[k] for k in ("rank", "client", "servers", "node")}
        for k, r in self.rate.items():
            d[k] -= r * dt
        d["paid"] = d["rank"] + d["client"] + d["servers"]
        d["wall"] = dt
        return d


def _server_copies(paths, mount):
    """The files behind ``paths`` on the testbed's bricks (scripts/pfs-local.sh), where the
    data lie on its mount: evicting them too empties the servers' cache without
    drop_caches (which would empty every other process's too)."""
    try:
        with open(TESTBED_STATE) as f:
            st = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return []
    if os.path.realpath(st.get("MOUNT", "")) != mount:
        return []
    out = []
    for p in paths:
        rel = os.path.relpath(os.path.realpath(p), mount)
        for b in sorted(glob.glob(os.path.join(st.get("DATA", "/nonexistent"), "brick*"))):
            if os.path.exists(os.path.join(b, rel)):
                out.append(os.path.join(b, rel))
    return out


def _cold(ds, drop, copies=()):
    """Every file of ``ds`` out of the page cache (hpcio's eviction; the servers' copies
    ``copies`` too; drop_caches with ``drop``); the resident bytes left."""
    evict(ds, None, drop=drop)
    for p in copies:
        evict_file(p)
    return resident_bytes(ds.paths)


def _epoch(ds, reader, opts, plan, meter, comm, cold=None):
    """One epoch of ``plan`` through the trainer's read-only loader, after ``cold()`` where
    given; (CPU by part, records, bytes delivered, bytes the storage sent: pages resident
    after less before). The reader is made after the cache state is set (a mapping reader
    maps nothing stale)."""

    def prepare():
        left = cold() if cold else resident_bytes(ds.paths)
        return make_reader(reader, ds, comm, **opts), ReadOnly(prefetch=2), left

    def work(state):
        r, loader, left = state
        for _ in loader.run(r.epoch(plan), lease=r.lease):
            pass
        return r.stats.records, r.stats.bytes, resident_bytes(ds.paths) - left

    def done(state):
        state[1].close()
        state[0].close()
    cpu, out = meter.measured(work, prepare, done)
    return (cpu,) + out


def reader_costs(ds, reader, opts, plan, meter, comm, cold):
    """One repeat of a reader: cold epoch, then hot; its figures (see the module). A reader
    whose reads leave no page in the cache (O_DIRECT) reads from the storage hot as cold:
    its CPU is not split, and both figures are None."""
    c, n, nbytes, sent = _epoch(ds, reader, opts, plan, meter, comm, cold)
    h, n2, _, _ = _epoch(ds, reader, opts, plan, meter, comm)
    if not n or n != n2:
        raise HpcioError(f"{reader}: the epochs delivered {n} and {n2} records")
    mib = sent / MIB
    cached = sent >= 0.5 * nbytes
    per = {k: (c[k] - h[k]) / mib * 1e3 if cached else None
           for k in ("rank", "client", "servers", "paid")}
    return {"cpu_us_per_sample": h["rank"] / n * 1e6 if cached else None,
            "cpu_ms_per_mib": per["paid"],
            "outside_cpu_ms_per_mib": per["client"] + per["servers"] if cached else None,
            "parts_ms_per_mib": {k: per[k] for k in ("rank", "client", "servers")},
            "cold_cpu_us_per_sample": c["paid"] / n * 1e6,
            "hot_cpu_us_per_sample": h["paid"] / n * 1e6,
            "storage_mib_per_sample": mib / n, "cold_s": c["wall"], "hot_s": h["wall"]}


def _preads(ds, ids, size, meter, cold):
    """Cold ``pread`` of ``size`` bytes (None: the whole record) at each record's start;
    (CPU paid, wall per call, bytes the storage sent)."""
    idx = ds.index

    def prepare():
        return cold(), [os.open(p, os.O_RDONLY) for p in ds.paths]

    def work(state):
        left, fds = state
        walls = np.empty(len(ids))
        for k, i in enumerate(ids):
            n = int(idx.length[i]) if size is None else min(size, int(idx.length[i]))
            w0 = time.perf_counter()
            os.pread(fds[int(idx.file[i])], n, int(idx.offset[i]))
            walls[k] = time.perf_counter() - w0
        return walls, resident_bytes(ds.paths) - left

    def done(state):
        for fd in state[1]:
            os.close(fd)
    cpu, (walls, sent) = meter.measured(work, prepare, done)
    return cpu["paid"], walls, sent


def storage_costs(ds, records, meter, cold):
    """One repeat of the storage probes: small then large cold preads; their figures."""
    ids = np.linspace(0, len(ds.index) - 1, min(records, len(ds.index))).astype(np.int64)
    c_s, w_s, b_s = _preads(ds, ids, SMALL, meter, cold)
    c_l, _, b_l = _preads(ds, ids, None, meter, cold)
    per_byte = (c_l - c_s) / (b_l - b_s) if b_l > b_s else float("nan")
    return {"latency_us": float(np.median(w_s)) * 1e6,
            "request_cpu_us": (c_s - per_byte * b_s) / len(ids) * 1e6,
            "cpu_ms_per_mib_raw": per_byte * MIB * 1e3,
            "small_mib_per_request": b_s / MIB / len(ids)}


def _spin(seconds, conn):
    """Spin for ``seconds``, sending back the lengths of the stretches this process ran
    without a gap over :data:`GAP_S` (a gap: another process held the core)."""
    t = time.perf_counter
    start = last = t()
    end = start + seconds
    runs = []
    while last < end:
        now = t()
        if now - last > GAP_S:
            runs.append(last - start)
            start = now
        last = now
    conn.send(runs[1:])     # the first stretch began before the others were running
    conn.close()


def run_queue_quantum(seconds=1.0, procs=None):
    """The node's run queue as a rank meets it when the cores are oversubscribed: one more
    spinning process than cores, each stretch one ran before another took its core; the
    90th percentile stretch in ms (the simulation's ``cpu_quantum_us``: the longest a burst
    holds a core; other processes waking cut many stretches short, more the busier the
    node), or None when no process was ever preempted."""
    ctx = multiprocessing.get_context("fork")
    ends, kids = [], []
    for _ in range(procs or (os.cpu_count() or 1) + 1):
        a, b = ctx.Pipe(False)
        kids.append(ctx.Process(target=_spin, args=(seconds, b), daemon=True))
        kids[-1].start()
        ends.append(a)
    runs = [r for a in ends for r in a.recv()]
    for k in kids:
        k.join()
    return float(np.percentile(runs, QUANTUM_PERCENTILE)) * 1e3 if runs else None


def barrier_costs(runs):
    """Per rank count, the runs' barrier per step in ms (median, spread over the runs)."""
    dirs, problems, _ = expand(runs)
    if problems:
        raise HpcioError(problems[0])
    got = {}
    for d, _ in dirs:
        w = workload_from_run(d)
        if w.sync and w.ranks > 1 and w.barrier_s > 0:
            got.setdefault(w.ranks, []).append(w.barrier_s * 1e3)
    return {str(p): figure(v, 4) for p, v in sorted(got.items())}


def _summary(each):
    """Per-repeat dicts -> one figure per key (nested dicts: per key within)."""
    out = {}
    for k, v in each[0].items():
        if isinstance(v, dict):
            out[k] = {j: figure([e[k][j] for e in each]) for j in v}
        elif k != "records":
            out[k] = figure([e[k] for e in each])
    return out


def measure(data, readers, repeat=3, batch=16, records=None, shuffle="global",
            probe_records=256, servers=SERVERS, runs=(), drop=False, say=print):
    """Every figure of the module's docstring, ``repeat`` times interleaved; the costs
    file's content (``say``: a line per repeat)."""
    ds = open_dataset(data)
    quanta = [run_queue_quantum() for _ in range(repeat)]   # before MPI starts: it forks
    from mpi4py import MPI  # MPI starts only when something is measured (--help needs none)
    n = len(ds.index) if records is None else min(int(records), len(ds.index))
    plan = make_plan(n, 1, 0, batch, shuffle=shuffle)
    mount = _mount_point(ds.paths[0])
    meter = Meter(mount, set(servers))
    copies = _server_copies(ds.paths, mount)

    def cold():
        return _cold(ds, drop, copies)
    load0 = loadavg()
    each = {label: [] for label, _, _ in readers}
    probes = []
    for k in range(repeat):
        t0 = time.perf_counter()
        for label, r, opts in readers:
            each[label].append(reader_costs(ds, r, opts, plan, meter, MPI.COMM_WORLD, cold))
        probes.append(storage_costs(ds, probe_records, meter, cold))
        say(f"bench: repeat {k + 1} of {repeat} done in {time.perf_counter() - t0:.1f} s")
    out = {"definitions": DEFINITIONS,
           "measured_on": {"host": socket.gethostname(), "data": os.path.abspath(data),
                           "fs_type": fs_type(ds.paths[0]), "records": n, "batch": batch,
                           "shuffle": shuffle, "mean_record_bytes": round(
                               float(ds.index.length[:n].mean()), 1),
                           "repeats": repeat, "probe_records": probe_records,
                           "client_processes": len(meter.client),
                           "server_processes": len(meter.servers),
                           "server_copies_evicted": len(copies), "drop_caches": drop,
                           "measurements_redone": meter.disturbed,
                           "background_cpu_per_s": {
                               "client": figure([b[0] for b in meter.background]),
                               "servers": figure([b[1] for b in meter.background])},
                           "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                           "load_1min_before": load0, "load_1min_after": loadavg()},
           "readers": {r: _summary(v) for r, v in each.items()},
           "storage": _summary(probes),
           "node": {"run_queue_quantum_ms": figure(quanta)}}
    if runs:
        out["barrier_ms_per_step"] = barrier_costs(runs)
    return out


def _readers(text):
    out = []
    for item in text.split(","):
        _, name, opts = reader_spec(item.strip())
        access = opts.get("access")
        # the label calibration knows the reader's runs by (Workload.label)
        out.append((name if access in (None, "get") else f"{name}-{access}", name, opts))
    return out


def add_parser(sub):
    """The ``bench`` subcommand."""
    b = sub.add_parser("bench", help="measure the readers' CPU per sample and per MiB, the "
                       "storage's latency: a costs file for calibrate --costs",
                       description=__doc__.split("\n\n")[0])
    b.add_argument("--data", required=True, metavar="DIR", help="the dataset the runs read "
                   "(on the file system they read it from)")
    b.add_argument("--readers", type=_readers, default="naive,coordinated",
                   help="readers to measure, comma-separated")
    b.add_argument("--repeat", type=integer(1), default=3, help="repeats, interleaved")
    b.add_argument("--batch", type=integer(1), default=16, help="batch size")
    b.add_argument("--records", type=integer(16), default=None,
                   help="records an epoch reads (default: all)")
    b.add_argument("--probe-records", type=integer(2), default=256,
                   help="records the cold pread probes read")
    b.add_argument("--servers", default=",".join(SERVERS), metavar="NAME[,NAME]",
                   help="process names of storage servers whose CPU counts where they run "
                        "on this node ('' for none)")
    b.add_argument("--runs", nargs="+", default=(), metavar="RUN_OR_SWEEP",
                   help="runs whose barrier per step to keep, per rank count")
    b.add_argument("--drop-caches", dest="drop", action="store_true",
                   help="also drop the kernel's caches before each cold set (root; it "
                        "empties every process's cache: on a shared node, the testbed's "
                        "bricks' copies are evicted without it)")
    b.add_argument("-o", "--output", required=True, metavar="COSTS.yaml",
                   help="the costs file to write (atomically)")
    b.add_argument("--force", action="store_true",
                   help="replace an -o file that is not a costs file")
    b.set_defaults(func=_bench)
    return b


def _is_costs(path):
    try:
        with open(path) as f:
            return isinstance((d := yaml.safe_load(f)), dict) and "hpcio_costs" in d
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return False


def _bench(args):
    claim_file(args.output, "-o", _is_costs, args.force)
    if not os.path.isdir(args.data):
        raise HpcioError(f"--data {args.data}: not a dataset directory")
    costs = measure(args.data, args.readers, args.repeat, args.batch, args.records,
                    probe_records=args.probe_records,
                    servers=tuple(s for s in args.servers.split(",") if s), runs=args.runs,
                    drop=args.drop)
    for r, figs in costs["readers"].items():
        print(f"{r}: CPU {_fig(figs['cpu_us_per_sample'], 'us/sample')} hot, "
              f"{_fig(figs['cpu_ms_per_mib'], 'ms/MiB')} from the storage (outside the "
              f"rank: {_fig(figs['outside_cpu_ms_per_mib'], 'ms/MiB')})")
    s = costs["storage"]
    print(f"storage: latency {_fig(s['latency_us'], 'us')} per cold 4 KiB pread; "
          f"{_fig(s['request_cpu_us'], 'us')} CPU per request, "
          f"{_fig(s['cpu_ms_per_mib_raw'], 'ms/MiB')}")
    print(f"node: run queue quantum {_fig(costs['node']['run_queue_quantum_ms'], 'ms')} "
          f"(one more spinning process than cores)")
    for p, f in (costs.get("barrier_ms_per_step") or {}).items():
        print(f"barrier at {p} ranks: {_fig(f, 'ms/step')}")
    write_costs(args.output, costs)
    print(f"wrote {args.output}")
    return 0


def _fig(f, unit):
    if f is None:
        return "not measured"
    return f"{f['median']:g} {unit} ({f['min']:g}-{f['max']:g})"
