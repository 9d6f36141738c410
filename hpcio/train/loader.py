"""The loader thread that runs a batch source ahead of the trainer, and the batch it hands
over (:class:`Prepared`). Apart from :mod:`.pipeline` because it needs no torch: the
emulated model's read-only path (:mod:`.emulate`) runs on it, and an emulated rank that
imports no torch starts in a fraction of the time and memory."""

import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["Loader", "Prepared", "Pending"]

_now = time.perf_counter


@dataclass
class Prepared:
    """One batch ready for the model. Times are ``time.perf_counter()`` seconds.

    t_fetch0  the loader asked the reader's iterator for this batch
    t_fetch1  the iterator returned it (fetch_s = t_fetch1 - t_fetch0: the reader's time
              as the pipeline saw it, including any wait for the reader's own prefetch)
    t_prep1   the last worker finished this batch's tensor (prep_s = t_prep1 - t_fetch1:
              copy, decode, resize, augment, normalise, and any wait for a free worker)
    io_s      the reader's own figure for the I/O behind this batch (``Batch.fetch_s``; it
              may have happened earlier, overlapped with compute)
    nbytes    record bytes of the batch as read (encoded), not the tensor's size
    """

    step: int
    x: object  # a torch.Tensor, float32 (N, C, H, W), contiguous; emulate's: the bytes
    y: object  # a torch.Tensor (int64, N); emulate's without torch: a NumPy array
    records: int
    nbytes: int
    t_fetch0: float
    t_fetch1: float
    t_prep1: float
    fetch_s: float
    prep_s: float
    io_s: float = 0.0
    ids: np.ndarray = None


class _Failure:
    """An exception raised in the loader, delivered in order to the consumer."""

    __slots__ = ("exc",)

    def __init__(self, exc):
        self.exc = exc


_END = object()


class Pending:
    """A batch handed to the workers: its tensor is filled chunk by chunk."""

    __slots__ = ("step", "x", "y", "ids", "nbytes", "t0", "t1", "t_sub", "futures", "io_s")

    def __init__(self, step, x, y, ids, nbytes, t0, t1, t_sub, futures, io_s):
        self.step, self.x, self.y, self.ids, self.nbytes = step, x, y, ids, nbytes
        self.t0, self.t1, self.t_sub, self.futures, self.io_s = t0, t1, t_sub, futures, io_s

    def result(self):
        t = self.t_sub
        for f in self.futures:
            t = max(t, f.result())  # re-raises a worker's exception here, in the consumer
        return Prepared(self.step, self.x, self.y, len(self.y), self.nbytes, self.t0,
                        self.t1, t, self.t1 - self.t0, t - self.t1, self.io_s, self.ids)

    def cancel(self):
        for f in self.futures:
            f.cancel()


def _load(it, submit, q, permits, stop):
    """Loader thread: request batch j once permitted, hand it to the workers, repeat."""
    try:
        while True:
            permits.acquire()
            if stop.is_set():
                return
            t0 = _now()
            try:
                b = next(it)
            except StopIteration:
                q.put(_END)
                return
            t1 = _now()
            if stop.is_set():
                return
            q.put(submit(b, t0, t1))
    except BaseException as e:  # the consumer re-raises it on its next next()
        q.put(_Failure(e))
    finally:
        if stop.is_set():  # consumer stopped early: end the reader's generator here
            close = getattr(it, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass


class Loader:
    """The iterator of one pass over a batch source (see :meth:`Pipeline.run`, and the
    emulated model's :class:`hpcio.train.emulate.ReadOnly`): a loader thread asks
    ``batches`` for batch j once the consumer has asked for batch j - ``prefetch``,
    stamps the request (t0, t1) and queues ``submit(batch, t0, t1)``; ``next()`` returns
    it in order (a :class:`Pending` once its workers are done)."""

    def __init__(self, batches, submit, prefetch, name="hpcio-loader"):
        self._q = queue.SimpleQueue()
        self._permits = threading.Semaphore(prefetch)
        self._stop = threading.Event()
        self._done = False
        # the thread holds ``submit`` (the pipeline), not this object: an abandoned run
        # is collected and its __del__ stops the loader
        self._thread = threading.Thread(
            target=_load, name=name, daemon=True,
            args=(iter(batches), submit, self._q, self._permits, self._stop))
        self._thread.start()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        self._permits.release()  # the loader may now request one batch further ahead
        item = self._q.get()
        if item is _END:
            self._done = True
            self._thread.join()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.exc
        if not isinstance(item, Pending):
            return item
        try:
            return item.result()
        except BaseException:
            self.close()
            raise

    def close(self, timeout=2.0):
        """Stop the loader and drop what it prepared. Returns without waiting more than
        ``timeout`` s: a loader blocked inside the reader ends (and closes the reader's
        generator) once the reader returns. Returns whether the loader has ended."""
        self._done = True
        self._stop.set()
        self._permits.release()
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Pending):
                item.cancel()
        if timeout and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def alive(self):
        """Whether the loader thread is still running."""
        return self._thread.is_alive()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if hasattr(self, "_stop"):
            self.close(timeout=0)
