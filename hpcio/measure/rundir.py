"""The run directory: config, environment, per-rank records, summary; and the thread
that flushes a rank's records while it trains.

Layout of a run directory (every file written atomically: a reader sees the old file or
the complete new one; with the user's umask)::

    .hpcio-run      the claim: created with O_EXCL before anything else, so two runs
                    never share (and overwrite) one directory
    config.yaml     the full resolved configuration (config file + CLI overrides + derived)
    env.json        versions, MPI library, hosts per rank, Slurm job, data file system,
                    Lustre striping, cache mode, readahead
    provenance.json hpcio version and git commit, the workload's hash, hosts with their
                    ranks and memory, MPI library, data file system, Slurm job, versions
                    (:mod:`hpcio.measure.provenance`)
    rank-<r>.npz    rank r's per-step arrays (hpcio.measure.steps.STEP_FIELDS)
    rank-<r>.json   rank r's counters per epoch, checkpoints, sampler samples, summary;
                    each epoch's ``rss_bytes`` is the rank's resident memory
                    (:func:`hpcio.measure.probes.rss_bytes`) at the epoch's end, its
                    loader stopped: flat over epochs unless state outlives its epoch;
                    ``partial: true`` while the run is under way: both rank files are
                    rewritten at every epoch end and every ``--flush-interval`` seconds,
                    so a crash, SIGKILL or a lost node loses at most that much
    summary.json    the run's figures (hpcio.explain.summary.run_summary) + cut_short;
                    disk_read_bytes = bytes the data's whole disk read from training start
                    to end (hpcio.measure.probes: node-wide, one rank per node, summed over
                    nodes: it counts every process's reads of that disk, read-ahead included)
    summary.txt     the table printed at the end (``python -m hpcio.results summarize``
                    makes both from the rank files of a run that did not finish)
    darshan/        when traced: <run>.darshan, the Darshan log (:mod:`hpcio.measure.darshan`)
    trace/          when traced (``--trace``): rank-<r>.pfw.gz, rank r's steps as a
                    DFTracer trace (:mod:`hpcio.measure.trace`), unless ``--trace-dir``
                    puts them elsewhere
    checkpoints/    the model's checkpoints, unless ``--checkpoint-dir`` puts them elsewhere
    .lost-peer-said made by the first rank to say that the gradient exchange lost a peer,
                    so that it is said once (:mod:`hpcio.train.exchange`)
    error-rank-<r>.txt
                    rank r's traceback of an unexpected error (:func:`hpcio.errors.report_to`
                    names it itself: it is set up before anything else, this module included)

:class:`RunDir` is the one place that knows these names (error-rank-<r>.txt aside): it
writes each file and reads it back, every file read through :mod:`hpcio.measure.schema`
(bounded, checked against its schema: run directories of older versions miss files and
fields, and say so there).
"""

import glob
import importlib
import io
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import yaml

from . import schema
from ..errors import HpcioError, describe
from ..fsutil import atomic_json, atomic_write, free_bytes, fs_type
from ..mpiutil import on_root
from .probes import meminfo, read_ahead_kb
from .provenance import host_memory

__all__ = ["RunDir", "Flusher", "default_name", "capture_env", "gather_hosts",
           "results_bytes", "check_space", "RUN_MARKER"]

RUN_MARKER = ".hpcio-run"
_RANK_FILE = re.compile(r"rank-(\d+)\.(npz|json)$")  # RunDir.RANK_STEPS and RANK_INFO

PACKAGES = ("hpcio", "numpy", "torch", "mpi4py", "mpich", "lmdb", "plyvel", "h5py", "PIL",
            "yaml", "tqdm", "pynvml", "horovod")


