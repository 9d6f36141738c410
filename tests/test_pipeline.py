"""Preprocessing pipeline: decoding is exact, tensors are right, threads behave."""

import gc
import io
import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

from hpcio.errors import HpcioError
from hpcio.data.pictures import render
from hpcio.train.pipeline import BRIGHTNESS, Pipeline, decode_records
from hpcio.plan import make_plan
from hpcio.data.presets import get_preset
from hpcio.readers import make_reader
from hpcio.readers.base import Batch
from common.datasets import FORMATS_X_ENCODINGS, make_dataset


def pictures(n, h, w, c, seed=0):
    """Smooth pictures (gradients plus a bright square) that JPEG keeps well."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    out = np.empty((n, h, w, c), np.uint8)
    for k in range(n):
        a, b = rng.uniform(30, 200, 2)
        img = a + (b - a) * (xx + yy) / 2
        img = np.repeat(img[..., None], c, 2) + rng.uniform(-20, 20, c)
        y0, x0 = rng.integers(0, max(1, h // 2), 2)
        img[y0:y0 + h // 4, x0:x0 + w // 4] = 230
        out[k] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return out


def encode(pixels, encoding):
    if encoding == "raw":
        return [p.tobytes() for p in pixels]
    fmt = {"png": "PNG", "jpeg": "JPEG"}[encoding]
    recs = []
    for p in pixels:
        buf = io.BytesIO()
        Image.fromarray(p[..., 0] if p.shape[2] == 1 else p).save(buf, fmt, quality=95)
        recs.append(buf.getvalue())
    return recs


def batch(records, step=0, labels=None, first_id=0):
    """A Batch as readers deliver it: one buffer, offsets, labels."""
    n = len(records)
    lengths = np.array([len(r) for r in records], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    data = np.frombuffer(b"".join(records), np.uint8).copy()
    if labels is None:
        labels = np.arange(n) % 10
    return Batch(step, np.arange(first_id, first_id + n, dtype=np.int64), data, offsets,
                 np.asarray(labels, np.int64))


def manifest(encoding, shape, classes=10):
    return {"encoding": encoding, "shape": list(shape), "classes": classes}


def one(pipe, b):
    """The single Prepared batch of a one-batch run."""
    out = list(pipe.run([b]))
    assert len(out) == 1
    return out[0]


# ---- decoding ---------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["raw", "png"])
@pytest.mark.parametrize("shape", [(28, 28, 1), (32, 32, 3)])
def test_decode_exact(encoding, shape):
    px = pictures(5, *shape)
    got = decode_records(batch(encode(px, encoding)), manifest(encoding, shape))
    assert got.dtype == np.uint8 and got.shape == (5,) + shape
    assert np.array_equal(got, px)


@pytest.mark.parametrize("shape", [(32, 32, 3), (64, 48, 1)])
def test_decode_jpeg_close(shape):
    px = pictures(4, *shape)
    got = decode_records(batch(encode(px, "jpeg")), manifest("jpeg", shape))
    assert got.shape == (4,) + shape
    err = np.abs(got.astype(int) - px.astype(int))
    assert err.mean() < 3 and err.max() < 64


def test_decode_bad_data():
    shape = (8, 8, 3)
    px = pictures(3, *shape)
    with pytest.raises(HpcioError, match="record 1"):
        recs = encode(px, "raw")
        recs[1] = recs[1][:-1]
        decode_records(batch(recs), manifest("raw", shape))
    recs = encode(px, "png")
    recs[2] = b"not a png at all"
    with pytest.raises(HpcioError, match="record 2: cannot decode"):
        decode_records(batch(recs), manifest("png", shape))
    with pytest.raises(HpcioError, match="manifest says 9x8"):
        decode_records(batch(encode(px, "png")), manifest("png", (9, 8, 3)))
    with pytest.raises(HpcioError, match="unknown encoding"):
        decode_records(batch(encode(px, "png")), manifest("webp", shape))
    f32 = dict(manifest("raw", shape), dtype="float32", layout="chw")
    with pytest.raises(HpcioError, match=r"has 192 bytes, .* of float32 needs 768"):
        decode_records(batch(encode(px, "raw")), f32)


def test_decode_float32_channel_major():
    """Caffe's float32 records (C, H, W) decode to (N, H, W, C) float32 as stored."""
    px = pictures(3, 8, 6, 3)
    stored = (px.transpose(0, 3, 1, 2) / np.float32(256)).astype(np.float32)
    got = decode_records(batch([r.tobytes() for r in stored]),
                         dict(manifest("raw", (8, 6, 3)), dtype="float32", layout="chw"))
    assert got.dtype == np.float32 and np.array_equal(got, stored.transpose(0, 2, 3, 1))


