"""Checkpoints: model + optimiser state, written by rank 0, fsync'd, atomic, timed.

Checkpoint I/O competes with training reads for the same storage; its cost is part of a
step's wall time (the ``ckpt`` component) and its bandwidth is reported per checkpoint.

A checkpoint replaces the previous ``checkpoint.pt``, so the directory is claimed first
(:func:`claim_checkpoint_dir`): one hpcio made, or one that holds nothing, never a
directory with a file of the user's that a checkpoint would replace.
"""

import io
import os
import time

from ..errors import HpcioError
from ..fsutil import atomic_write
from ..measure.rundir import RUN_MARKER

__all__ = ["CHECKPOINT", "MARKER", "check_checkpoint_dir", "claim_checkpoint_dir",
           "save_checkpoint", "load_checkpoint"]

CHECKPOINT = "checkpoint.pt"
MARKER = ".hpcio-checkpoints"  # says hpcio made the directory; holds the run it is for


def check_checkpoint_dir(directory, run=None, force=False):
    """An :class:`HpcioError` if ``directory`` holds a file hpcio did not write, or the
    checkpoint of a run other than ``run`` (its directory) unless ``force`` (read only:
    called before anything of the run is made)."""
    try:
        names = set(os.listdir(directory))
    except FileNotFoundError:
        return
    except OSError as e:
        raise HpcioError(f"--checkpoint-dir {directory}: {e.strerror}")
    if MARKER in names:
        owner, run = _owner(directory), run and os.path.abspath(run)
        held = CHECKPOINT in names or any(n.startswith("global_epoch") for n in names)
        if held and owner != run and not force:
            raise HpcioError(f"--checkpoint-dir {directory}: holds the checkpoint of "
                             f"{'run ' + owner if owner else 'an earlier run'}, which this "
                             f"run would replace (give a new directory, or --force)")
        return
    foreign = sorted(names - {RUN_MARKER})  # this run's own directory, claimed just now
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise HpcioError(f"--checkpoint-dir {directory}: holds files hpcio did not write "
                         f"({shown}); checkpoints would replace them (give a new or empty "
                         f"directory)")


def claim_checkpoint_dir(directory, run=None, force=False):
    """Make ``directory`` (or take an empty one) and mark it as run ``run``'s; one hpcio
    marked before is taken over unless it holds another run's checkpoint (and not
    ``force``); any other: an :class:`HpcioError`, before training."""
    check_checkpoint_dir(directory, run, force)
    try:
        os.makedirs(directory, exist_ok=True)
        atomic_write(os.path.join(directory, MARKER),
                     lambda f: f.write((run or "").encode() + b"\n"))
    except OSError as e:
        raise HpcioError(f"--checkpoint-dir {directory}: {e.strerror}")


def _owner(directory):
    """The run a marked checkpoint directory is for ("" if it does not say)."""
    try:
        with open(os.path.join(directory, MARKER), "rb") as f:
            return f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _state(model):
    return getattr(model, "module", model).state_dict()  # unwrap DDP


def save_checkpoint(directory, model, optimizer, epoch, step, extra=None):
    """Write ``directory/checkpoint.pt`` (replacing the previous one atomically, after an
    fsync). Returns a record: epoch, step, bytes, seconds (serialise + write + fsync +
    rename), MiB/s, and the serialise and write times separately."""
    import torch  # torch: seconds; the checkpoint's names load without it
    t0 = time.perf_counter()
    buf = io.BytesIO()
    torch.save({"model": _state(model),
                "optimizer": optimizer.state_dict() if optimizer is not None else None,
                "epoch": int(epoch), "step": int(step), "extra": extra or {}}, buf)
    t1 = time.perf_counter()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CHECKPOINT)
    atomic_write(path, lambda f: f.write(buf.getbuffer()))
    t2 = time.perf_counter()
    n = buf.getbuffer().nbytes
    return {"epoch": int(epoch), "step": int(step), "path": path, "bytes": n,
            "seconds": t2 - t0, "serialise_s": t1 - t0, "write_s": t2 - t1,
            "mib_per_s": n / (t2 - t1) / 2 ** 20 if t2 > t1 else None}


def load_checkpoint(path):
    """The dict :func:`save_checkpoint` wrote (on CPU)."""
    import torch  # torch: seconds; the checkpoint's names load without it
    return torch.load(path, map_location="cpu", weights_only=False)