def default_name(reader, model, ranks):
    """``<timestamp>-<reader>-<model>-n<ranks>``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{reader}-{model}-n{ranks}"


class RunDir:
    """A run's results directory: where each of its files is (the names in the module
    docstring), writing them and reading them back. :meth:`create` is collective: rank 0
    makes it and broadcasts the path (or the error).

    The readers return ``(value, gaps)`` of :func:`hpcio.measure.schema.load` and raise
    FileNotFoundError when the file is missing, :class:`hpcio.measure.schema.Invalid`
    (one line) when it cannot be used."""

    MARKER = RUN_MARKER
    CONFIG = "config.yaml"
    ENV = "env.json"
    PROVENANCE = "provenance.json"
    SUMMARY = "summary.json"
    SUMMARY_TEXT = "summary.txt"
    DARSHAN = "darshan"
    TRACE = "trace"
    TRACE_FILE = "rank-{rank}.pfw"
    CHECKPOINTS = "checkpoints"
    LOST_PEER_SAID = ".lost-peer-said"
    RANK_STEPS = "rank-{rank}.npz"
    RANK_INFO = "rank-{rank}.json"

    def __init__(self, path: str):
        self.path = path

    @classmethod
    def create(cls, out: str, comm=None) -> "RunDir":
        """Claim ``out`` for this run: made here, or an existing empty directory; the
        claim is a marker file created with O_EXCL, so of two runs given the same
        ``out`` exactly one gets it and the other fails with one line, whatever the
        timing."""
        def make():
            path = os.path.abspath(out)
            try:
                try:
                    os.makedirs(path, exist_ok=True)
                except FileExistsError:
                    raise HpcioError(f"--out {out}: exists and is not a directory")
                if os.listdir(path):
                    raise FileExistsError
                fd = os.open(os.path.join(path, RUN_MARKER),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                raise HpcioError(f"--out {out}: exists and is not empty (results are "
                                 f"never overwritten; give a new directory)")
            except OSError as e:
                raise HpcioError(f"--out {out}: {e.strerror}")
            with os.fdopen(fd, "w") as f:
                f.write(f"{socket.gethostname()} {os.getpid()} "
                        f"{time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
            return path
        return cls(on_root(comm, make, share=True))

    @classmethod
    def is_run(cls, path: str) -> bool:
        """Whether ``path`` is a run directory (it has a config.yaml)."""
        return os.path.isfile(os.path.join(path, cls.CONFIG))

    # --- where each file is -------------------------------------------------------------

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)

    @property
    def config_file(self) -> str:
        return self.file(self.CONFIG)

    @property
    def env_file(self) -> str:
        return self.file(self.ENV)

    @property
    def provenance_file(self) -> str:
        return self.file(self.PROVENANCE)

    @property
    def summary_file(self) -> str:
        return self.file(self.SUMMARY)

    @property
    def summary_text_file(self) -> str:
        return self.file(self.SUMMARY_TEXT)

    @property
    def darshan_dir(self) -> str:
        return self.file(self.DARSHAN)

    def darshan_log(self, name: str) -> str:
        """Where the run's Darshan log goes: darshan/NAME.darshan."""
        return os.path.join(self.darshan_dir, f"{name}.darshan")

    def darshan_logs(self) -> list:
        """The Darshan logs in darshan/, sorted."""
        return sorted(glob.glob(os.path.join(glob.escape(self.darshan_dir), "*.darshan")))

    def trace_file(self, rank: int, directory: str = None, gz: bool = True) -> str:
        """Rank ``rank``'s DFTracer trace: trace/rank-<r>.pfw.gz, or in ``directory``."""
        name = self.TRACE_FILE.format(rank=rank) + (".gz" if gz else "")
        return os.path.join(directory or self.file(self.TRACE), name)

    def rank_steps_file(self, rank: int) -> str:
        return self.file(self.RANK_STEPS.format(rank=rank))

    def rank_info_file(self, rank: int) -> str:
        return self.file(self.RANK_INFO.format(rank=rank))

    def rank_files(self, ranks: int) -> dict:
        """{"npz": ranks with a step file, "json": ranks with an info file}, of ranks below
        ``ranks``: one listing of the directory, however large the rank count a config
        claims."""
        out = {"npz": set(), "json": set()}
        try:
            names = os.listdir(self.path)
        except OSError:
            return out
        for n in names:
            m = _RANK_FILE.match(n)
            if m and int(m.group(1)) < ranks:
                out[m.group(2)].add(int(m.group(1)))
        return out

    # --- writing (atomic: a reader sees the old file or the complete new one) -------------

    def json(self, name: str, obj, compact: bool = False) -> None:
        atomic_json(self.file(name), obj, compact=compact)

    def yaml(self, name: str, obj) -> None:
        data = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).encode()
        atomic_write(self.file(name), lambda f: f.write(data))

    def text(self, name: str, text: str) -> None:
        data = text.encode()
        atomic_write(self.file(name), lambda f: f.write(data))

    def npz(self, name: str, arrays: dict) -> None:
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write(self.file(name), lambda f: f.write(buf.getbuffer()))

    def write_config(self, config: dict) -> None:
        self.yaml(self.CONFIG, config)

    def write_env(self, env: dict) -> None:
        self.json(self.ENV, env)

    def write_provenance(self, doc: dict) -> None:
        self.json(self.PROVENANCE, doc)

    def write_rank(self, rank: int, arrays: dict, info: dict, compact: bool = False) -> None:
        """Rank ``rank``'s step arrays, then its counters (``compact``: one line, for the
        frequent flushes of a run under way). In that order: a rank killed between the two
        leaves its counters one flush behind its steps (``steps_flushed`` the earlier
        count), never ahead of them."""
        self.npz(self.RANK_STEPS.format(rank=rank), arrays)
        self.json(self.RANK_INFO.format(rank=rank), info, compact=compact)

    def write_summary(self, summary: dict, text: str) -> None:
        self.json(self.SUMMARY, summary)
        self.text(self.SUMMARY_TEXT, text)

    # --- reading (see the class docstring) -----------------------------------------------

    def config(self):
        return schema.load(self.config_file, "config")

    def env(self):
        return schema.load(self.env_file, "env")

    def provenance(self):
        return schema.load(self.provenance_file, "provenance")

    def summary(self):
        return schema.load(self.summary_file, "summary")

    def summary_text(self) -> str:
        return schema.read_bytes(self.summary_text_file,
                                 schema.LIMITS["json"]).decode("utf-8", "replace")

    def rank_info(self, rank: int):
        return schema.load(self.rank_info_file(rank), "rank")

    def rank_steps(self, rank: int, required, optional=(), nonnegative=()) -> dict:
        """Rank ``rank``'s step columns (:func:`hpcio.measure.schema.load_columns`)."""
        return schema.load_columns(self.rank_steps_file(rank), required, optional,
                                   nonnegative)