# ---- tensors ----------------------------------------------------------------------------

@pytest.mark.parametrize("encoding", ["raw", "png", "jpeg"])
@pytest.mark.parametrize("src,model", [((28, 28, 1), (1, 28, 28)),
                                       ((28, 28, 1), (3, 32, 32)),
                                       ((40, 36, 3), (3, 32, 32)),
                                       ((40, 36, 3), (1, 28, 28))])
def test_shapes_and_range(encoding, src, model):
    px = pictures(7, *src)
    with Pipeline(manifest(encoding, src), model, threads=2, mean=0.0, std=1.0) as p:
        out = one(p, batch(encode(px, encoding), step=3))
    assert out.x.shape == (7,) + model and out.x.dtype == torch.float32
    assert out.x.is_contiguous()
    assert out.y.dtype == torch.int64 and out.y.tolist() == [k % 10 for k in range(7)]
    assert 0.0 <= float(out.x.min()) and float(out.x.max()) <= 1.0
    assert out.records == 7 and out.step == 3
    assert out.nbytes == sum(len(r) for r in encode(px, encoding))


@pytest.mark.parametrize("encoding", ["raw", "png"])
@pytest.mark.parametrize("shape", [(28, 28, 1), (32, 32, 3)])
def test_values_exact_without_augment(encoding, shape):
    px = pictures(6, *shape)
    model = (shape[2], shape[0], shape[1])
    want = torch.from_numpy(px).permute(0, 3, 1, 2).float() / 255
    with Pipeline(manifest(encoding, shape), model, augment=False, mean=0, std=1) as p:
        got = one(p, batch(encode(px, encoding))).x
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    mean, std = [0.4, 0.5, 0.6][:shape[2]], [0.2, 0.25, 0.3][:shape[2]]
    with Pipeline(manifest(encoding, shape), model, augment=False, mean=mean,
                  std=std) as p:
        got = one(p, batch(encode(px, encoding))).x
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    torch.testing.assert_close(got, (want - m) / s, rtol=0, atol=1e-5)


def test_raw_and_png_resize_agree():
    """Raw records are resized in torch, PNG ones in Pillow: same filter, same result."""
    px = pictures(4, 48, 40, 3)
    res = {}
    for enc in ("raw", "png"):
        with Pipeline(manifest(enc, (48, 40, 3)), (3, 32, 32), augment=False, mean=0,
                      std=1) as p:
            res[enc] = one(p, batch(encode(px, enc))).x
    assert float((res["raw"] - res["png"]).abs().mean()) < 2 / 255


def test_pictures_of_mixed_sizes():
    """A folder of pictures of several sizes: each is resized to the model's input."""
    shape = (40, 36, 3)
    px = pictures(4, *shape)
    odd = pictures(2, 50, 64, 3, seed=1)
    recs = encode(px, "png")
    recs[1:3] = encode(odd, "png")
    with Pipeline(manifest("png", shape), (3, 32, 32), augment=False, mean=0, std=1) as p:
        x = one(p, batch(recs)).x
    for k, img in ((0, px[0]), (1, odd[0]), (2, odd[1]), (3, px[3])):
        ref = Image.fromarray(img).resize((32, 32), Image.BILINEAR)
        want = torch.from_numpy(np.array(ref)).permute(2, 0, 1).float() / 255
        assert float((x[k] - want).abs().max()) <= 1.01 / 255
    with pytest.raises(HpcioError, match="record 1: picture is 50x64"):
        decode_records(batch(recs), manifest("png", shape))


