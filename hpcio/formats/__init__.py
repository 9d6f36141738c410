"""Storage formats, in a registry: ``FORMATS[name]`` is the module that writes, describes
and natively reads that format.

Every format module has ``NAME``; ``Writer(root, k, lo, hi, spec)`` with ``write(block)``,
``close() -> ShardResult`` and ``abort()``; ``targets(k, spec)`` (the paths shard ``k``
creates); ``manifest_keys(spec)`` (its part of the manifest); and ``open_native(ds)``,
whose ``get(i)`` returns record ``i``'s bytes through the format's own library, the way a
framework reads it (the naive reader), and ``close()``.
"""

from ..errors import HpcioError
from . import hdf5, images, lmdb, packed

__all__ = ["FORMATS", "get_format"]

FORMATS = {m.NAME: m for m in (lmdb, hdf5, images, packed)}


def get_format(name):
    try:
        return FORMATS[name]
    except (KeyError, TypeError):
        raise HpcioError(f"unknown format {name!r} (choose from {', '.join(FORMATS)})",
                         everywhere=True)
