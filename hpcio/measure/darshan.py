"""Darshan tracing of hpcio runs: the runtime library, its config, the re-exec that preloads
it, and where the log goes; reading the log is :mod:`hpcio.measure.darshanlog`'s.

Darshan's runtime (``libdarshan.so``) intercepts POSIX, STDIO and MPI-IO calls when it is
``LD_PRELOAD``ed; rank 0 writes one log at ``MPI_Finalize``. The preload must be in the
environment when the process starts and must link the same ``libmpi`` as mpi4py, else the
process loads two MPI libraries. Memory-mapped reads (the naive LMDB reader) are invisible
to it. ``scripts/darshan-local.sh build`` builds one against mpi4py's MPI.
"""

import argparse
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from typing import Dict, List, Mapping, Optional

from hpcio.errors import HpcioError

__all__ = ["DEFAULT_CONFIG", "config_text", "write_config", "shared_config", "check_library",
           "mpi4py_libmpi", "trace_env", "reexec_traced", "reexecuted", "log_path", "set_logfile",
           "info", "preloaded_library", "dataset_files", "incomplete", "build_parser", "main"]

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "darshan.conf")

# Bytes of one file's records in the POSIX, MPI-IO and STDIO modules (Darshan 3.5.0's
# darshan_posix_file, darshan_mpiio_file, darshan_stdio_file), all drawn from MODMEM.
_RECORD_BYTES = 704 + 560 + 248
_HEADROOM = 1024  # Darshan's own default table: files the run opens besides the dataset
_MIB = 1 << 20
_DXT_MODULES = "DXT_POSIX,DXT_MPIIO"
_MARK = "HPCIO_DARSHAN_EXEC"  # set across the re-exec: a second one would be a loop


def config_text(nfiles: int, path_len: int = 200, base: str = DEFAULT_CONFIG) -> str:
    """``base`` (the project's config) with MAX_RECORDS, MODMEM and NAMEMEM raised so that
    ``nfiles`` dataset files (names of about ``path_len`` bytes) plus headroom fit on a rank."""
    with open(base) as f:
        text = f.read()
    records = nfiles + _HEADROOM
    modmem = math.ceil(records * _RECORD_BYTES / _MIB) + 4
    namemem = math.ceil(records * (path_len + 9) / _MIB) + 1

    floor = {"MAX_RECORDS": records, "MODMEM": modmem, "NAMEMEM": namemem}

    def raised(m):
        return f"{m.group(1)}{m.group(2)}{max(int(m.group(3)), floor[m.group(1)])}"

    return re.sub(r"^(MAX_RECORDS|MODMEM|NAMEMEM)(\s+)(\d+)", raised, text, flags=re.M)


def write_config(path: str, nfiles: int) -> str:
    """Write ``config_text(nfiles)`` to ``path`` atomically (ranks may race); return path."""
    text = config_text(nfiles)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".darshan-", suffix=".conf", dir=d)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def shared_config(nfiles: int, directory: Optional[str] = None) -> str:
    """The config for ``nfiles`` in ``directory`` (the temp dir by default) under a name made
    from its content: every rank of a node may write it before MPI exists, and all agree."""
    digest = hashlib.sha1(config_text(nfiles).encode()).hexdigest()[:12]
    path = os.path.join(directory or tempfile.gettempdir(), f"hpcio-darshan-{digest}.conf")
    return path if os.path.exists(path) else write_config(path, nfiles)


def _without_preload(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env.pop("LD_PRELOAD", None)
    return env


def mpi4py_libmpi(python: str = sys.executable) -> str:
    """The MPI library mpi4py loads under ``python`` (without MPI_Init, in a child)."""
    code = ("import mpi4py; mpi4py.rc.initialize = mpi4py.rc.finalize = False\n"
            "from mpi4py import MPI\n"
            "print(*sorted({l.split()[-1] for l in open('/proc/self/maps')"
            " if '/libmpi' in l}), sep='\\n')")
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60,
                       env=_without_preload())
    if p.returncode or not p.stdout.strip():
        last = (p.stderr.strip().splitlines() or ["no libmpi mapped"])[-1]
        raise HpcioError(f"cannot tell which MPI library mpi4py loads: {last}")
    return p.stdout.split()[0]


def _linked_libmpi(lib: str) -> str:
    """The libmpi that ``lib`` resolves to (ldd, without any preload)."""
    p = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=60,
                       env=_without_preload())
    for line in p.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libmpi"):
            where = where.split(" (")[0].strip()
            if not where or where == "not found":
                raise HpcioError(f"{lib} links {name}, which is not found "
                                 "(LD_LIBRARY_PATH, or a moved MPI)")
            return where
    raise HpcioError(f"{lib} links no MPI library: build it with the MPI's mpicc "
                     "(scripts/darshan-local.sh build)")