def test_gray_to_rgb_and_back():
    px = pictures(3, 16, 16, 3)
    for enc in ("raw", "png"):
        with Pipeline(manifest(enc, (16, 16, 3)), (1, 16, 16), augment=False, mean=0,
                      std=1) as p:
            gray = one(p, batch(encode(px, enc))).x
        luma = (px.astype(np.float64) @ [0.299, 0.587, 0.114]) / 255
        assert np.abs(gray[:, 0].numpy() - luma).max() < 1.01 / 255
    g = pictures(3, 16, 16, 1)
    with Pipeline(manifest("raw", (16, 16, 1)), (3, 16, 16), augment=False, mean=0,
                  std=1) as p:
        rgb = one(p, batch(encode(g, "raw"))).x
    for ch in range(3):
        assert torch.equal(rgb[:, ch], rgb[:, 0])


def test_brightness_reproducible():
    px = np.full((8, 12, 12, 3), 128, np.uint8)  # mid grey: the delta is never clipped
    recs = encode(px, "png")

    def run(seed, step=5, epoch=0):
        with Pipeline(manifest("png", (12, 12, 3)), (3, 12, 12), seed=seed, mean=0,
                      std=1) as p:
            out = list(p.run([batch(recs, step=step)], epoch=epoch))
            return out[0].x

    a, b = run(1), run(1)
    assert torch.equal(a, b)
    for other in (run(2), run(1, step=6), run(1, epoch=1)):
        assert not torch.equal(a, other)
    delta = a - 128 / 255
    per_image = delta.flatten(1)
    # one delta per picture, within +-32/255, not all the same
    assert torch.allclose(per_image, per_image[:, :1].expand_as(per_image), atol=1e-6)
    assert float(per_image.abs().max()) <= BRIGHTNESS + 1e-6
    assert len(set(np.round(per_image[:, 0].numpy(), 6))) > 1


def test_brightness_clips():
    px = np.stack([np.full((4, 4, 1), 0, np.uint8), np.full((4, 4, 1), 255, np.uint8)] * 8)
    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4), mean=0, std=1) as p:
        x = one(p, batch(encode(px, "raw"))).x
    assert float(x.min()) == 0.0 and float(x.max()) == 1.0
    assert float(x[0::2].max()) > 0 and float(x[1::2].min()) < 1  # deltas did move them


def test_offline():
    px = pictures(5, 28, 28, 1)
    with Pipeline(manifest("raw", (28, 28, 1)), (1, 28, 28), offline=True, augment=True,
                  mean=0.5, std=0.5) as p:
        assert not p.augment
        x = one(p, batch(encode(px, "raw"))).x
    want = (torch.from_numpy(px).permute(0, 3, 1, 2).float() / 255 - 0.5) / 0.5
    torch.testing.assert_close(x, want, rtol=0, atol=1e-6)
    with pytest.raises(HpcioError, match="offline preprocessing needs pre-decoded"):
        Pipeline(manifest("png", (28, 28, 1)), (1, 28, 28), offline=True)
    with pytest.raises(HpcioError, match="offline preprocessing needs pre-decoded"):
        Pipeline(manifest("raw", (32, 32, 3)), (3, 28, 28), offline=True)


def test_empty_batch():
    with Pipeline(manifest("raw", (4, 4, 1)), (1, 8, 8)) as p:
        out = one(p, batch([]))
    assert out.x.shape == (0, 1, 8, 8) and out.records == 0


@pytest.mark.parametrize("kw,match", [
    (dict(threads=0), "threads"), (dict(prefetch=-1), "prefetch"),
    (dict(threads=1.5), "threads"), (dict(seed=-3), "seed"),
    (dict(std=0), "std"), (dict(mean=[0.1, 0.2]), "mean"),
])
def test_bad_options(kw, match):
    with pytest.raises(HpcioError, match=match):
        Pipeline(manifest("raw", (4, 4, 3)), (3, 4, 4), **kw)


