"""Storage formats, in a registry: ``FORMATS[name]`` is the :class:`~.base.Format` that
writes, describes, natively reads, cleans up after and (for data made elsewhere) detects
and indexes that format, made from its module.

What a format module provides is said once, in :class:`hpcio.formats.base.Format`:
``NAME``, ``Writer``, ``targets``, ``manifest_keys`` and ``open_native``, and where they
apply ``INFO`` (:class:`~.base.FormatInfo`: mapped files, a file per record, a key-order
cursor, element types, ``--format-option`` names) and the hooks ``index``, ``detect``,
``owned`` and ``in_use``, each with its default there. A new format is a module here added
to :data:`FORMATS`.
"""

import os

from ..errors import HpcioError, lookup
from . import hdf5, images, leveldb, lmdb, npz, packed, parquet, tfrecord
from .base import SURE, Format

__all__ = ["FORMATS", "get_format", "open_native", "detect"]

FORMATS: "dict[str, Format]" = {m.NAME: Format.of(m) for m in (lmdb, hdf5, images, packed,
                                                                leveldb, npz, tfrecord,
                                                                parquet)}


def get_format(name: str) -> Format:
    return lookup(FORMATS, name, "format")


def open_native(ds):
    """Dataset ``ds``'s records through its format's library (``Format.open_native``)."""
    return FORMATS[ds.format].open_native(ds)


def detect(path: str) -> Format:
    """The format of the data made elsewhere at ``path``, among those that index: the
    first (in registry order) sure of it, else the first that may hold it."""
    if not os.path.exists(path):
        raise HpcioError(f"{path}: no such file or directory")
    best, score = None, 0
    for fmt in FORMATS.values():
        s = fmt.detect(path) if fmt.index is not None else 0
        if s > score:
            best, score = fmt, s
        if score >= SURE:
            break
    if best is None:
        raise HpcioError(f"{path}: not an LMDB environment, LevelDB, HDF5 file, .npz, "
                         f"TFRecord or parquet file, or image folder (an HDF5 file whose "
                         f"signature is missing is corrupt)")
    return best