class Flusher(threading.Thread):
    """Calls ``write()`` every ``interval`` seconds and soon after each :meth:`kick` (an
    epoch's end), on its own thread: the training thread pays one ``Event.set`` per epoch
    and nothing per step. ``write`` snapshots what it needs (it runs beside training).

    Flushing takes at most 1% of the run's CPU: a flush that used s seconds of CPU is
    followed by at least 99 s of rest, kicks included (a long run's samples make one
    costly, and the JSON encoder holds the GIL the training thread needs;
    benchmarks/design.md). An error
    is said once on stderr and the next flush tries again; the end-of-run write raises it
    properly."""

    def __init__(self, write, interval, label="hpcio"):
        super().__init__(name="hpcio-flusher", daemon=True)
        self.write, self.interval, self.label = write, float(interval), label
        self._wake = threading.Event()
        self._halt = threading.Event()
        self.failed = None

    def run(self):
        spent = 0.0
        while not self._halt.wait(99 * spent):
            self._wake.wait(max(0.0, self.interval - 100 * spent))
            self._wake.clear()
            if self._halt.is_set():
                return
            t = time.thread_time()
            self.flush()
            spent = time.thread_time() - t

    def flush(self):
        try:
            self.write()
        except Exception as e:  # a flush must not end training; the final write will
            if self.failed is None:
                print(f"{self.label}: flushing results failed: {describe(e)}; retrying "
                      f"every {self.interval:g} s", file=sys.stderr, flush=True)
            self.failed = e

    def kick(self):
        self._wake.set()

    def stop(self):
        """No flush after this returns (one under way is finished first)."""
        self._halt.set()
        self._wake.set()
        if self.is_alive():
            self.join()