def test_bad_manifest():
    with pytest.raises(HpcioError, match="unknown encoding"):
        Pipeline(manifest("gif", (4, 4, 3)), (3, 4, 4))
    with pytest.raises(HpcioError, match="shape"):
        Pipeline({"encoding": "raw", "shape": [4, 4]}, (3, 4, 4))
    with pytest.raises(HpcioError, match="channels"):
        Pipeline(manifest("raw", (4, 4, 2)), (3, 4, 4))
    with pytest.raises(HpcioError, match="dtype 'int16' are not pictures"):
        Pipeline(dict(manifest("raw", (4, 4, 3)), dtype="int16"), (3, 4, 4))
    for bad in (0, -1.0, "1/256", True):
        with pytest.raises(HpcioError, match="scale must be a positive number"):
            Pipeline(dict(manifest("raw", (4, 4, 3)), dtype="float32", scale=bad),
                     (3, 4, 4))


# ---- bad data surfaces in the consumer --------------------------------------------------

def test_label_out_of_range():
    recs = encode(pictures(4, 4, 4, 1), "raw")
    with Pipeline(manifest("raw", (4, 4, 1), classes=10), (1, 4, 4)) as p:
        it = p.run([batch(recs, 0), batch(recs, 1, labels=[1, 2, 10, 3], first_id=40)])
        assert next(it).step == 0
        with pytest.raises(HpcioError, match="record 42 has label 10, outside"):
            next(it)
    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4), classes=3) as p:
        with pytest.raises(HpcioError, match="label 3"):
            one(p, batch(recs, labels=[0, 1, 2, 3]))
    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4)) as p:
        with pytest.raises(HpcioError, match="label -1"):
            one(p, batch(recs, labels=[0, -1, 2, 3]))


def test_source_exception_reaches_consumer():
    recs = encode(pictures(2, 4, 4, 1), "raw")

    def source():
        yield batch(recs, 0)
        yield batch(recs, 1)
        raise ValueError("disk on fire")

    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4), prefetch=4) as p:
        it = p.run(source())
        assert [next(it).step, next(it).step] == [0, 1]
        with pytest.raises(ValueError, match="disk on fire"):
            next(it)
        with pytest.raises(StopIteration):
            next(it)


def test_decode_error_reaches_consumer():
    recs = encode(pictures(4, 8, 8, 3), "png")
    bad = list(recs)
    bad[3] = b"\x89PNG garbage"
    with Pipeline(manifest("png", (8, 8, 3)), (3, 8, 8), threads=2) as p:
        it = p.run([batch(recs, 0), batch(bad, 1, first_id=100), batch(recs, 2)])
        assert next(it).step == 0
        with pytest.raises(HpcioError, match="record 103: cannot decode"):
            next(it)


# ---- threads, prefetch, buffers, timestamps ---------------------------------------------

@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_prefetch_is_bounded(prefetch):
    """Batch j is requested only after the consumer asked for batch j - prefetch, and
    then promptly (the loader does run ahead that far)."""
    recs = encode(pictures(4, 8, 8, 1), "raw")
    n = 6
    asked = []
    got = []
    with Pipeline(manifest("raw", (8, 8, 1)), (1, 8, 8), prefetch=prefetch) as p:
        it = p.run(batch(recs, s) for s in range(n))
        time.sleep(0.05)  # time to read ahead
        for _ in range(n):
            asked.append(time.perf_counter())
            got.append(next(it))
            time.sleep(0.1)  # compute
        with pytest.raises(StopIteration):
            next(it)
    t0 = [g.t_fetch0 for g in got]
    assert [g.step for g in got] == list(range(n))
    for j in range(prefetch, n):
        assert t0[j] >= asked[j - prefetch]
        assert t0[j] - asked[j - prefetch] < 0.08  # and not held back a step longer
    for j in range(min(prefetch, n)):
        assert t0[j] < asked[0]  # read ahead before the first next()


