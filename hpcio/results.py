"""The run directory: config, environment, per-rank records, summary; and SIGTERM.

Layout of a run directory (every file written atomically: a reader sees the old file or
the complete new one)::

    config.yaml     the full resolved configuration (config file + CLI overrides + derived)
    env.json        versions, MPI library, hosts per rank, Slurm job, data file system,
                    Lustre striping, cache mode, readahead
    rank-<r>.npz    rank r's per-step arrays (hpcio.metrics.STEP_FIELDS)
    rank-<r>.json   rank r's counters per epoch, checkpoints, sampler samples, summary
    summary.json    the run's figures (hpcio.metrics.summarize) + cut_short; disk_read_bytes
                    = bytes the data's block device read from training start to end
                    (/proc/diskstats sectors x 512, one rank per node, summed over nodes:
                    it counts every process's reads of that disk, the readahead included)
    summary.txt     the table printed at the end

A Slurm time limit sends SIGTERM to every task (then SIGKILL after KillWait, 30 s by
default); ``mpiexec`` forwards SIGTERM to its ranks too. :class:`StopFlag` turns the signal
into a flag; :class:`StopVote` makes every rank stop at the *same* step even when the
signal reaches them at different times, without a blocking collective per step, so no rank
is left waiting in a collective the others never enter.
"""

import collections
import importlib
import io
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import yaml

from .errors import HpcioError
from .fsutil import atomic_json, atomic_write, fs_type

__all__ = ["RunDir", "default_name", "capture_env", "readahead_kb", "StopFlag", "StopVote"]

PACKAGES = ("hpcio", "numpy", "torch", "mpi4py", "mpich", "lmdb", "h5py", "PIL", "yaml",
            "tqdm", "pynvml", "horovod")


def default_name(reader, model, ranks):
    """``<timestamp>-<reader>-<model>-n<ranks>``."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{reader}-{model}-n{ranks}"


class RunDir:
    """A run's results directory. :meth:`create` is collective: rank 0 makes it and
    broadcasts the path (or the error)."""

    def __init__(self, path):
        self.path = path

    @classmethod
    def create(cls, out, comm=None):
        path, err = None, None
        if comm is None or comm.rank == 0:
            path = os.path.abspath(out)
            try:
                if os.path.isdir(path) and os.listdir(path):
                    err = f"--out {out}: exists and is not empty (results are never " \
                          f"overwritten)"
                else:
                    os.makedirs(path, exist_ok=True)
            except OSError as e:
                err = f"--out {out}: {e.strerror}"
        if comm is not None and comm.size > 1:
            path, err = comm.bcast((path, err), root=0)
        if err:
            raise HpcioError(err, everywhere=True)
        return cls(path)

    def file(self, name):
        return os.path.join(self.path, name)

    def json(self, name, obj):
        atomic_json(self.file(name), obj)

    def yaml(self, name, obj):
        data = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False).encode()
        atomic_write(self.file(name), lambda f: f.write(data))

    def text(self, name, text):
        data = text.encode()
        atomic_write(self.file(name), lambda f: f.write(data))

    def npz(self, name, arrays):
        buf = io.BytesIO()
        np.savez(buf, **arrays)
        atomic_write(self.file(name), lambda f: f.write(buf.getbuffer()))


_DISTS = {"PIL": "pillow", "yaml": "pyyaml", "pynvml": "nvidia-ml-py"}


def _version(mod):
    """The installed version of ``mod`` (its distribution's), or None if absent."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(_DISTS.get(mod, mod))
    except PackageNotFoundError:
        pass
    try:
        m = importlib.import_module(mod)
    except Exception:
        return None
    return str(getattr(m, "__version__", "unknown"))


def readahead_kb(path):
    """The kernel readahead (KiB) of the block device holding ``path``
    (/sys/class/bdi/<major>:<minor>/read_ahead_kb), or None."""
    try:
        st = os.stat(path)
        with open(f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/"
                  "read_ahead_kb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


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


def capture_env(world, data_root, cache_mode, reader_options=None, device=None):
    """What is needed to interpret a result later. Collective (one allgather of host
    names); rank 0's dict is the one written."""
    hosts = world.comm.allgather(socket.gethostname()) if world.comm else [socket.gethostname()]
    if world.rank != 0:
        return None
    from mpi4py import MPI
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
                 "readahead_kb": readahead_kb(data_root),
                 "lfs_getstripe": _lfs_getstripe(data_root)},
        "cache_mode": cache_mode,
        "reader_options": reader_options or {},
    }
    try:
        import torch
        env["torch"] = {"threads": torch.get_num_threads(),
                        "cuda": torch.cuda.is_available(),
                        "cuda_version": torch.version.cuda,
                        "devices": [torch.cuda.get_device_name(i)
                                    for i in range(torch.cuda.device_count())]
                        if torch.cuda.is_available() else [],
                        "device": str(device) if device is not None else None}
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            env["mem_total_kib"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return env


class StopFlag:
    """Set by SIGTERM (a Slurm time limit, or ``kill``): the step loop checks it. The
    handler only sets a flag, so it is safe whatever the main thread was doing."""

    def __init__(self, signals=(signal.SIGTERM,)):
        self.signum = None
        self._old = {}
        for s in signals:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread
                pass

    def _handle(self, signum, frame):
        self.signum = signum

    def __bool__(self):
        return self.signum is not None

    def restore(self):
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}


class StopVote:
    """Agree on stopping at the same step on every rank, without blocking every step.

    Every ``every`` steps each rank posts a nonblocking MAX-allreduce of its flag (raised
    at any step since the last post) and completes the one it posted ``every`` steps
    earlier; every rank thus acts on the same vote at the same step, at most
    ``2 * every`` steps after the signal. Ranks may drift apart by up to ``every`` steps
    before a fast one waits in the vote: the vote does not couple ranks that training
    itself does not couple (the emulated model has no allreduce; DDP couples them every
    step anyway). One vote is in flight at a time: MPICH 5.0.2 was seen to corrupt its heap
    with eight nonblocking allreduces outstanding on one communicator. The vote uses its
    own duplicate of the communicator, so it never mixes with the readers' collectives.
    :meth:`settle` completes the vote in flight and takes one more (at an epoch's end)."""

    def __init__(self, comm, every=4):
        self.comm = comm.Dup() if comm is not None and comm.size > 1 else None
        self.every = max(1, int(every))
        self.count = 0
        self.local = False
        self.pending = None

    def _finish(self):
        if self.pending is None:
            return False
        req, _, r = self.pending
        req.Wait()
        self.pending = None
        return bool(r[0])

    def poll(self, local):
        """Count a step with this rank's flag; True when the ranks have agreed to stop."""
        self.local = self.local or bool(local)
        if self.comm is None:
            return self.local
        self.count += 1
        if self.count % self.every:
            return False
        from mpi4py import MPI
        stop = self._finish()
        send = np.array([1 if self.local else 0], dtype=np.int32)
        recv = np.zeros(1, dtype=np.int32)
        self.pending = (self.comm.Iallreduce(send, recv, op=MPI.MAX), send, recv)
        return stop

    def settle(self, local):
        """Complete the vote in flight and take one more with ``local``: True if any rank
        asked to stop (collective; the same answer on every rank)."""
        self.local = self.local or bool(local)
        if self.comm is None:
            return self.local
        from mpi4py import MPI
        stop = self._finish()
        return bool(self.comm.allreduce(1 if (self.local or stop) else 0, op=MPI.MAX))

    def close(self):
        if self.comm is not None:
            self._finish()
            self.comm.Free()
            self.comm = None