def results_bytes(ranks, steps, fields, seconds=None, sample_interval=0.5):
    """A generous estimate of what a run writes into its directory: per rank its step
    arrays (``steps`` rows of ``fields`` float64 columns), its JSON (counters and the
    sampler's samples: 256 KiB, plus 200 bytes a sample when the run's length is known),
    and 1 MiB for the run's own files."""
    samples = 200 * seconds / sample_interval if seconds else 0
    return int(ranks * (steps * fields * 8 + (256 << 10) + samples) + (1 << 20))


def check_space(path, nbytes, what):
    """Refuse, before a run, to start one whose results cannot be written: a full disk at
    the end would lose everything it measured."""
    free = free_bytes(path)
    if free is not None and free < nbytes:
        raise HpcioError(f"{what} {path}: {free:,} bytes free, the run needs about "
                         f"{nbytes:,} (disk or quota full)")


_DISTS = {"PIL": "pillow", "yaml": "pyyaml", "pynvml": "nvidia-ml-py"}


def _version(mod):
    """The installed version of ``mod`` (its distribution's), or None if absent."""
    try:
        return version(_DISTS.get(mod, mod))
    except PackageNotFoundError:
        pass
    try:
        m = importlib.import_module(mod)
    except Exception:
        return None
    return str(getattr(m, "__version__", "unknown"))


def _lfs_getstripe(path):
    lfs = shutil.which("lfs")
    if not lfs:
        return None
    try:
        p = subprocess.run([lfs, "getstripe", path], capture_output=True, text=True,
                           timeout=30)
        return (p.stdout + p.stderr)[-20000:]
    except (OSError, subprocess.SubprocessError) as e:
        return f"lfs getstripe failed: {e}"


def gather_hosts(world):
    """Every rank's (hostname, MemTotal bytes), in rank order: one allgather, once at the
    start (env.json's hosts and provenance.json's come from it)."""
    mine = (socket.gethostname(), host_memory())
    return world.comm.allgather(mine) if world.comm else [mine]


def capture_env(world, data_root, cache_mode, reader_options=None, device=None,
                gathered=None):
    """What is needed to interpret a result later. Collective (:func:`gather_hosts`,
    unless its result is given as ``gathered``); rank 0's dict is the one written."""
    gathered = gathered if gathered is not None else gather_hosts(world)
    hosts = [name for name, _ in gathered]
    if world.rank != 0:
        return None
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    env = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": {m: _version(m) for m in PACKAGES},
        "mpi": {"library": MPI.Get_library_version().strip(),
                "standard": ".".join(map(str, MPI.Get_version())),
                "vendor": list(map(str, MPI.get_vendor())),
                "thread_level": MPI.Query_thread()},
        "ranks": world.size,
        "nodes": world.nodes,
        "hosts": hosts,
        "cpus": os.cpu_count(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "slurm": {k: v for k, v in os.environ.items() if k.startswith("SLURM_")},
        "data": {"path": data_root, "fs_type": fs_type(data_root),
                 "read_ahead_kb": read_ahead_kb(data_root),
                 "lfs_getstripe": _lfs_getstripe(data_root)},
        "cache_mode": cache_mode,
        "reader_options": reader_options or {},
    }
    torch = sys.modules.get("torch")  # the run's own: an emulated run may not import it
    if torch is None:
        env["torch"] = {"imported": False}
    else:
        env["torch"] = {"imported": True, "threads": torch.get_num_threads(),
                        "cuda": torch.cuda.is_available(),
                        "cuda_version": torch.version.cuda,
                        "devices": [torch.cuda.get_device_name(i)
                                    for i in range(torch.cuda.device_count())]
                        if torch.cuda.is_available() else [],
                        "device": str(device) if device is not None else None}
    total = meminfo("MemTotal")
    if total is not None:
        env["mem_total_kib"] = total // 1024
    return env