def test_reused_reader_buffer():
    """A reader may overwrite its buffer once asked for the next batch."""
    shape = (16, 16, 3)
    pix = [pictures(6, *shape, seed=s) for s in range(5)]
    for enc in ("raw", "png"):
        recs = [encode(px, enc) for px in pix]
        size = max(sum(map(len, r)) for r in recs)
        shared = np.zeros(size, np.uint8)

        def source():
            for s, r in enumerate(recs):
                b = batch(r, s)
                shared[:] = 0
                shared[:b.nbytes] = b.data
                yield Batch(s, b.ids, shared, b.offsets, b.labels)
                shared[:] = 255  # the reader reuses its buffer

        with Pipeline(manifest(enc, shape), (3, 16, 16), threads=2, prefetch=3,
                      augment=False, mean=0, std=1) as p:
            outs = list(p.run(source()))
        for s, out in enumerate(outs):
            want = torch.from_numpy(pix[s]).permute(0, 3, 1, 2).float() / 255
            torch.testing.assert_close(out.x, want, rtol=0, atol=1e-6)


def test_timestamps():
    recs = encode(pictures(16, 64, 64, 3), "jpeg")

    def source():
        for s in range(4):
            time.sleep(0.02)  # the reader's I/O
            yield batch(recs, s)

    with Pipeline(manifest("jpeg", (64, 64, 3)), (3, 56, 56), threads=2) as p:
        outs = list(p.run(source()))
    for o in outs:
        assert o.t_fetch0 <= o.t_fetch1 <= o.t_prep1
        assert o.fetch_s == pytest.approx(o.t_fetch1 - o.t_fetch0)
        assert o.prep_s == pytest.approx(o.t_prep1 - o.t_fetch1)
        assert o.fetch_s >= 0.019 and o.prep_s > 0
    for a, b in zip(outs, outs[1:]):
        assert b.t_fetch0 >= a.t_fetch1  # one loader, batches requested in order


def test_close_while_loader_blocked_in_reader():
    recs = encode(pictures(2, 4, 4, 1), "raw")
    release = threading.Event()
    ended = threading.Event()

    def source():
        try:
            yield batch(recs, 0)
            release.wait(30)  # a reader stuck in I/O
            yield batch(recs, 1)
        finally:
            ended.set()

    p = Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4))
    it = p.run(source())
    assert next(it).step == 0
    time.sleep(0.05)
    t = time.perf_counter()
    p.close()
    assert time.perf_counter() - t < 3.0
    release.set()  # the reader returns: the loader sees the stop and ends the generator
    assert ended.wait(5)
    it._thread.join(5)
    assert not it.alive


def _long_source(recs, ended, steps=1000):
    """A reader that would go on for long; ``ended`` is set once the loader closes it."""
    try:
        for s in range(steps):
            yield batch(recs, s)
    finally:
        ended.set()


def test_close_while_loader_waits_for_permit():
    recs = encode(pictures(2, 4, 4, 1), "raw")
    ended = threading.Event()
    source = lambda: _long_source(recs, ended)  # noqa: E731

    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4), prefetch=2) as p:
        it = p.run(source())
        next(it)
        time.sleep(0.05)  # the loader is two ahead and waiting
        t = time.perf_counter()
        it.close()
        assert time.perf_counter() - t < 3.0
        assert ended.wait(5) and not it.alive
        with pytest.raises(StopIteration):
            next(it)


def test_abandoned_run_stops_loader():
    recs = encode(pictures(2, 4, 4, 1), "raw")
    ended = threading.Event()
    source = lambda: _long_source(recs, ended)  # noqa: E731

    with Pipeline(manifest("raw", (4, 4, 1)), (1, 4, 4)) as p:
        it = p.run(source())
        next(it)
        thread = it._thread
        del it
        gc.collect()
        assert ended.wait(5)
        thread.join(5)
        assert not thread.is_alive()