def check_library(lib: str) -> str:
    """Check that ``lib`` is a Darshan runtime linking the libmpi that mpi4py loads; return
    that libmpi's path, or raise HpcioError with one line."""
    if not os.path.isfile(lib):
        raise HpcioError(f"no Darshan library at {lib}")
    with open(lib, "rb") as f:
        data = f.read()
    if not data.startswith(b"\x7fELF"):
        raise HpcioError(f"{lib} is not a shared library")
    if b"darshan_core_initialize" not in data:
        raise HpcioError(f"{lib} is not a Darshan runtime library (libdarshan.so)")
    linked = _linked_libmpi(lib)
    used = mpi4py_libmpi()
    if os.path.realpath(linked) != os.path.realpath(used):
        raise HpcioError(f"{lib} links {linked} but mpi4py loads {used}: rebuild Darshan with "
                         "that MPI's mpicc (MPICC=... scripts/darshan-local.sh build)")
    return used


def trace_env(lib: str, config_path: str, dxt: bool = True, log_dir: Optional[str] = None,
              environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The variables to set (on top of ``environ``) to trace a process with ``lib``:
    per-rank records, DXT traces when ``dxt``, and a log directory for when no run sets
    DARSHAN_LOGFILE (``log_dir``, else an existing DARSHAN_LOG_DIR_PATH, else the temp dir)."""
    environ = os.environ if environ is None else environ
    lib = os.path.abspath(lib)
    old = environ.get("LD_PRELOAD", "")
    env = {
        "LD_PRELOAD": f"{lib}:{old}" if old else lib,
        "DARSHAN_CONFIG_PATH": os.path.abspath(config_path),
        "DARSHAN_DISABLE_SHARED_REDUCTION": "1",
        "DARSHAN_LOG_DIR_PATH": log_dir or environ.get("DARSHAN_LOG_DIR_PATH")
        or tempfile.gettempdir(),
    }
    if dxt:
        env["DARSHAN_MOD_ENABLE"] = _DXT_MODULES
    return env


def reexecuted() -> bool:
    """Whether this process is the one :func:`reexec_traced` made (MPI may start now)."""
    return bool(os.environ.get(_MARK))


def _preloaded(lib: str, environ: Mapping[str, str]) -> bool:
    want = os.path.realpath(lib)
    return any(os.path.realpath(p) == want
               for p in re.split(r"[: ]+", environ.get("LD_PRELOAD", "")) if p)


def _own_command() -> List[str]:
    """This process's command line, to exec it again (``python -m pkg`` stays ``-m pkg``)."""
    if hasattr(sys, "orig_argv"):  # Python >= 3.10
        return [sys.executable] + sys.orig_argv[1:]
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is not None:
        return [sys.executable, "-m", spec.name] + sys.argv[1:]
    if sys.argv[0] in ("", "-c"):
        raise HpcioError("cannot re-execute a 'python -c' process to preload Darshan")
    return [sys.executable] + sys.argv


def reexec_traced(lib: str, config_path: str = DEFAULT_CONFIG, dxt: bool = True,
                  log_dir: Optional[str] = None) -> None:
    """Make this process traced by ``lib``: call it on every rank before importing mpi4py.

    When LD_PRELOAD lacks ``lib``, check it and ``os.execve`` this same command with
    ``trace_env``: exec keeps the pid, the open fds and the environment that the launcher
    (hydra's PMI fd, Slurm's PMI2 variables) gave the rank. In the re-executed process it
    only checks that the loader really mapped ``lib``.
    """
    if _preloaded(lib, os.environ):
        with open("/proc/self/maps") as f:
            mapped = os.path.realpath(lib) in f.read()
        if not mapped:
            raise HpcioError(f"LD_PRELOAD names {lib} but it is not loaded "
                             "(see the loader's message above)", everywhere=True)
        return
    if reexecuted():
        raise HpcioError(f"LD_PRELOAD lost {lib} across the re-exec", everywhere=True)
    try:
        check_library(lib)
    except HpcioError as e:  # every rank checks the same library: rank 0 says it once
        raise HpcioError(str(e), everywhere=True) from None
    env = dict(os.environ)
    env.update(trace_env(lib, config_path, dxt, log_dir))
    env[_MARK] = "1"
    command = _own_command()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, env)


