"""A run's provenance (``provenance.json``): which hpcio made it, on what, and a hash of
the workload, so that runs can be grouped and compared across machines as MLPerf Storage
groups its runs.

``workload_hash`` is the sha256 of :func:`workload` of the run's config: the settings that
define the work (``WORKLOAD_KEYS``), as canonical JSON (sorted keys, no spaces). Two runs of
the same workload hash alike on any machine; any change to one of these settings changes
it. Left out on purpose, because they say where or how a run was made, not what it did:
paths (data, out, checkpoint directory), hosts, times, the node count and device, the
cache mode (reported apart: ``cache``), thread counts and intervals, tracing, learning
rate and momentum (they change no time).
"""

import hashlib
import json
import os
import subprocess

from .. import __version__
from .probes import meminfo

__all__ = ["WORKLOAD_KEYS", "WORKLOAD_VERSION", "workload", "workload_hash", "git_state",
           "host_memory", "provenance"]

# part of the hash: a new definition of the workload hashes apart (2: the emulated
# allreduce's declared fabric, exchange.fabric, joined the model's settings)
WORKLOAD_VERSION = 2
# group -> config.yaml keys (``dataset.x``: a key of config's dataset block)
WORKLOAD_KEYS = {
    "dataset": ("dataset.format", "dataset.encoding", "dataset.shape", "dataset.dtype",
                "dataset.classes", "dataset.records", "dataset.shards",
                "dataset.record_bytes", "dataset_bytes"),
    "plan": ("batch", "shuffle", "seed", "epochs", "steps_per_epoch", "drop_last", "block",
             "window"),
    "model": ("model", "compute_time", "compute_dist", "compute_std", "exchange.bytes",
              "exchange.via", "exchange.fabric", "checkpoint_every", "preprocess",
              "augment", "offline"),
    "reader": ("reader", "reader_options"),
    "job": ("ranks",),
}


def _get(config, key):
    head, _, tail = key.partition(".")
    v = config.get(head)
    return (v or {}).get(tail) if tail else v


def workload(config):
    """The workload-defining settings of ``config`` (config.yaml's values), grouped as
    ``WORKLOAD_KEYS``; a key the config lacks is null."""
    out = {"version": WORKLOAD_VERSION}
    for group, keys in WORKLOAD_KEYS.items():
        out[group] = {k: _get(config, k) for k in keys}
    return out


def workload_hash(config):
    """sha256 (hex) of :func:`workload` as canonical JSON."""
    text = json.dumps(workload(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def git_state(path=None):
    """{"commit", "dirty"} of the git checkout holding ``path`` (this package by default),
    or None: no checkout, no git, or git failing (a foreign owner) must not stop a run."""
    path = path or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    d = path
    while not os.path.exists(os.path.join(d, ".git")):
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up

    def git(*args):
        return subprocess.run(["git", "-C", path, *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout
    try:
        git("ls-files", "--error-unmatch", "__init__.py")  # hpcio, not a repo around it
        commit = git("rev-parse", "HEAD").strip()
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": dirty}


def host_memory():
    """This node's MemTotal in bytes, or None."""
    kib = meminfo("MemTotal")
    return None if kib is None else int(kib)


def provenance(env, config, gathered):
    """provenance.json's document from rank 0's env.json document, the config and
    ``gathered``: every rank's (hostname, MemTotal bytes), from the one gather at start
    (:func:`hpcio.measure.rundir.gather_hosts`)."""
    hosts = {}
    for name, mem in gathered:
        h = hosts.setdefault(name, {"host": name, "ranks": 0, "mem_total_bytes": mem})
        h["ranks"] += 1
    packages = env.get("packages") or {}
    slurm = env.get("slurm") or {}
    mpi = (env.get("mpi") or {}).get("library", "").strip().splitlines()
    traced = env.get("darshan")  # the Darshan runtime that writes the run's log
    return {
        "hpcio_version": __version__,
        "git": git_state(),
        "workload_hash": workload_hash(config),
        "workload": workload(config),
        "ranks": len(gathered),
        "hosts": list(hosts.values()),
        "mpi_library": " ".join(mpi[0].split()) if mpi else None,
        "data_fs_type": (env.get("data") or {}).get("fs_type"),
        "slurm": {"job_id": env.get("slurm_job_id"),
                  "nodes": slurm.get("SLURM_JOB_NODELIST"),
                  "num_nodes": slurm.get("SLURM_JOB_NUM_NODES")}
        if env.get("slurm_job_id") else None,
        "versions": {"python": env.get("python"), "torch": packages.get("torch"),
                     "numpy": packages.get("numpy"), "mpi4py": packages.get("mpi4py"),
                     "darshan": traced.get("version") if traced else None},
    }
