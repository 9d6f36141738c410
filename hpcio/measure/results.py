"""The run directory: config, environment, per-rank records, summary; and SIGTERM.

Layout of a run directory (every file written atomically: a reader sees the old file or
the complete new one)::

    config.yaml     the full resolved configuration (config file + CLI overrides + derived)
    env.json        versions, MPI library, hosts per rank, Slurm job, data file system,
                    Lustre striping, cache mode, readahead
    rank-<r>.npz    rank r's per-step arrays (hpcio.measure.steps.STEP_FIELDS)
    rank-<r>.json   rank r's counters per epoch, checkpoints, sampler samples, summary
    summary.json    the run's figures (hpcio.analysis.summary.summarize) + cut_short;
                    disk_read_bytes = bytes the data's whole disk read from training start
                    to end (hpcio.measure.probes: node-wide, one rank per node, summed over
                    nodes: it counts every process's reads of that disk, read-ahead included)
    summary.txt     the table printed at the end
"""

import importlib
import io
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import yaml

from ..errors import HpcioError
from ..fsutil import atomic_json, atomic_write, free_bytes, fs_type
from ..mpiutil import on_root
from .probes import read_ahead_kb

__all__ = ["RunDir", "default_name", "capture_env", "results_bytes", "check_space"]

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
        def make():
            path = os.path.abspath(out)
            try:
                if os.path.isdir(path) and os.listdir(path):
                    raise HpcioError(f"--out {out}: exists and is not empty (results are "
                                     f"never overwritten)")
                os.makedirs(path, exist_ok=True)
            except OSError as e:
                raise HpcioError(f"--out {out}: {e.strerror}")
            return path
        return cls(on_root(comm, make, share=True))

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
                 "read_ahead_kb": read_ahead_kb(data_root),
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
