"""The preprocessing pipeline: reader batches in, model-ready tensors out, on worker threads.

The steps are those of the TensorFlow input-pipeline study (Sachin and Min): decode (raw,
PNG, JPEG), resize to the model's input, random brightness (one delta per picture, uniform
in +-32/255 as ``tf.image.random_brightness``), clip to [0, 1]; then normalise with a mean
and standard deviation. ``offline=True`` is the study's "offline preprocessing": the data
were decoded and resized beforehand, so only the uint8 -> float conversion and the
normalisation remain.

Threads: one *loader* thread pulls batches from the reader's iterator, copies the batch
(the reader may reuse its buffer as soon as it is asked for the next one), splits it into
``threads`` chunks and hands them to a pool of ``threads`` workers, then asks for the next
batch. Decoding overlaps fetching, and batches overlap each other. The loader runs at most
``prefetch`` batches ahead of the consumer: batch ``j`` is not requested from the reader
before the consumer has asked for batch ``j - prefetch`` (a semaphore, released by each
``next()``), so memory stays bounded and ``prefetch=0`` means no read-ahead at all.

Raw records are converted over the whole chunk at once (one reshape of the buffer, torch
for the resize and arithmetic): no Python runs per sample. Raw records may be stored in
another element type than uint8 (the manifest's ``dtype``, ``layout`` and ``scale``:
Caffe's float32 HDF5 holds pixels x 1/256, plane after plane): the arithmetic then runs
in the stored units, whose white is ``255 * scale``, so scaled data is not re-scaled as
if it were pixels, only mapped once to the model's input. PNG/JPEG are decoded per
picture in Pillow, which releases the GIL, so the workers decode in parallel; the decoded
chunk is then resized in one torch call on uint8 (its vectorised channels-last kernel:
Pillow's bilinear filter within a grey level), several times cheaper than Pillow picture
by picture or resizing floats (``benchmarks/design.md``).

Timestamps are ``time.perf_counter()`` taken in the thread where the event happens (one
clock for all threads), so a consumer can split its own wait into fetch and prep.
"""

import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import HpcioError, lookup
from .loader import Loader, Prepared, Pending
from .decode import (DECODERS, MODES, decode_images, decode_records, element_type,
                     raw_view, sample_shape, unwrapper)

__all__ = ["Pipeline", "Loader", "Prepared", "BRIGHTNESS", "check_labels", "decode_records"]

BRIGHTNESS = 32 / 255  # the study's random-brightness range: +-32/255 of full scale
_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)  # ITU-R 601, as Pillow's "L"
RAW_CHUNK = 1 << 20  # raw bytes per worker task at least: below that, handing a chunk
# to a thread costs more than converting it
_now = time.perf_counter
_U64 = (1 << 64) - 1


def check_labels(labels, classes, step=None, ids=None):
    """Raise :class:`HpcioError` (bad data) when a label is outside [0, classes);
    vectorised: one min/max over the batch."""
    labels = np.asarray(labels)
    if not labels.size:
        return
    if labels.dtype.kind not in "iu":
        raise HpcioError(f"batch {step}: labels must be integers, not {labels.dtype}")
    lo, hi = labels.min(), labels.max()
    if lo >= 0 and (classes is None or hi < classes):
        return
    bad = (labels < 0) if classes is None else ((labels < 0) | (labels >= classes))
    k = int(np.flatnonzero(bad)[0])
    rec = f"record {int(ids[k])}" if ids is not None and len(ids) > k else f"sample {k}"
    rng = f"[0, {classes})" if classes is not None else "[0, ...)"
    raise HpcioError(f"batch {step}: {rec} has label {int(labels[k])}, outside {rng}")


def _channel_stat(v, c, what):
    """A scalar or per-channel mean/std as a float or a (1, C, 1, 1) tensor."""
    a = np.asarray(v, dtype=np.float64).reshape(-1)
    if a.size == 1:
        return float(a[0])
    if a.size != c:
        raise HpcioError(f"normalisation {what} needs 1 or {c} values, not {a.size}",
                         everywhere=True)
    return torch.tensor(a, dtype=torch.float32).view(1, c, 1, 1)