def preloaded_library(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The Darshan runtime in LD_PRELOAD (a run traced by its launcher), or None."""
    environ = os.environ if environ is None else environ
    for p in re.split(r"[: ]+", environ.get("LD_PRELOAD", "")):
        if p and "darshan" in os.path.basename(p):
            return p
    return None


def dataset_files(root: str) -> int:
    """How many files an hpcio dataset's readers open (from its manifest: one per record for
    an image folder, else its shards); 0 when the manifest cannot be read (the run itself
    will say why)."""
    try:
        with open(os.path.join(root, "hpcio.json")) as f:
            m = json.load(f)
        if m.get("format") == "images":
            return int(m.get("records", 0))
        return len(m.get("shards", []))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0


def incomplete(nfiles: int, environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why a traced run's log would miss the dataset's reads, or None: no config excluding
    Python's imports (they fill the record table first), or fewer records than files."""
    environ = os.environ if environ is None else environ
    config = environ.get("DARSHAN_CONFIG_PATH")
    if not config:
        return ("Darshan runs without DARSHAN_CONFIG_PATH: Python's imports fill its record "
                "table before the dataset is opened (use --darshan LIB)")
    try:
        with open(config) as f:
            text = f.read()
    except OSError as e:
        return f"DARSHAN_CONFIG_PATH={config}: {e.strerror}"
    if not re.search(r"^NAME_EXCLUDE\s", text, re.M):
        return (f"{config} has no NAME_EXCLUDE: Python's imports fill Darshan's record table "
                f"before the dataset is opened")
    m = re.search(r"^MAX_RECORDS\s+(\d+)", text, re.M)
    if (int(m.group(1)) if m else 1024) < nfiles:
        return (f"{config}: MAX_RECORDS {m.group(1) if m else 1024} is below the dataset's "
                f"{nfiles} files: the log would be partial")
    return None


def log_path(run_dir: str, name: str = "hpcio") -> str:
    """Where a run's log goes: RUN_DIR/darshan/NAME.darshan
    (:meth:`hpcio.measure.rundir.RunDir.darshan_log`)."""
    from .rundir import RunDir  # numpy and yaml: train asks this before MPI_Init (small heap)

    return RunDir(os.path.abspath(run_dir)).darshan_log(name)


def set_logfile(path: str) -> str:
    """Make Darshan write this process's log to ``path`` (rank 0 reads DARSHAN_LOGFILE at
    MPI_Finalize; other ranks' value is ignored). Creates the directory; returns path."""
    path = os.path.abspath(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.environ["DARSHAN_LOGFILE"] = path
    return path


def _version(lib: str) -> Optional[str]:
    pc = os.path.join(os.path.dirname(os.path.realpath(lib)), "pkgconfig", "darshan-runtime.pc")
    try:
        with open(pc) as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def info(lib: str, environ: Optional[Mapping[str, str]] = None) -> dict:
    """For the run's env.json: the library, its version, the libmpi it links, the Darshan
    settings in the environment and the config file's settings."""
    environ = os.environ if environ is None else environ
    config = environ.get("DARSHAN_CONFIG_PATH")
    settings = []
    if config and os.path.isfile(config):
        with open(config) as f:
            settings = [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    return {
        "library": os.path.realpath(lib),
        "version": _version(lib),
        "libmpi": os.path.realpath(_linked_libmpi(lib)),
        "env": {k: v for k, v in sorted(environ.items())
                if k.startswith("DARSHAN_") or k == "LD_PRELOAD"},
        "config": settings,
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m hpcio.measure.darshan``."""
    ap = argparse.ArgumentParser(prog="python -m hpcio.measure.darshan",
                                 description="Check a Darshan runtime library for this "
                                 "Python's mpi4py, or summarise Darshan logs.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="the library, its version and its libmpi, if it fits "
                   "mpi4py").add_argument("lib")
    s = sub.add_parser("summary", help="per-rank bytes read and written, partial modules")
    s.add_argument("logs", nargs="+")
    s.add_argument("--parser", help="darshan-parser to use instead of PyDarshan")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m hpcio.measure.darshan check LIB | summary LOG...``: JSON on stdout."""
    a = build_parser().parse_args(argv)
    if a.cmd == "check":
        check_library(a.lib)
        out = info(a.lib)
    else:
        from .darshanlog import log_summary  # numpy: this module loads before MPI_Init

        out = [log_summary(p, a.parser) for p in a.logs]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    from hpcio.errors import guard

    sys.exit(guard(main, prog="hpcio.measure.darshan"))
