"""The reader protocol: for an epoch's plan, yield this rank's batches in plan order.

And what every reader shares: its counters (:class:`ReaderStats`: the batches, records
and bytes delivered are counted in :meth:`Reader.epoch`, which no reader overrides, the
page faults of an epoch by :meth:`Reader.count_faults`), the checks that the bytes
delivered are the bytes the index describes (every record's CRC32C, by
:meth:`Reader.check_crcs`: in :meth:`Reader.epoch`, or where the reader reads, for the
readers that check what they read themselves; every file's identity, in
:class:`FileCheck`), the read meter of
the reading thread (:class:`ThreadIO`) and the types of reader options
(:func:`convert_option`).
"""

import os
import resource
import threading
import time
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..cache import resident_bytes
from ..data.checksum import batch_ok, mismatch, record_crcs
from ..errors import HpcioError, size_message
from ..formats import FORMATS
from ..fsutil import aligned_empty
from ..mpiutil import node_comm

if TYPE_CHECKING:  # annotations only
    from ..data.dataset import Dataset
    from ..plan import Plan

__all__ = ["Batch", "ReaderStats", "Reader", "BufferRing", "READERS", "PATTERNS", "pattern",
           "register", "faults", "faults_since", "FileCheck", "size_error",
           "files_are_records", "ThreadIO", "Auto", "Collective", "convert_option",
           "MAX_CACHE_FILES", "VERIFY"]