class Pipeline:
    """Reader batches -> :class:`Prepared` tensors of shape (N, *input_shape).

    ``manifest``: the dataset manifest (``encoding`` raw|png|jpeg, ``shape`` [H, W, C],
    ``classes``; ``container`` where records hold the sample, a TFRecord's Example; for
    raw records ``layout`` hwc|chw, ``dtype`` and ``scale``, the stored value of a pixel
    value of 1); ``input_shape``: the model's (C, H, W). ``threads``
    workers (>= 1), ``prefetch`` batches of read-ahead (>= 0). ``augment``: random
    brightness (+- ``brightness``) and clip; ``seed``: its generator is seeded with
    (seed, epoch, step), so a step's deltas are reproducible (pass a rank-dependent seed
    for distinct ranks).
    ``mean``/``std`` (scalars or per channel) normalise the [0, 1] pixels (the default
    maps them to [-1, 1], neutral for synthetic data); ``mean=0, std=1`` leaves them in
    [0, 1]. ``classes`` (default: the manifest's) bounds the labels.
    ``pin_memory`` allocates page-locked tensors when CUDA is present.
    """

    def __init__(self, manifest, input_shape, threads=2, prefetch=2, augment=True,
                 offline=False, seed=0, pin_memory=False, mean=0.5, std=0.5,
                 brightness=BRIGHTNESS, classes=None):
        enc = manifest.get("encoding")
        lookup(DECODERS, enc, "encoding")
        self.encoding = enc
        self.unwrap = unwrapper(manifest)  # records that hold the sample (TFRecord)
        self.src_shape = sample_shape(manifest.get("shape"))  # (H, W, C)
        self.layout = manifest.get("layout", "hwc")  # of raw records
        self.dtype = manifest.get("dtype", "uint8") if enc == "raw" else "uint8"
        element_type(self.dtype)
        scale = manifest.get("scale", 1.0) if enc == "raw" else 1.0
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or \
                not 0 < scale < float("inf"):
            raise HpcioError(f"manifest scale must be a positive number, not {scale!r}",
                             everywhere=True)
        try:
            c, h, w = (int(v) for v in input_shape)
        except (TypeError, ValueError):
            raise HpcioError(f"model input shape must be (C, H, W), not {input_shape!r}",
                             everywhere=True)
        self.input_shape = (c, h, w)
        sc = self.src_shape[2]
        if sc != c and not (sc in MODES and c in MODES):
            raise HpcioError(f"cannot convert {sc}-channel samples to the model's {c} "
                             f"channels", everywhere=True)
        if enc != "raw" and c not in MODES:
            raise HpcioError(f"decoded images have 1 or 3 channels; the model wants {c}",
                             everywhere=True)
        for name, v, least in (("threads", threads, 1), ("prefetch", prefetch, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < least:
                raise HpcioError(f"{name} must be an integer >= {least}, not {v!r}",
                                 everywhere=True)
        if offline and (enc != "raw" or self.src_shape != (h, w, c)):
            raise HpcioError(
                f"offline preprocessing needs pre-decoded data: raw records of the "
                f"model's input {h}x{w}x{c}; this dataset is {enc} "
                f"{'x'.join(map(str, self.src_shape))}", everywhere=True)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise HpcioError(f"seed must be a non-negative integer, not {seed!r}",
                             everywhere=True)
        self.threads, self.prefetch, self.seed = int(threads), int(prefetch), int(seed)
        self.offline = bool(offline)
        self.augment = bool(augment) and not self.offline
        self.brightness = float(brightness)
        self.classes = classes if classes is not None else manifest.get("classes")
        self.pin_memory = bool(pin_memory) and torch.cuda.is_available()
        mean, std = _channel_stat(mean, c, "mean"), _channel_stat(std, c, "std")
        if (np.asarray(std) <= 0).any():
            raise HpcioError("normalisation std must be > 0", everywhere=True)
        # values stay in stored units (0..255 for pixels, 0..255*scale for scaled data)
        # until the end: x/white then (x - mean)/std is one affine map
        self._white = 255.0 * float(scale)
        self._scale = 1.0 / (self._white * std)
        self._shift = mean / std
        self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="hpcio-prep")
        self._runs = weakref.WeakSet()
        self._closed = False

    # ---- the consumer's side ------------------------------------------------------------

    def run(self, batches, epoch=0, lease=0):
        """Start a loader on ``batches`` (an iterable of :class:`~hpcio.readers.base.Batch`,
        e.g. ``reader.epoch(plan)``); returns an iterator of :class:`Prepared` in order.
        ``epoch`` enters the brightness seed, so epochs differ where step numbers repeat.
        ``lease`` (the reader's) is not needed: preprocessing writes new tensors.
        An exception in the source or the preprocessing is re-raised by ``next()``;
        ``close()`` (or leaving a ``with`` block) stops early without hanging."""
        if self._closed:
            raise RuntimeError("pipeline is closed")
        r = Loader(batches, partial(self._submit, epoch=int(epoch)), self.prefetch)
        self._runs.add(r)
        return r

    def close(self):
        """Stop every run and the workers."""
        self._closed = True
        for r in list(self._runs):
            r.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- the loader's side --------------------------------------------------------------

    def deltas(self, step, n, epoch=0):
        """The brightness deltas of a step (n floats): a function of (seed, epoch, step)."""
        if not self.augment or not n:
            return None
        rng = np.random.default_rng((self.seed, int(epoch) & _U64, int(step) & _U64))
        return rng.uniform(-self.brightness, self.brightness, n).astype(np.float32)

    def _submit(self, b, t0, t1, epoch=0):
        """Copy batch ``b`` out of the reader's buffer and queue its chunks (loader)."""
        n = len(b)
        check_labels(b.labels, self.classes, b.step, b.ids)
        off = np.asarray(b.offsets, dtype=np.int64)
        start, end = (int(off[0]), int(off[-1])) if len(off) else (0, 0)
        if self.unwrap is None:
            data = np.array(b.data[start:end], dtype=np.uint8, copy=True)
            offsets = off - start
        else:  # the samples out of their records: a copy too
            data, offsets = self.unwrap(np.asarray(b.data[start:end], np.uint8), off - start)
        ids = np.array(b.ids, dtype=np.int64, copy=True)
        y = torch.from_numpy(np.array(b.labels, dtype=np.int64, copy=True))
        x = torch.empty((n,) + self.input_shape, dtype=torch.float32,
                        pin_memory=self.pin_memory)
        deltas = self.deltas(b.step, n, epoch)
        parts = min(n, self.threads)
        if self.encoding == "raw":
            parts = max(1, min(parts, (end - start) // RAW_CHUNK))
        cuts = np.linspace(0, n, parts + 1).astype(np.int64)
        futures = [self._pool.submit(self._chunk, data, offsets, ids, int(lo), int(hi), x,
                                     deltas)
                   for lo, hi in zip(cuts[:-1], cuts[1:]) if hi > lo]
        return Pending(b.step, x, y, ids, end - start, t0, t1, _now(), futures,
                        float(getattr(b, "fetch_s", 0.0)))

    def _chunk(self, data, offsets, ids, lo, hi, x, deltas):
        """Records lo:hi into x[lo:hi] (a worker); returns the time it finished."""
        xs = x[lo:hi]
        c, h, w = self.input_shape
        h0, w0, c0 = self.src_shape
        if self.encoding == "raw":
            px, odd = raw_view(data, offsets[lo:hi + 1], self.src_shape, self.layout,
                               self.dtype), {}
        else:  # decode at the stored size, in the smaller of the two channel counts
            px = np.empty((hi - lo, h0, w0, min(c0, c)), dtype=np.uint8)
            odd = decode_images(data, offsets, lo, hi, px, ids=ids, other=(h, w))
        self._fill(xs, torch.from_numpy(px).permute(0, 3, 1, 2), odd)
        # xs holds stored values in [0, white]
        if deltas is not None:
            xs.add_(torch.from_numpy(deltas[lo:hi] * self._white).view(-1, 1, 1, 1))
            xs.clamp_(0.0, self._white)
        xs.mul_(self._scale)
        if not (isinstance(self._shift, float) and self._shift == 0.0):
            xs.sub_(self._shift)
        return _now()

    def _fill(self, xs, t, odd):
        """Resize a uint8 (n, C', H', W') chunk (a channels-last view of NHWC pixels) to
        the model's input, convert its channels, and write it into float ``xs`` in
        0..255. The resize runs on uint8 (torch's vectorised channels-last kernel,
        bilinear, antialiased when shrinking: the filter Pillow uses, within one grey
        level, and 7-13x less CPU than on floats). A chunk of float records (stored
        units) is resized and written as it is."""
        c, h, w = self.input_shape
        if tuple(t.shape[2:]) != (h, w):
            t = F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False,
                              antialias=True)
        for k, a in odd.items():  # pictures of another size, resized one by one
            t[k] = torch.from_numpy(a).permute(2, 0, 1)
        if t.shape[1] == c:
            xs.copy_(t)  # NHWC uint8 -> NCHW float in one pass
        elif c == 1:
            torch.sum(t.float() * _LUMA, dim=1, keepdim=True, out=xs)
        else:
            xs.copy_(t.expand(-1, c, -1, -1))
