"""The ``emulate`` model: a training step that sleeps for a compute time.

Storage can be studied without accelerators the way DLIO and MLPerf Storage do it: each
step "computes" by sleeping for a time that is fixed or drawn from a distribution (DLIO's
``computation_time`` with ``computation_time_stdev``; the draws are in
:mod:`.computetime`). Sleeping releases the GIL, so the loader threads run during it as
they would during a GPU kernel.

Nothing here imports torch: an emulated rank that asks for no torch feature (a GPU copy,
checkpoints, preprocessing into tensors, a gloo exchange) never loads it, and so starts in
a fraction of the time and memory (``torch`` alone is ~200 MB resident and seconds to
import on a loaded node). :func:`as_module` makes the torch module the others need.
"""

import time

import numpy as np

from ..fsutil import aligned_empty
from .loader import Loader, Prepared

__all__ = ["EmulatedModel", "SPEC", "ReadOnly", "as_module"]


class EmulatedModel:
    """A model whose step is a sleep; it never touches the input."""

    def __init__(self, compute):
        self.compute = compute

    def step(self):
        """Sleep for the next compute time; returns it."""
        dt = self.compute.draw()
        if dt > 0:
            time.sleep(dt)
        return dt

    def parameters(self):
        """No parameters: nothing to optimise, broadcast or checkpoint."""
        return iter(())


def as_module(model):
    """``model`` as a torch module holding one scalar parameter, so that optimisers,
    DDP, checkpoints and state dicts work unchanged (imports torch: for the runs that ask
    for a torch feature)."""
    import torch  # torch: seconds; only runs that ask for a torch feature

    class EmulatedModule(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self.compute = inner.compute
            self.w = torch.nn.Parameter(torch.zeros(1))

        def step(self):
            return self.inner.step()

    return EmulatedModule(model)


class _Spec:
    """Model spec of ``emulate``: no input shape of its own (the data's is used)."""

    name = "emulate"
    input_shape = None
    classes = None


SPEC = _Spec()


class ReadOnly:
    """The emulated model's data path, as DLIO and MLPerf Storage run it: batches are read
    and handed to the step, with no decode and no tensor conversion (an emulated step
    does not look at pixels; converting 192 KiB pictures to float would make the
    harness's CPU, not the storage, the limit). A loader thread
    (:class:`~hpcio.train.loader.Loader`) copies each batch out of the reader's buffer into
    a ring of page-aligned buffers, at most ``prefetch`` batches ahead of the trainer, and
    stamps it like :class:`hpcio.pipeline.Prepared` (``t_fetch0``/``t_fetch1`` around the
    reader, ``t_prep1`` after the copy), so the trainer's stall accounting is the same.
    ``x`` is the batch's bytes (uint8, 1-D), ``y`` its labels (int64): torch tensors with
    ``tensors=True`` (a run that hands them to a device), else NumPy arrays."""

    def __init__(self, prefetch=2, tensors=False):
        self.prefetch = max(0, int(prefetch))
        self.tensors = bool(tensors)
        self._ring = [None] * (self.prefetch + 2)  # in queue + held by the trainer + filling
        self._run = None

    def run(self, batches, epoch=0, lease=0):
        """The loader of one epoch. It reuses the buffers of the one before (closed here:
        an epoch's batches are done with when the next epoch starts), so no epoch's
        buffers outlive it and none are faulted in anew. With a reader whose batches stay
        valid for ``lease`` more batches, at least as many as the loader and the trainer
        hold, batches are handed on as they are, without a copy."""
        self.close()
        copy = lease < len(self._ring)
        self._run = Loader(batches, _Copy(self._ring if copy else None, self.tensors), self.prefetch,
                        name="hpcio-readonly")
        return self._run

    def close(self):
        if self._run is not None:
            if not self._run.close():  # its thread goes on and may still fill a buffer
                self._ring = [None] * len(self._ring)
            self._run = None


class _Copy:
    """The loader's work on one batch: copy it out of the reader's buffer into the next
    buffer of ``ring`` (None: hand on the reader's buffer) and stamp it."""

    def __init__(self, ring, tensors=False):
        self._ring = ring
        self._k = 0
        if tensors:
            import torch  # torch: only runs that hand the batch to a device
            self._wrap = torch.from_numpy
        else:
            self._wrap = None

    def _buffer(self, k, n):
        buf = self._ring[k]
        if buf is None or len(buf) < n:
            buf = self._ring[k] = aligned_empty(max(int(n * 1.25), 4096))
        return buf

    def __call__(self, b, t0, t1):
        off = np.asarray(b.offsets, dtype=np.int64)
        lo, hi = (int(off[0]), int(off[-1])) if len(off) else (0, 0)
        if self._ring is None:  # the reader's buffer outlives the batch's use
            buf = b.data[lo:hi]
        else:
            buf = self._buffer(self._k, hi - lo)[:hi - lo]
            buf[:] = b.data[lo:hi]
            self._k = (self._k + 1) % len(self._ring)
        y = np.array(b.labels, dtype=np.int64)
        if self._wrap is not None:
            buf, y = self._wrap(buf), self._wrap(y)
        t2 = time.perf_counter()
        return Prepared(b.step, buf, y, len(y), hi - lo, t0, t1, t2,
                        t1 - t0, t2 - t1, float(getattr(b, "fetch_s", 0.0)))