# page-cache residency is measured per epoch for datasets of at most this many files
# (mincore maps every file: a folder of a million images would take seconds)
MAX_CACHE_FILES = 4096
#: what is checked on delivery: every record's CRC32C and every file's identity
#: (``records``), the files' identity and the records' lengths only (``size``), nothing
#: during the run (``off``: figures so measured are marked unverified)
VERIFY = ("records", "size", "off")


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

    bytes      record bytes delivered (what the plan asked for)
    read_bytes bytes the reader's reads brought in. MPI-IO and ``os.preadv`` readers
               (coordinated, memory): the bytes they asked for, holes read through
               included. Library readers (naive): the reading thread's ``rchar``
               (``/proc/self/task/<tid>/io``) around each batch's reads, so whatever the
               library reads counts (HDF5's sieve buffer for small records). 0 for
               memory-mapped reads (naive LMDB): see ``cache_gained_bytes`` and the faults
    calls      read calls: one per read system call (``read``/``pread``/``preadv``;
               library readers: the reading thread's ``syscr`` around each batch's
               reads) or MPI-IO read call (``MPI_File_read_at[_all]`` and its
               nonblocking forms); 0 for memory-mapped reads
    collective_calls  of the calls, the collective MPI-IO reads (``MPI_File_read_at_all``
               and its nonblocking form)
    opens      files opened (``open``, ``MPI_File_open``, a library's open of a file),
               on set-up and during epochs; not in ``calls``
    records, batches  records and batches delivered
    skipped    records a cursor stepped over to reach this rank's (the naive reader's
               ``access=cursor``: Caffe's reader with several solvers)
    io_s       seconds spent inside the reads (on any thread of the reader)
    verify_s   seconds spent checking delivered records against their CRC32C (in the
               consumer's thread, then also counted in ``wait_s``; the coordinated
               reader's on its I/O thread, per request, as part of reading ahead)
    wait_s     seconds the consumer was blocked waiting for a batch
    load_s     seconds spent loading data before the first batch (the memory reader's
               up-front read of the whole dataset; 0 for streaming readers)
    minflt/majflt  page faults during the epoch (getrusage, whole process): memory-mapped
               reads show up here, not in Darshan nor /proc/self/io (a poor proxy: one
               fault may bring in many pages of read-ahead)
    cache_gained_bytes  bytes of the dataset's files that came into the page cache during
               the epochs the trainer ran (mincore before and after each, see
               :meth:`Reader.mark_cache`): the I/O of memory-mapped reads. Node-wide:
               every process's reads of those files count, evictions count against.
               Measured on the first rank of each node only (0 on the others, so a sum
               over ranks is a sum over nodes), for datasets of at most
               ``MAX_CACHE_FILES`` files (``extra["cache_measured"]`` says)
    """

    bytes: int = 0
    read_bytes: int = 0
    calls: int = 0
    collective_calls: int = 0
    opens: int = 0
    records: int = 0
    batches: int = 0
    skipped: int = 0
    io_s: float = 0.0
    verify_s: float = 0.0
    wait_s: float = 0.0
    load_s: float = 0.0
    minflt: int = 0
    majflt: int = 0
    cache_gained_bytes: int = 0
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


def faults_since(f0):
    """(minor, major) page faults of this process since ``f0`` (a :func:`faults`)."""
    f1 = faults()
    return f1[0] - f0[0], f1[1] - f0[1]


class ThreadIO:
    """Bytes and read system calls of the calling thread (``rchar``, ``syscr`` of
    ``/proc/self/task/<tid>/io``): what a library read for us, whatever it does inside,
    and not the pipeline's or the sampler's reads. The file of the last thread that asked
    stays open (one ``pread`` per reading). ``read()`` returns ``(rchar, syscr, n)``,
    ``n`` the size of the text just read, since that read counts in the next reading
    (take off ``n`` and 1); None where the kernel keeps no task I/O accounting."""

    def __init__(self):
        self.tid, self.fd = None, None

    def read(self):
        tid = threading.get_native_id()
        try:
            if tid != self.tid:
                self.close()
                self.fd, self.tid = os.open(f"/proc/self/task/{tid}/io", os.O_RDONLY), tid
            text = os.pread(self.fd, 4096, 0)
            a, b = text.index(b"rchar:") + 6, text.index(b"syscr:") + 6
            return int(text[a:text.index(b"\n", a)]), int(text[b:text.index(b"\n", b)]), \
                len(text)
        except (OSError, ValueError):
            self.close()
            return None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        self.tid, self.fd = None, None


def files_are_records(ds):
    """True when every record is a file of its own (image folders): such files are
    checked by their readers on the file opened, never listed or stat-ed up front."""
    fmt = FORMATS.get(ds.format)
    return fmt is not None and fmt.info.file_per_record


def size_error(path, size, want, when):
    """The one line for a file of ``size`` bytes where the index says ``want``."""
    return HpcioError(size_message(path, size, want, when))


class FileCheck:
    """Bytes read are bytes delivered: every file of the dataset as the reader found it
    on open (device, inode, modification and change time; its size must be the index's),
    and a check that it still is: one ``os.stat`` per file and request, never per record.
    The change time catches a file written in place whose modification time was set back
    (``touch -d``): no user can set it. ``live=False`` (``verify=off``) checks on open only.

    Check *after* a read: ROMIO reports the full count for a read that ran past the end
    of a file that shrank, HDF5 fills such a read with zeros, ``pread`` just returns
    less. Check *before* touching a memory map: a page past the end of a mapped file
    kills the process with SIGBUS, which Python cannot turn into a line. Each failure is
    one line naming the file, the expected and the actual size.
    """

    def __init__(self, ds, live=True):
        self.live = live
        self.paths = ds.paths
        self.sizes = ds.index.file_bytes
        self.seen = [self._stat(j, "since the dataset was indexed")
                     for j in range(len(self.paths))]

    def _stat(self, j, when):
        p, want = self.paths[j], int(self.sizes[j])
        try:
            st = os.stat(p)
        except FileNotFoundError:
            raise HpcioError(f"{p}: vanished {when} (expected {want} bytes)")
        except OSError as e:
            raise HpcioError(f"{p}: {e.strerror} (expected {want} bytes)")
        if st.st_size != want:
            raise size_error(p, st.st_size, want, when)
        return st

    def check(self, files):
        """Raise :class:`HpcioError` unless every file number in ``files`` is as on open."""
        if not self.live:
            return
        for j in files:
            st = self._stat(j, "during the run")
            was = self.seen[j]
            if (st.st_dev, st.st_ino) != (was.st_dev, was.st_ino):
                raise HpcioError(f"{self.paths[j]}: replaced by another file during the run "
                                 f"({st.st_size} bytes, expected {int(self.sizes[j])})")
            if st.st_mtime_ns != was.st_mtime_ns or st.st_ctime_ns != was.st_ctime_ns:
                what = "modification" if st.st_mtime_ns != was.st_mtime_ns else "change"
                raise HpcioError(f"{self.paths[j]}: modified during the run ({st.st_size} "
                                 f"bytes, expected {int(self.sizes[j])}; its {what} "
                                 f"time changed)")

    def check_all(self):
        self.check(range(len(self.paths)))


# ---- reader options: strings from the command line, converted by the option's type ---------
class Auto:
    """Annotation of a reader option that is true, false or ``"auto"``."""


class Collective:
    """Annotation of the coordinated reader's ``collective``: true, false, ``"small"`` or
    ``"auto"``."""


def _flag(v):
    low = v.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(v)


def _auto(v):
    return "auto" if v.lower() == "auto" else _flag(v)


def _collective(v):
    return v.lower() if v.lower() in ("auto", "small") else _flag(v)


def _mapping(v):
    raise ValueError(v)


# an option's type (its annotation, else the type of its default) -> (converter, what)
OPTION_TYPES = {int: (int, "an integer"), float: (float, "a number"),
                bool: (_flag, "true or false"), Auto: (_auto, "true, false or auto"),
                Collective: (_collective, "true, false, small or auto"),
                dict: (_mapping, "a mapping (MPI-IO hints are given with --hint KEY=VALUE)")}


def convert_option(name, value, kind):
    """``value`` of reader option ``name`` as its type ``kind`` wants it: text (from the
    command line) is converted, a bad one is one line naming the option and the value;
    other values are taken as they are. A tuple ``kind`` lists the values allowed."""
    if isinstance(kind, tuple):
        if value not in kind:
            raise HpcioError(f"reader option {name}={value!r} is not one of "
                             f"{', '.join(map(str, kind))}", everywhere=True)
        return value
    if not isinstance(value, str) or kind not in OPTION_TYPES:
        return value
    conv, what = OPTION_TYPES[kind]
    try:
        return conv(value.strip())
    except ValueError:
        raise HpcioError(f"reader option {name}={value!r} is not {what}", everywhere=True)


class BufferPool:
    """Page-aligned buffers that outlive the readers using them, handed out again by size.

    A reader is re-made every cold epoch and a ring buffer grows with its requests; with
    fresh buffers each time every page is faulted in and zeroed again (a coordinated
    reader re-made per epoch took ~54k minor faults per epoch and rank for 110 MB read,
    half its CPU). Buffers come back on :meth:`put` and go to the smallest ask they fit;
    at most ``keep`` are kept (the largest), so the pool stays the size of one or two
    readers' rings. Thread-safe: an I/O thread takes while the main thread returns."""

    def __init__(self, keep=16):
        self.keep = keep
        self._free = []
        self._lock = threading.Lock()

    def get(self, nbytes):
        with self._lock:
            fit = [k for k, b in enumerate(self._free) if len(b) >= nbytes]
            if fit:
                return self._free.pop(min(fit, key=lambda k: len(self._free[k])))
        return aligned_empty(nbytes)

    def put(self, buf):
        if buf is None:
            return
        with self._lock:
            self._free.append(buf)
            if len(self._free) > self.keep:
                del self._free[min(range(len(self._free)), key=lambda k: len(self._free[k]))]

    def clear(self):
        with self._lock:
            self._free = []


POOL = BufferPool()


class BufferRing:
    """``slots`` page-aligned buffers used in turn and grown on demand (by ``slack``),
    taken from and given back to :data:`POOL`: the data of a batch in slot ``k`` stays
    valid until slot ``k`` is taken again. A buffer a slot outgrows is freed, not
    pooled: the ring asks for more from then on, and pooled it stayed resident to the
    end (with batches of varying size, up to the pool's ``keep`` outgrown buffers per
    rank, a batch's bytes each)."""

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
            self.bufs[k] = buf = None  # freed once the batches viewing it are gone
            want = max(int(nbytes * self.slack), self.least)
            buf = self.bufs[k] = POOL.get(want)
        return buf

    def clear(self):
        """Give every buffer back to the pool (the ring's data is no longer used)."""
        for b in self.bufs:
            POOL.put(b)
        self.bufs = [None] * len(self.bufs)


class Reader:
    """Base class. A reader is made once per run on every rank (collectively when it uses
    MPI) and then executes plans: ``for batch in reader.epoch(plan): ...``.

    Subclasses set ``name`` and implement :meth:`batches`; :meth:`epoch` counts and checks
    what they deliver (``verify``, one of :data:`VERIFY`). :meth:`close` frees resources
    (collective for readers that opened MPI files).
    """

    name = "?"
    # True for a reader that memory-maps the dataset: a cold epoch must re-make it after
    # evicting, since pages a live mapping holds stay cached
    maps_files = False
    # True for a reader that checks the CRCs of what it reads itself, where the bytes were
    # just read (the coordinated reader's I/O thread, per request; the naive reader, as it
    # assembles each batch), so epoch() need not
    verifies_reads = False
    # a yielded batch's data stays valid while the consumer asks for this many more
    # batches: a consumer that holds fewer needs no copy of its own
    lease = 0

    def __init__(self, dataset: "Dataset", comm=None, verify: VERIFY = "records",
                 **options):
        self.ds = dataset
        self.comm = comm
        self.options = options
        self.stats = ReaderStats()
        if verify not in VERIFY:
            raise HpcioError(f"verify={verify!r} is not one of {', '.join(VERIFY)}",
                             everywhere=True)
        if verify == "records" and dataset.index.crc is None:
            verify = "size"  # an index made before CRCs were recorded: see NO_CRC
        self.verify = verify
        idx = dataset.index
        # every record of one length: batches are checked with one table lookup per CRC
        self._same_length = verify == "records" and bool(len(idx)) and \
            idx.length.min() == idx.length.max()
        self.stats.extra["verify"] = verify
        node = node_comm(comm) if comm is not None and comm.Get_size() > 1 else None
        first = node is None or node.Get_rank() == 0
        if node is not None:
            node.Free()
        self._cache_here = first and len(dataset.index.files) <= MAX_CACHE_FILES
        self._cache0 = None
        self.stats.extra["cache_measured"] = len(dataset.index.files) <= MAX_CACHE_FILES

    @staticmethod
    def check(dataset: "Dataset", **options) -> None:
        """Refuse options that cannot read ``dataset`` with one line on every rank
        (:class:`HpcioError`), before any work: cheap, no MPI. A reader that can refuse
        overrides it and calls it on construction too."""

    def batches(self, plan: "Plan") -> Iterator[Batch]:
        """This rank's batches of ``plan``, in plan order (what subclasses implement)."""
        raise NotImplementedError

    def epoch(self, plan: "Plan") -> Iterator[Batch]:
        """This rank's batches of ``plan``, each counted in ``stats`` (``batches``,
        ``records``, ``bytes``) as it is handed over and every record checked against its
        CRC32C before (``verify=records``): a record that differs ends the run with one
        line naming its file, record and offset."""
        inner = self.batches(plan)
        st = self.stats
        check = self.verify == "records" and not self.verifies_reads
        try:
            for b in inner:
                st.bytes += b.nbytes
                st.records += len(b)
                st.batches += 1
                if check:
                    st.wait_s += self.check_crcs(b.data, b.offsets, b.ids)
                yield b
        finally:
            inner.close()

    def check_crcs(self, data, offsets, ids, got=None):
        """The records of ``data`` at ``offsets`` (records ``ids``) against their CRC32Cs in
        the index (:func:`batch_ok`), or their CRCs ``got`` where the reader hashed them
        as it read them; a record that differs ends the run with one line naming its file,
        record and offset. Returns the seconds it took, also added to ``stats.verify_s``."""
        t0 = time.perf_counter()
        want = self.ds.index.crc[ids]
        if not (np.array_equal(got, want) if got is not None else
                batch_ok(data, offsets, want, self._same_length)):
            self._mismatch(data, offsets, ids, want)
        dt = time.perf_counter() - t0
        self.stats.verify_s += dt
        return dt

    def count_faults(self, f0):
        """Add the process's page faults since ``f0`` (a :func:`faults`) to
        ``stats.minflt`` and ``stats.majflt``: a reader's :meth:`batches` takes ``f0`` as
        its epoch starts and calls this as it ends."""
        minor, major = faults_since(f0)
        self.stats.minflt += minor
        self.stats.majflt += major

    def _mismatch(self, data, offsets, ids, want):
        k = int(mismatch(data, offsets, want)[0])
        i, idx = int(ids[k]), self.ds.index
        got = int(record_crcs(data, offsets[k:k + 2])[0])
        raise HpcioError(f"{self.ds.path(idx.file[i])}: record {i} at byte "
                         f"{int(idx.offset[i])} ({int(idx.length[i])} bytes) is not the record "
                         f"indexed (CRC32C {got:08x}, the index says {int(want[k]):08x}): the "
                         f"data changed since it was indexed")

    def mark_cache(self, end: bool = False) -> None:
        """The dataset's bytes in the page cache now (mincore), on the first rank of each
        node: at an epoch's ``end`` the gain since its start is added to
        ``stats.cache_gained_bytes``. The trainer calls it around every epoch."""
        if not self._cache_here:
            return
        now = resident_bytes(self.ds.paths)
        if end and self._cache0 is not None:
            self.stats.cache_gained_bytes += now - self._cache0
        self._cache0 = None if end else now

    def preload(self, plan: "Plan") -> None:
        """``plan`` is the epoch after the next one: a reader that can starts its first
        reads early (the coordinated reader); the others ignore it."""

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


READERS = {}

#: request patterns the simulation (:mod:`hpcio.simulate`) replays, ``(reader, access) ->
#: (kind, fn)``: ``demand`` patterns ``fn(w, platform, params, ids, cache, state)`` give one
#: step's requests as arrays ``(servers, bytes)``, asked by the rank itself in order; ``prefetch``
#: patterns ``fn(w, platform, params, ids_by_step)`` plan a run's requests for an I/O actor
#: beside the rank, ``[(last step covered, [(server, bytes), ...]), ...]``
PATTERNS = {}


def register(cls):
    """Class decorator: make a reader selectable by ``--reader <cls.name>``."""
    READERS[cls.name] = cls
    return cls


def pattern(reader, kind, access=None):
    """Decorator: ``fn`` is how reader ``reader`` (with ``access``, where it has one) requests
    its records, for the simulation to replay (:data:`PATTERNS`)."""
    def put(fn):
        PATTERNS[(reader, access)] = (kind, fn)
        return fn
    return put
