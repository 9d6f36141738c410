"""Readers: execute a sample plan and deliver batches (see :mod:`hpcio.readers.base`).

``READERS`` maps a name (``--reader``) to a class; :func:`make_reader` builds one.
"""

import inspect
import math

from ..errors import HpcioError, lookup
from .base import (PATTERNS, READERS, VERIFY, Auto, Batch, Reader, ReaderStats,
                   convert_option, faults, register)
from . import coordinated, memory, naive  # noqa: F401  (register the readers)

__all__ = ["READERS", "PATTERNS", "Batch", "Reader", "ReaderStats", "faults", "register", "make_reader",
           "check_options", "check_dataset", "option_types"]


# options a run may pass to whichever reader it picks (a reader without them ignores
# them), with their types
COMMON_OPTIONS = {"hints": dict, "prefetch": int, "collective": Auto, "verify": VERIFY}

#: the least value of a numeric reader option (0 for one not listed): a count below it
#: would run as something else than the config records (``prefetch=-5`` ran with 0)
OPTION_LEAST = {"request_bytes": 1, "threads": 1, "sieve_ratio": 1.0}


def _in_range(name, value):
    """``value`` of a numeric option, refused in one line when not finite or below its
    least (:data:`OPTION_LEAST`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    least = OPTION_LEAST.get(name, 0)
    if not math.isfinite(value) or value < least:
        raise HpcioError(f"reader option {name}={value!r} must be a finite number >= {least}",
                         everywhere=True)
    return value


def option_types(cls):
    """Every option reader ``cls`` takes: its annotation, else the type of its default."""
    out = dict(COMMON_OPTIONS)
    for k, p in inspect.signature(cls.__init__).parameters.items():
        if p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty:
            out[k] = p.annotation if p.annotation is not p.empty else type(p.default)
    return out


def _reader(name):
    return lookup(READERS, name, "reader", sorted(READERS))


def check_options(name, options):
    """``options`` for reader ``name``, checked and converted: an unknown one, or one
    given as text (``--reader-option KEY=VALUE``) that its type does not take, is one
    line naming it. Cheap and local: run it before any work."""
    types = option_types(_reader(name))
    bad = sorted(set(options) - set(types))
    if bad:
        raise HpcioError(f"reader {name!r} has no option {', '.join(bad)}", everywhere=True)
    return {k: _in_range(k, convert_option(k, v, types[k])) for k, v in options.items()}


def check_dataset(name, dataset, options):
    """Refuse, before any work and with one line on every rank, options of reader
    ``name`` that cannot read ``dataset`` (e.g. ``hdf5=mpio`` on a dataset that is not
    HDF5, or without parallel h5py): the reader's ``check``."""
    _reader(name).check(dataset, **check_options(name, options))


def make_reader(name, dataset, comm=None, **options):
    """The reader registered as ``name`` for ``dataset`` (collective over ``comm`` for
    readers that use MPI: call it on every rank), its options as :func:`check_options`
    makes them."""
    return _reader(name)(dataset, comm, **check_options(name, options))
