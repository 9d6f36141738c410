"""Synthetic pictures that compress like real ones, deterministic from (seed, record id).

Random noise would be the wrong test data: it does not compress, so PNG/JPEG records would
be far larger than real ones and decoding would cost what it never costs in training. The
pictures here are drawn instead — digit-like pen strokes for MNIST, soft shapes over
gradients with a fine texture for CIFAR-10 and ImageNet — and tuned so that their encoded
sizes match the figures of Lim et al. 2016 (MNIST PNG just under 300 bytes, CIFAR-10 PNG
under 4 KB, ImageNet JPEG about 110 KB).

Everything a picture depends on comes from a counter-based hash of (seed, record id), and a
texture tile that depends on the seed only, so a record is the same whichever rank, shard or
block makes it. Pixels are computed for a whole block of records at once with numpy; only
the final PNG/JPEG encoding runs per picture (in Pillow's C code).
"""

import io
from functools import lru_cache

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import HpcioError, lookup

__all__ = ["ENCODINGS", "EXTENSIONS", "uniform", "labels", "render", "encode", "decode",
           "sniff"]

ENCODINGS = ("raw", "png", "jpeg")
EXTENSIONS = {"raw": "raw", "png": "png", "jpeg": "jpg"}

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x):
    """splitmix64 finaliser, vectorised (uint64 wrap-around is intended)."""
    with np.errstate(over="ignore"):
        x = x + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def uniform(seed, ids, k, stream=0):
    """(len(ids), k) floats in [0, 1) that depend only on (seed, stream, id, column)."""
    ids = np.asarray(ids, dtype=np.uint64).reshape(-1, 1)
    base = _mix(np.uint64(seed & 0xFFFFFFFFFFFFFFFF) ^ _mix(np.uint64(stream)))
    with np.errstate(over="ignore"):
        x = _mix(_mix(base ^ ids) + np.arange(k, dtype=np.uint64)[None, :] * _GOLDEN)
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def labels(seed, ids, classes):
    """Each record's class: uniform over ``classes``, from (seed, id) alone."""
    u = uniform(seed, ids, 1, stream=1)[:, 0]
    return np.minimum((u * classes).astype(np.int64), classes - 1)


# ---- MNIST-like digits -----------------------------------------------------------------

# Pen paths of the ten digits in a unit box (x right, y down); one path per digit.
_DIGITS = [
    [(.5, .1), (.72, .2), (.8, .5), (.72, .8), (.5, .9), (.28, .8), (.2, .5), (.28, .2), (.5, .1)],
    [(.35, .25), (.55, .1), (.55, .9)],
    [(.22, .3), (.35, .12), (.65, .12), (.78, .3), (.7, .5), (.2, .9), (.8, .9)],
    [(.22, .15), (.72, .15), (.45, .45), (.75, .62), (.65, .86), (.22, .86)],
    [(.65, .9), (.65, .1), (.2, .65), (.85, .65)],
    [(.75, .12), (.3, .12), (.26, .45), (.6, .42), (.78, .62), (.62, .88), (.22, .85)],
    [(.7, .1), (.38, .38), (.26, .7), (.45, .9), (.7, .8), (.7, .6), (.45, .52), (.28, .66)],
    [(.2, .12), (.8, .12), (.42, .9)],
    [(.5, .5), (.72, .32), (.5, .1), (.28, .32), (.5, .5), (.75, .7), (.5, .9), (.25, .7), (.5, .5)],
    [(.72, .35), (.5, .12), (.28, .3), (.45, .5), (.72, .35), (.62, .9)],
]
_NV = max(len(p) for p in _DIGITS)
# every path padded to _NV vertices by repeating its last one (zero-length segments)
_PATHS = np.array([p + [p[-1]] * (_NV - len(p)) for p in _DIGITS], dtype=np.float32)


