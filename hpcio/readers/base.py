"""The reader protocol: for an epoch's plan, yield this rank's batches in plan order."""

import resource
from dataclasses import dataclass, field, fields

import numpy as np

from ..fsutil import aligned_empty

__all__ = ["Batch", "ReaderStats", "Reader", "BufferRing", "READERS", "register", "faults"]


@dataclass
class Batch:
    """One step's records on one rank: one contiguous buffer plus offsets, never a list of
    per-sample Python objects. Record ``k`` is ``data[offsets[k]:offsets[k+1]]``.

    Lifetime: ``data`` may be a reader-owned buffer that is reused once the consumer asks
    the iterator for the next batch; a consumer that keeps the bytes longer copies them.
    """

    step: int
    ids: np.ndarray  # int64 record ids, plan order
    data: np.ndarray  # uint8, 1-D
    offsets: np.ndarray  # int64, len(ids) + 1
    labels: np.ndarray  # int64
    fetch_s: float = 0.0  # seconds of I/O work that produced this batch (may overlap compute)

    def __len__(self):
        return len(self.ids)

    @property
    def nbytes(self):
        return int(self.offsets[-1])

    def record(self, k):
        return self.data[self.offsets[k]:self.offsets[k + 1]]


@dataclass
class ReaderStats:
    """What a reader did on this rank. Definitions:

    bytes      record bytes delivered (requested by the plan)
    read_bytes bytes the reader asked the OS / MPI-IO / library for (>= bytes when a
               reader reads whole ranges or pages; 0 where unknown, e.g. mmap)
    calls      read calls issued (MPI-IO reads, os.pread, library gets, file opens+reads)
    io_s       seconds spent inside those calls (on any thread of the reader)
    wait_s     seconds the consumer was blocked waiting for a batch
    load_s     seconds spent loading data before the first batch (the memory reader's
               up-front read of the whole dataset; 0 for streaming readers)
    minflt/majflt  page faults during the epoch (getrusage, whole process): memory-mapped
               reads show up only here, not in Darshan nor /proc/self/io
    """

    bytes: int = 0
    read_bytes: int = 0
    calls: int = 0
    records: int = 0
    batches: int = 0
    io_s: float = 0.0
    wait_s: float = 0.0
    load_s: float = 0.0
    minflt: int = 0
    majflt: int = 0
    extra: dict = field(default_factory=dict)

    def reset(self):
        """Zero the counters (e.g. between benchmark repeats); ``extra`` is kept."""
        for f in fields(self):
            if f.name != "extra":
                setattr(self, f.name, f.default)

    def as_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        d.update(self.extra)
        return d


def faults():
    """(minor, major) page faults of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_majflt


class BufferRing:
    """``slots`` page-aligned buffers used in turn and grown on demand (by ``slack``):
    the data of a batch in slot ``k`` stays valid until slot ``k`` is taken again."""

    def __init__(self, slots, slack=1.0, least=1):
        self.bufs = [None] * int(slots)
        self.slack, self.least = slack, least

    def __len__(self):
        return len(self.bufs)

    def __getitem__(self, k):
        return self.bufs[k]

    def take(self, k, nbytes):
        buf = self.bufs[k]
        if buf is None or len(buf) < nbytes:
            buf = self.bufs[k] = aligned_empty(max(int(nbytes * self.slack), self.least))
        return buf

    def clear(self):
        self.bufs = [None] * len(self.bufs)


class Reader:
    """Base class. A reader is made once per run on every rank (collectively when it uses
    MPI) and then executes plans: ``for batch in reader.epoch(plan): ...``.

    Subclasses set ``name`` and implement :meth:`epoch`; :meth:`close` frees resources
    (collective for readers that opened MPI files).
    """

    name = "?"

    def __init__(self, dataset, comm, **options):
        self.ds = dataset
        self.comm = comm
        self.options = options
        self.stats = ReaderStats()

    def epoch(self, plan):
        raise NotImplementedError

    def preload(self, plan):
        """``plan`` is the epoch after the next one: a reader that can starts its first
        reads early (the coordinated reader); the others ignore it."""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


READERS = {}


def register(cls):
    """Class decorator: make a reader selectable by ``--reader <cls.name>``."""
    READERS[cls.name] = cls
    return cls
