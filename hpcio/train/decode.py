"""Records to pixels: raw bytes as one vectorised view, PNG/JPEG through Pillow.

Raw records are never touched one by one: a batch whose records all have ``H*W*C``
elements and lie back to back is one ``reshape`` of its buffer (a ``view`` first for
records of another element type than uint8: Caffe's float32 HDF5). PNG and JPEG are
decoded picture by picture, because that is what the codecs do; Pillow releases the GIL
inside its decoders and resamplers, so a pool of threads decodes in parallel.
"""

import io

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import HpcioError, lookup
from ..formats.example import payloads

__all__ = ["MODES", "DECODERS", "DTYPES", "CONTAINERS", "element_type", "raw_view",
           "decode_images", "decode_records", "unwrapper"]

MODES = {1: "L", 3: "RGB"}  # channels -> Pillow mode (gray uses Pillow's ITU-R 601 luma)


def sample_shape(shape):
    """A manifest's ``[H, W, C]`` as ints, checked."""
    try:
        h, w, c = (int(v) for v in shape)
    except (TypeError, ValueError):
        raise HpcioError(f"sample shape must be [H, W, C], not {shape!r}", everywhere=True)
    if min(h, w, c) < 1:
        raise HpcioError(f"sample shape must be positive, not {list(shape)}", everywhere=True)
    return h, w, c


#: byte order of a raw record: ``hwc`` (pixel after pixel, as hpcio writes) or ``chw``
#: (plane after plane: Caffe's Datum ``data`` field and HDF5 ``data`` dataset)
LAYOUTS = ("hwc", "chw")

#: element type of raw records (the manifest's ``dtype``), as the formats store them
DTYPES = {"uint8": np.dtype("u1"), "float32": np.dtype("<f4"), "float64": np.dtype("<f8")}


def element_type(name):
    """The numpy dtype of a manifest's ``dtype`` (uint8 when absent), checked."""
    try:
        return DTYPES[name or "uint8"]
    except (KeyError, TypeError):
        raise HpcioError(f"raw records of dtype {name!r} are not pictures (choose from "
                         f"{', '.join(DTYPES)})", everywhere=True)


def raw_view(data, offsets, shape, layout="hwc", dtype="uint8"):
    """(N, H, W, C) view of a batch of raw records in their element type (``dtype``, a
    name of :data:`DTYPES`), without a per-record step.

    The records must be back to back and each ``H*W*C`` elements long (checked
    vectorised); anything else is bad data and raises :class:`HpcioError`. Channel-major
    (``chw``) records are viewed through a transpose, not copied.
    """
    lookup(LAYOUTS, layout, "raw layout")
    dt = element_type(dtype)
    h, w, c = sample_shape(shape)
    per = h * w * c * dt.itemsize
    offsets = np.asarray(offsets)
    n = len(offsets) - 1
    lengths = np.diff(offsets)
    if n and (lengths != per).any():
        k = int(np.flatnonzero(lengths != per)[0])
        raise HpcioError(f"raw record {k} of the batch has {int(lengths[k])} bytes, the "
                         f"sample shape {[h, w, c]} of {dt.name} needs {per}")
    lo = int(offsets[0]) if len(offsets) else 0
    flat = np.asarray(data)[lo:lo + n * per]
    if dt.itemsize > 1:
        flat = flat.view(dt)
    if layout == "chw":
        return flat.reshape(n, c, h, w).transpose(0, 2, 3, 1)
    return flat.reshape(n, h, w, c)


def _open(buf, record):
    try:
        img = Image.open(io.BytesIO(buf))
        img.load()  # the decode proper (GIL released inside Pillow)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as e:
        raise HpcioError(f"record {record}: cannot decode the image ({e})")
    return img


def decode_images(data, offsets, lo, hi, out, ids=None, other=None):
    """Decode records ``lo:hi`` of a batch into ``out`` ((hi-lo, H, W, C) uint8), each
    converted to ``out``'s channel count (Pillow modes L / RGB).

    A picture of another size than ``out`` is bad data, unless ``other=(H', W')`` is
    given: then it is resized alone (bilinear, antialiased when shrinking) to that size
    and returned in a dict {position in the chunk: (H', W', C) array}. That is how a
    folder of pictures of mixed sizes is handled; pictures of the expected size are left
    for one resize of the whole chunk.
    """
    _, h, w, c = out.shape
    mode = MODES.get(c)
    if mode is None:
        raise HpcioError(f"images need 1 or 3 channels, not {c}", everywhere=True)
    data = np.asarray(data)
    odd = {}
    for k in range(lo, hi):
        rec = int(ids[k]) if ids is not None else k
        img = _open(data[offsets[k]:offsets[k + 1]], rec)
        if img.mode != mode:
            img = img.convert(mode)
        if img.size == (w, h):
            out[k - lo] = np.asarray(img).reshape(h, w, c)
        elif other is None:
            raise HpcioError(f"record {rec}: picture is {img.size[1]}x{img.size[0]}, "
                             f"the manifest says {h}x{w}")
        else:
            img = img.resize((other[1], other[0]), Image.BILINEAR)
            odd[k - lo] = np.array(img).reshape(other[0], other[1], c)
    return odd


def _decode_raw(batch, shape, layout="hwc", dtype="uint8"):
    return np.ascontiguousarray(raw_view(batch.data, batch.offsets, shape, layout, dtype))


def _decode_image(batch, shape, layout="hwc", dtype="uint8"):
    out = np.empty((len(batch),) + tuple(shape), dtype=np.uint8)
    decode_images(batch.data, batch.offsets, 0, len(batch), out, ids=batch.ids)
    return out


DECODERS = {"raw": _decode_raw, "png": _decode_image, "jpeg": _decode_image}


def _examples(manifest):
    """A TFRecord's Examples: the feature its index named (``tfrecord.image``), as
    ``tf.io.parse_single_example`` gives it."""
    key = (manifest.get("tfrecord") or {}).get("image", "image")

    def unwrap(data, offsets):
        try:
            return payloads(data, offsets, key.encode())
        except ValueError:
            raise HpcioError(f"a record of the batch is not a tf.train.Example with one "
                             f"'{key}' bytes feature (the manifest's container: example)")
    return unwrap


#: records that hold the sample inside (the manifest's ``container``): manifest ->
#: function of (data, offsets) of a batch -> (data, offsets) of its samples
CONTAINERS = {"example": _examples}


def unwrapper(manifest):
    """The function that takes a batch's samples out of their records (``CONTAINERS``),
    or None where records are the samples."""
    c = manifest.get("container")
    return None if c is None else lookup(CONTAINERS, c, "record container")(manifest)


class _Samples:
    """A batch's samples taken out of their records: what the decoders read of a batch."""

    def __init__(self, data, offsets, ids):
        self.data, self.offsets, self.ids = data, offsets, ids

    def __len__(self):
        return len(self.offsets) - 1


def decode_records(batch, manifest):
    """All records of ``batch`` as (N, H, W, C) at the manifest's shape, in its dtype
    (uint8 pixels; Caffe's scaled float32 as stored) (a copy, so it outlives the reader's
    buffer)."""
    enc = manifest.get("encoding")
    dec = lookup(DECODERS, enc, "encoding")
    unwrap = unwrapper(manifest)
    if unwrap is not None:
        data, offsets = unwrap(np.asarray(batch.data), batch.offsets)
        batch = _Samples(data, offsets, batch.ids)
    return dec(batch, sample_shape(manifest.get("shape")), manifest.get("layout", "hwc"),
               manifest.get("dtype", "uint8"))