@pytest.mark.parametrize("dtype,n", [("uint8", 100_000), ("float32", 25_000)])
def test_raw_is_vectorised(dtype, n):
    """10^5 MNIST raw records in well under a second (float32: Caffe's HDF5 records, 4x
    the bytes, a quarter of them in a quarter of the time): no per-sample Python."""
    bs = 1000
    per = 784 * np.dtype(dtype).itemsize
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, n * 784, dtype=np.uint8)
    if dtype == "float32":
        data = (data / np.float32(256)).astype(np.float32).view(np.uint8)
    labels = rng.integers(0, 10, n)
    offsets = np.arange(bs + 1, dtype=np.int64) * per

    def source():
        for s in range(n // bs):
            sl = slice(s * bs, (s + 1) * bs)
            yield Batch(s, np.arange(sl.start, sl.stop), data[sl.start * per:sl.stop * per],
                        offsets, labels[sl])

    m = dict(manifest("raw", (28, 28, 1)), dtype=dtype, layout="chw", scale=1 / 256) \
        if dtype == "float32" else manifest("raw", (28, 28, 1))
    with Pipeline(m, (1, 28, 28), threads=2) as p:
        t = time.perf_counter()
        total = sum(o.records for o in p.run(source()))
        dt = time.perf_counter() - t
    assert total == n
    assert dt < n / 100_000, f"{n} raw records took {dt:.2f} s"


# ---- real datasets, through a real reader -----------------------------------------------

@pytest.mark.parametrize("preset,model,atol", [
    ("mnist", (1, 28, 28), 1e-6), ("cifar10", (3, 32, 32), 1e-6),
    ("cifar10", (1, 24, 24), 2 / 255)])  # resized: uint8 resizes round to grey levels
def test_float32_and_uint8_give_the_same_model_input(tmp_path_factory, preset, model, atol):
    """Caffe's float32 HDF5 (pixels / 256, channel-major) and the uint8 dataset of the same
    seed give the model the same tensors, with brightness augmentation and normalisation,
    through every reader: scaled data is mapped once, never re-scaled as pixels."""
    root = tmp_path_factory.getbasetemp() / "pipeline-f32"
    u8 = make_dataset(root, "hdf5", "raw", preset=preset, records=20, shards=2)
    f32 = make_dataset(root, "hdf5", "raw", preset=preset, records=20, shards=2,
                       dtype="float32")
    plan = make_plan(20, 1, 0, 8, epoch=0, seed=3, shuffle="global")
    out = {}
    for ds in (u8, f32):
        for name, opts in (("naive", {}), ("coordinated", {}), ("memory", {}),
                           ("memory", {"hold": "pymem"})):
            with make_reader(name, ds, **opts) as reader, \
                    Pipeline(ds.manifest, model, threads=2, seed=5) as pipe:
                outs = list(pipe.run(reader.epoch(plan)))
            out[ds.manifest["dtype"], name, len(opts)] = torch.cat([o.x for o in outs])
    want = out["uint8", "memory", 0]
    assert float(want.min()) < -0.5 and float(want.max()) > 0.5  # [-1, 1]: mapped once
    for key, x in out.items():
        torch.testing.assert_close(x, want, rtol=0, atol=atol if key[0] == "float32"
                                   else 0, msg=str(key))


@pytest.mark.parametrize("fmt,encoding", FORMATS_X_ENCODINGS)
def test_dataset_through_reader(tmp_path_factory, fmt, encoding):
    """Records written by a format and read by the memory reader come out of the pipeline
    as the pictures that were rendered (exactly for raw/PNG, closely for JPEG)."""
    preset = get_preset("cifar10")
    ds = make_dataset(tmp_path_factory.getbasetemp() / "pipeline", fmt, encoding,
                      preset=preset.name, records=24, shards=2)
    plan = make_plan(ds.records, 1, 0, 8, epoch=0, seed=3, shuffle="global")
    h, w, c = ds.shape
    with make_reader("memory", ds) as reader, \
            Pipeline(ds.manifest, (c, h, w), threads=2, augment=False, mean=0,
                     std=1) as pipe:
        outs = list(pipe.run(reader.epoch(plan)))
    assert len(outs) == plan.steps
    ids = np.concatenate([o.ids for o in outs])
    assert sorted(ids.tolist()) == list(range(ds.records))
    pixels, labels = render(preset.style, 0, ids, ds.shape, preset.classes)
    x = torch.cat([o.x for o in outs])
    want = torch.from_numpy(pixels).permute(0, 3, 1, 2).float() / 255
    assert torch.equal(torch.cat([o.y for o in outs]), torch.from_numpy(labels))
    err = (x - want).abs()
    if encoding == "jpeg":
        assert float(err.mean()) < 10 / 255  # textured pictures, quality 90
    else:
        assert float(err.max()) < 1e-6
