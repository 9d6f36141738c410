"""Run real MPI jobs from tests: ``mpiexec -n N python ...`` in a subprocess."""

import os
import shutil
import sys

from .launch import TimeoutExpired, launch

__all__ = ["mpiexec", "run_mpi", "run_py", "INIT_FLAKE", "once_more", "slurm_up"]

# The mpich wheel's UCX netmod now and then fails MPI_Init's address exchange ("failed to
# unpack address, invalid bandwidth 0.00", "Message from rank 1 and tag 7 truncated"): about
# one launch in a hundred under srun, as in pmodels/mpich#7417. It happens before hpcio runs
# a line, so a launch that died there is made once more; any other failure counts.
INIT_FLAKE = "Fatal error in internal_Init_thread"


def once_more(run):
    """``run()`` -> (CompletedProcess, log text); again once if it died inside MPI_Init."""
    p, log = run()
    if p.returncode and INIT_FLAKE in (log or "") + (p.stderr or "") + (p.stdout or ""):
        p, log = run()
    return p, log


def mpiexec():
    """The launcher: $MPIEXEC, else the one beside this Python (the mpich wheel), else PATH."""
    if os.environ.get("MPIEXEC"):
        return os.environ["MPIEXEC"]
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.exists(here) else shutil.which("mpiexec") or "mpiexec"


def run_mpi(n, args, timeout=180, check=False, env=None, cwd=None):
    """``mpiexec -n n python args...``; returns the CompletedProcess (text output)."""
    cmd = [mpiexec(), "-n", str(n), sys.executable] + [str(a) for a in args]
    e = dict(os.environ)
    e.update(env or {})
    p = launch(cmd, timeout=timeout, env=e, cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def run_py(args, timeout=180, check=False, env=None, cwd=None):
    """``python args...`` without a launcher (MPI singleton)."""
    e = dict(os.environ)
    e.update(env or {})
    p = launch([sys.executable] + list(args), timeout=timeout, env=e, cwd=cwd)
    if check and p.returncode != 0:
        raise AssertionError(f"python {args} exited {p.returncode}\n"
                             f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def slurm_up():
    """None where ``srun`` reaches a controller with an idle node, else why not."""
    if not shutil.which("srun") or not shutil.which("sinfo"):
        return "srun not installed"
    try:
        p = launch(["sinfo", "-h", "-o", "%t"], timeout=10)
    except TimeoutExpired:
        return "slurmctld does not answer"
    states = p.stdout.split()
    if p.returncode or not any(s.startswith(("idle", "mix")) for s in states):
        return f"no idle Slurm node ({p.stdout.strip() or p.stderr.strip()})"
    return None
