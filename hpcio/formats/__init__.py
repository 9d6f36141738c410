"""Storage formats, in a registry: ``FORMATS[name]`` is the module that writes, describes,
natively reads and (for data made elsewhere) indexes that format.

What a format module provides is :class:`hpcio.formats.base.Format`: ``NAME``; a
``Writer(root, k, lo, hi, spec)`` per shard; ``targets(k, spec)`` (the paths shard ``k``
creates); ``manifest_keys(spec)`` (its part of the manifest); ``open_native(ds)``, whose
``get(i)`` returns record ``i``'s bytes through the format's own library, the way a
framework reads it (the naive reader); and, optionally, ``index(path, out, **options)``
and ``OPTIONS`` (the ``--format-option`` names and their choices, the first the default).
A new format is a module here added to :data:`FORMATS`.
"""

from ..errors import HpcioError
from . import hdf5, images, leveldb, lmdb, packed
from .base import Format

__all__ = ["FORMATS", "get_format"]

FORMATS: "dict[str, Format]" = {m.NAME: m for m in (lmdb, hdf5, images, packed,
                                                         leveldb)}


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise HpcioError(f"unknown format {name!r} (choose from {', '.join(FORMATS)})",
                         everywhere=True)
