"""Readers: execute a sample plan and deliver batches (see :mod:`hpcio.readers.base`).

``READERS`` maps a name (``--reader``) to a class; :func:`make_reader` builds one.
"""

from ..errors import HpcioError
from .base import READERS, Batch, Reader, ReaderStats, faults, register
from . import coordinated, memory, naive  # noqa: F401  (register the readers)

__all__ = ["READERS", "Batch", "Reader", "ReaderStats", "faults", "register", "make_reader"]


def make_reader(name, dataset, comm=None, **options):
    """The reader registered as ``name`` for ``dataset`` (collective over ``comm`` for
    readers that use MPI: call it on every rank)."""
    try:
        cls = READERS[name]
    except KeyError:
        raise HpcioError(f"unknown reader {name!r} (choose from {', '.join(sorted(READERS))})",
                         everywhere=True)
    return cls(dataset, comm, **options)