def _digits(seed, ids, lab, shape):
    """Pen strokes of the labelled digit under a per-record affine transform, vertex
    jitter and pen width, anti-aliased: grey edges around white strokes on black."""
    h, w, c = shape
    n = len(ids)
    u = uniform(seed, ids, 8 + 2 * _NV, stream=2).astype(np.float32)
    pts = _PATHS[lab] - 0.5 + (u[:, 8:].reshape(n, _NV, 2) - 0.5) * 0.08
    ang = (u[:, 0] - 0.5) * 0.5
    shear = (u[:, 1] - 0.5) * 0.4
    sx = h * (0.55 + 0.2 * u[:, 2])
    sy = h * (0.68 + 0.1 * u[:, 3])
    cos, sin = np.cos(ang), np.sin(ang)
    x = pts[..., 0] + shear[:, None] * pts[..., 1]
    y = pts[..., 1]
    px = (cos[:, None] * x - sin[:, None] * y) * sx[:, None] + w / 2 + (u[:, 4:5] - .5) * 3
    py = (sin[:, None] * x + cos[:, None] * y) * sy[:, None] + h / 2 + (u[:, 5:6] - .5) * 3
    ax, ay = px[:, :-1, None], py[:, :-1, None]  # (n, S, 1) segment starts
    bx, by = px[:, 1:, None] - ax, py[:, 1:, None] - ay  # segment vectors
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32) + 0.5
    qx, qy = xx.reshape(1, 1, -1), yy.reshape(1, 1, -1)  # (1, 1, HW) pixel centres
    qx, qy = qx - ax, qy - ay
    t = np.clip((qx * bx + qy * by) / np.maximum(bx * bx + by * by, 1e-6), 0, 1)
    qx -= t * bx
    qy -= t * by
    d = np.sqrt((qx * qx + qy * qy).min(1))  # (n, HW) distance to the nearest stroke
    width = (1.0 + 0.9 * u[:, 6])[:, None]
    ink = np.clip((width - d) / 1.3 + 0.5, 0, 1)
    img = np.rint(ink * 255).astype(np.uint8).reshape(n, h, w, 1)
    return np.repeat(img, c, axis=3) if c > 1 else img


# ---- CIFAR/ImageNet-like scenes ---------------------------------------------------------

_TILE = 512


def _upsample(img, f):
    """Bilinear upsampling of (n, h, w, c) by an integer factor ``f`` (edges clamped).

    Output phase ``k`` of each input pixel blends two neighbours with fixed weights, so the
    whole thing is 2*f strided slice operations per axis, no gathers."""
    if f == 1:
        return img
    for axis in (1, 2):
        size = img.shape[axis]
        pad = [(0, 0)] * img.ndim
        pad[axis] = (1, 1)
        p = np.pad(img, pad, mode="edge")
        shape = list(img.shape)
        shape[axis:axis + 1] = [size, f]
        out = np.empty(shape, dtype=np.float32)
        for k in range(f):
            off = (k + .5) / f - .5
            lo, t = (0, 1 + off) if off < 0 else (1, off)
            sl0 = [slice(None)] * img.ndim
            sl1 = [slice(None)] * img.ndim
            sl0[axis] = slice(lo, lo + size)
            sl1[axis] = slice(lo + 1, lo + 1 + size)
            dst = [slice(None)] * out.ndim
            dst[axis + 1] = k
            out[tuple(dst)] = p[tuple(sl0)] * (1 - t) + p[tuple(sl1)] * t
        shape = list(img.shape)
        shape[axis] = size * f
        img = out.reshape(shape)
    return img


