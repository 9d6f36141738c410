"""Readers: execute a sample plan and deliver batches (see :mod:`hpcio.readers.base`).

``READERS`` maps a name (``--reader``) to a class; :func:`make_reader` builds one.
"""

import inspect

from ..errors import HpcioError
from .base import READERS, Batch, Reader, ReaderStats, faults, register
from . import coordinated, memory, naive  # noqa: F401  (register the readers)

__all__ = ["READERS", "Batch", "Reader", "ReaderStats", "faults", "register", "make_reader"]


# options a run may pass to whichever reader it picks; a reader without them ignores them
COMMON_OPTIONS = {"hints", "prefetch", "collective"}


def make_reader(name, dataset, comm=None, **options):
    """The reader registered as ``name`` for ``dataset`` (collective over ``comm`` for
    readers that use MPI: call it on every rank)."""
    try:
        cls = READERS[name]
    except KeyError:
        raise HpcioError(f"unknown reader {name!r} (choose from {', '.join(sorted(READERS))})",
                         everywhere=True)
    known = set(inspect.signature(cls.__init__).parameters) | COMMON_OPTIONS
    bad = sorted(set(options) - known)
    if bad:
        raise HpcioError(f"reader {name!r} has no option {', '.join(bad)}", everywhere=True)
    return cls(dataset, comm, **options)