@lru_cache(maxsize=4)
def _texture(seed, c):
    """A seed-only texture tile: noise in octaves of 1 to 16 pixels (smooth, no blocks),
    unit variance, like the grain and detail of a photograph."""
    rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x7E47])
    t = np.zeros((_TILE, _TILE, c), dtype=np.float32)
    for s, a in ((1, 1.0), (2, 0.9), (4, 0.8), (8, 0.7), (16, 0.6)):
        octave = rng.standard_normal((1, _TILE // s, _TILE // s, c), dtype=np.float32)
        t += a * _upsample(octave, s)[0]
    return (t - t.mean()) / t.std()


# per picture size: (ellipses, shape resolution divisor, texture amplitude in grey levels)
def _scene_params(h):
    return (3, 1, 12.0) if h <= 64 else (14, 4, 33.0)


def _scenes(seed, ids, lab, shape, classes):
    """A two-colour gradient background, soft ellipses (the first one's colour set by the
    class) and a multi-scale texture. Large pictures draw their shapes at a quarter of the
    resolution and upsample them bilinearly (smooth shapes lose nothing, 16x less work)."""
    h, w, c = shape
    n = len(ids)
    ne, f, grain = _scene_params(h)
    hs, ws = -(-h // f), -(-w // f)  # round up; the upsampled picture is cropped
    u = uniform(seed, ids, 12 + 9 * ne, stream=3).astype(np.float32)
    cls = uniform(seed, lab, 3, stream=4).astype(np.float32)  # class colour
    yy, xx = np.mgrid[0:hs, 0:ws].astype(np.float32)
    yy, xx = (yy + .5) / hs, (xx + .5) / ws
    ang = u[:, 0] * 2 * np.pi
    g = (np.cos(ang)[:, None, None] * (xx - .5) + np.sin(ang)[:, None, None] * (yy - .5)) + .5
    c0 = u[:, 1:4] * 255
    c1 = u[:, 4:7] * 255
    img = c0[:, None, None, :c] + g[..., None] * (c1 - c0)[:, None, None, :c]
    for e in range(ne):
        v = u[:, 12 + 9 * e: 21 + 9 * e]
        cx, cy = v[:, 0], v[:, 1]
        scale = .3 if e < 3 else .12
        rx, ry = .05 + scale * v[:, 2], .05 + scale * v[:, 3]
        th = v[:, 4] * np.pi
        col = (cls if e == 0 else v[:, 5:8]) * 255
        dx = xx - cx[:, None, None]
        dy = yy - cy[:, None, None]
        ct, st = np.cos(th)[:, None, None], np.sin(th)[:, None, None]
        r2 = ((ct * dx + st * dy) / rx[:, None, None]) ** 2 + \
             ((-st * dx + ct * dy) / ry[:, None, None]) ** 2
        edge = (2.0 + 10 * v[:, 8]) * (f if f > 1 else 1)
        m = np.clip((1 - r2) * edge[:, None, None], 0, 1)[..., None]
        img = img * (1 - m) + col[:, None, None, :c] * m
    img = _upsample(img.astype(np.float32), f)[:, :h, :w]
    tex = _texture(seed, c)
    oy = (u[:, 8] * (_TILE - h)).astype(np.intp)
    ox = (u[:, 9] * (_TILE - w)).astype(np.intp)
    amp = grain * (0.6 + 0.8 * u[:, 10])
    for k in range(n):  # a view per picture: cheaper than a gather of n*H*W indices
        img[k] += tex[oy[k]:oy[k] + h, ox[k]:ox[k] + w] * amp[k]
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _noise(seed, ids, shape):
    """Random bytes from (seed, id): data that does not compress, as DLIO writes it."""
    out = np.empty((len(ids),) + tuple(shape), np.uint8)
    for k, i in enumerate(ids):
        out[k] = np.frombuffer(np.random.default_rng([int(seed), int(i)]).bytes(
            out[k].size), np.uint8).reshape(shape)
    return out


def render(style, seed, ids, shape, classes):
    """Pixels (n, H, W, C) uint8 and labels (n,) int64 of records ``ids``."""
    ids = np.asarray(ids, dtype=np.int64)
    lab = labels(seed, ids, classes)
    if style == "digits":
        return _digits(seed, ids, lab % 10, shape), lab
    if style == "scenes":
        return _scenes(seed, ids, lab, shape, classes), lab
    if style == "noise":
        return _noise(seed, ids, shape), lab
    raise HpcioError(f"unknown picture style {style!r}")


# ---- encoding -----------------------------------------------------------------------------

def _pil(img):
    return Image.fromarray(img[..., 0] if img.shape[2] == 1 else img)


def _png(img, quality):
    buf = io.BytesIO()
    _pil(img).save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(img, quality):
    buf = io.BytesIO()
    # 4:4:4 (no chroma subsampling): with 4:2:0 a 256x256 picture cannot reach the
    # ~110 KB of an ImageNet file without looking like noise
    _pil(img).save(buf, format="JPEG", quality=int(quality), subsampling=0)
    return buf.getvalue()


_ENCODERS = {"png": _png, "jpeg": _jpeg}


def encode(pixels, encoding, quality=90):
    """Records of a block as one uint8 buffer plus per-record lengths.

    ``raw`` is the pixel bytes themselves (no copy); ``png``/``jpeg`` encode picture by
    picture in Pillow."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    n = len(pixels)
    if encoding == "raw":
        per = pixels[0].size if n else 0
        return pixels.reshape(-1), np.full(n, per, dtype=np.int64)
    enc = lookup(_ENCODERS, encoding, "encoding", ENCODINGS)
    parts = [enc(p, quality) for p in pixels]
    lengths = np.fromiter((len(b) for b in parts), dtype=np.int64, count=n)
    return np.frombuffer(b"".join(parts), dtype=np.uint8), lengths


def decode(data, encoding, shape=None, where="record"):
    """One record back to (H, W, C) uint8 pixels (tests, importers); bytes that begin
    like a picture and are not one: an :class:`HpcioError` naming ``where`` (the file and
    the record)."""
    if encoding == "raw":
        return np.frombuffer(bytes(data), dtype=np.uint8).reshape(shape)
    try:
        img = np.asarray(Image.open(io.BytesIO(bytes(data))))
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        why = "not a picture PIL reads" if isinstance(e, UnidentifiedImageError) else \
            (str(e).splitlines() or [type(e).__name__])[0]
        raise HpcioError(f"{where}: starts like {encoding.upper()} but is not a readable "
                         f"image ({why})")
    return img[..., None] if img.ndim == 2 else img


def sniff(head):
    """The encoding of an image file from its first bytes, or None."""
    head = bytes(head[:8])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    return None
