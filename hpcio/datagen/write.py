"""Writing datasets: the output directory (what hpcio may replace in it), shards written in
parallel, the manifest and record index.

Generation is parallel: under ``mpiexec -n P`` shard ``k`` is written by rank ``k % P``;
a record's pixels and label depend only on (seed, record id), so any number of ranks or
shards gives the same records. Each rank returns its shards' index arrays to rank 0 once, at
the end (one gather), and rank 0 writes the manifest and the record index.
"""

import fcntl
import json
import os
import shutil
import sys
import tempfile

import numpy as np

from .. import __version__
from ..data import pictures
from ..data.checksum import range_crcs
from ..data.dataset import INDEX, KIND, MANIFEST, Dataset, RecordIndex, is_dataset, \
    open_dataset, record_crcs_of
from ..data.presets import get_preset
from ..errors import HpcioError, lookup
from ..formats import FORMATS, get_format, open_native
from ..formats.base import Block, Spec, record_ranges, write_error
from ..fsutil import atomic_json, free_bytes
from ..measure import probes
from ..mpiutil import on_root, raise_everywhere
from ..progress import Progress

__all__ = ["generate", "write_dataset", "check_dtype", "dtypes_of", "Synthetic",
           "prepare_output", "owned_files", "remove_owned", "block_records"]

#: the folders of a DLIO data folder that hpcio.datagen.dlio makes
DLIO_SPLITS = ("train", "valid")
BLOCK_BYTES = 16 << 20  # raw pixels rendered per block: bounded memory, numpy-sized work


def block_records(record_bytes):
    """Records per block: ~16 MB of raw pixels, at most 1024 records."""
    return int(max(1, min(1024, BLOCK_BYTES // max(int(record_bytes), 1))))


class Synthetic:
    """Records of a preset: drawn pictures and labels from (seed, record id)."""

    def __init__(self, preset, seed=0, records=None, shape=None, style=None):
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.style = style or self.preset.style
        self.seed = int(seed)
        self.records = self.preset.records if records is None else int(records)
        self.shape = tuple(self.preset.shape if shape is None else shape)
        self.classes = self.preset.classes

    def block(self, lo, hi, encoding, quality):
        px, lab = pictures.render(self.style, self.seed, np.arange(lo, hi),
                                  self.shape, self.classes)
        data, lengths = pictures.encode(px, encoding, quality)
        return Block(lo, hi, lab, data, lengths)


# ---- output directory -------------------------------------------------------------------

def owned_files(root):
    """Paths (relative) that the hpcio dataset in ``root`` wrote and may replace: always its
    manifest, index and side files; its data too unless it indexed data made elsewhere."""
    try:
        with open(os.path.join(root, MANIFEST)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return [], []
    if not isinstance(m, dict) or m.get("kind") != KIND:
        return [], []
    own = [MANIFEST, m.get("index", INDEX)] + list(m.get("side_files", []))
    data, dirs = [], []
    fmt = FORMATS.get(m.get("format"))
    if m.get("source") in ("generate", "import"):
        try:
            idx = RecordIndex.load(os.path.join(root, m.get("index", INDEX)))
            data = [str(p) for p in idx.files]
        except HpcioError:
            data = []
        dlio = m.get("dlio")  # DLIO's folders, made by hpcio.datagen.dlio
        if isinstance(dlio, dict):
            dirs += [d for d in dlio.get("folders", []) if d in DLIO_SPLITS]
        for s in m.get("shards", []):
            p = s.get("path", "")
            if not p.startswith("shard-"):
                continue
            dirs.append(p)
            if fmt is not None:  # the files its library keeps in a shard folder of hpcio's
                data += [f"{p}/{f}" for f in fmt.owned(os.path.join(root, p))]
    return own + data, dirs


def remove_owned(root, files, dirs):
    """Remove ``files`` (relative to ``root``) and then the folders in ``dirs`` that are
    left empty; anything hpcio did not write stays."""
    for rel in files:
        p = os.path.join(root, rel)
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise write_error(p, e)
    # empty folders only, deepest first: anything hpcio did not write stays
    for top in dirs:
        full = os.path.join(root, top)
        if not os.path.isdir(full):
            continue
        for d, _, _ in sorted(os.walk(full, topdown=False), key=lambda t: -len(t[0])):
            try:
                os.rmdir(d)
            except OSError:
                pass


#: written into the output directory before the first shard and removed once the manifest
#: is written: it names the paths a dataset being written creates, so the leftovers of a
#: run that failed (disk full, a crash) are known to be hpcio's and ``--force`` replaces them
MARKER = ".hpcio-writing"


def _leftovers(out):
    """The paths named by an unfinished run's marker in ``out`` ([] without a marker)."""
    try:
        with open(os.path.join(out, MARKER)) as f:
            targets = json.load(f)["targets"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [t for t in targets if isinstance(t, str) and (
            t.lstrip(".").startswith("shard-") or t in DLIO_SPLITS)
            and "/" not in t.rstrip("/") and ".." not in t]


def _remove_leftovers(out):
    """Remove what an unfinished hpcio run created in ``out`` (its marker says what: paths
    that did not exist when it started), then the marker."""
    for rel in _leftovers(out) + [INDEX, MANIFEST]:
        p = os.path.join(out, rel)
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)
        except OSError as e:
            raise write_error(p, e)
    os.unlink(os.path.join(out, MARKER))


def lock_output(out):
    """Make ``out`` and take an exclusive lock on it (``flock`` on the directory: nothing
    is left behind, and the kernel drops it when the process dies). A second writer into
    the same directory is refused in one line instead of both writing a broken dataset.
    Returns the descriptor to close, or None where the file system has no flock."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise HpcioError(f"{out}: exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
        fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise write_error(out, e)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise HpcioError(f"{out}: another hpcio.datagen is writing into it (its lock is "
                         f"held); wait for it or choose another output directory")
    except OSError:  # no flock on this file system (some NFS mounts): unlocked, as before
        pass
    return fd


#: records drawn to estimate the bytes of a dataset in an encoding that compresses
SPACE_SAMPLE = 32


def space_needed(source, spec, quality):
    """The bytes a dataset needs at least: its records' bytes (a sample's mean for
    encodings that compress), which every format stores at least once. An underestimate,
    so a dataset that fits is never refused."""
    n = min(spec.records, SPACE_SAMPLE)
    if spec.encoding == "raw":
        per = float(np.prod(spec.shape))
    else:
        per = float(np.sum(source.block(0, n, spec.encoding, quality).lengths)) / n
    return int(per * np.dtype(spec.dtype).itemsize * spec.records)


def _bytes_of(root, rels):
    """Bytes of the files (and folders' files) ``rels`` under ``root`` that exist."""
    total = 0
    for rel in rels:
        p = os.path.join(root, rel)
        walk = os.walk(p) if os.path.isdir(p) and not os.path.islink(p) else \
            [(os.path.dirname(p), [], [os.path.basename(p)])]
        for d, _, names in walk:
            for name in names:
                try:
                    total += os.lstat(os.path.join(d, name)).st_size
                except OSError:
                    pass
    return total


def check_space(out, records, need, freed=0):
    """Refuse, before anything is written or removed, a dataset of ``need`` bytes that
    cannot fit in the free space of ``out``'s file system plus the ``freed`` bytes of
    hpcio's files it replaces: at once, instead of after hours of writing."""
    free = free_bytes(out)
    if need is not None and free is not None and need > free + freed:
        raise HpcioError(f"{out}: no space for {records:,} records: they need at least "
                         f"{need:,} bytes, {free + freed:,} are free there (disk or quota)")


def prepare_output(out, targets, force=False, need=None, records=0):
    """Make ``out`` ready for a new dataset whose files are ``targets`` (relative), and
    mark it as being written (:data:`MARKER`).

    An empty or new directory is used as is. One holding an hpcio dataset, or the
    leftovers of an hpcio run that did not finish, or anything else, is refused unless
    ``force``; with ``force`` only files hpcio wrote are removed (listed by the old
    dataset's manifest and index, or by the unfinished run's marker), and a target that
    exists and was not written by hpcio is never overwritten. ``need``: the bytes the
    new dataset needs at least (:func:`check_space`, before anything is removed)."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise HpcioError(f"{out}: exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".hpcio-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise write_error(out, e)
    entries = os.listdir(out)
    if MARKER in entries:
        if not force:
            raise HpcioError(f"{out}: holds the leftovers of an hpcio run that did not "
                             f"finish (pass --force to replace them)")
        check_space(out, records, need, _bytes_of(out, _leftovers(out) + [INDEX, MANIFEST]))
        _remove_leftovers(out)
        entries = os.listdir(out)
        need = None  # checked
    if not entries:
        check_space(out, records, need)
        _mark(out, targets)
        return
    if is_dataset(out):
        if not force:
            raise HpcioError(f"{out}: already holds an hpcio dataset (pass --force to "
                             f"replace it)")
        _check_unused(out)
        files, dirs = owned_files(out)
        check_space(out, records, need, _bytes_of(out, files))
        remove_owned(out, files, dirs)
    elif not force:
        raise HpcioError(f"{out}: directory exists and is not empty, and is not an hpcio "
                         f"dataset (pass --force to write into it; only hpcio's own files "
                         f"are ever replaced)")
    for rel in list(targets) + [MANIFEST, INDEX]:
        p = os.path.join(out, rel)
        if os.path.lexists(p):
            raise HpcioError(f"{p}: exists and was not written by hpcio; move it away or "
                             f"choose another output directory")
    if not is_dataset(out):
        check_space(out, records, need)
    _mark(out, targets)


def _check_unused(out):
    """Refuse to replace a dataset whose shards another process holds open (a format's
    ``in_use(path)`` says which: LevelDB's lock)."""
    try:
        with open(os.path.join(out, MANIFEST)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return
    fmt = FORMATS.get(m.get("format")) if isinstance(m, dict) else None
    for s in m.get("shards", []) if fmt is not None and m.get("source") != "index" else []:
        why = fmt.in_use(os.path.join(out, s.get("path", ""))) if isinstance(s, dict) \
            else None
        if why:
            raise HpcioError(why)


def _mark(out, targets):
    try:
        atomic_json(os.path.join(out, MARKER), {"targets": list(targets)})
    except OSError as e:
        raise write_error(out, e)


# ---- progress -------------------------------------------------------------------------------

class _Progress:
    """Progress on rank 0 over all ranks' records (:class:`hpcio.progress.Progress`;
    ``mode`` True is a bar, False none): other ranks send a small count per block
    (non-blocking) that rank 0 folds in whenever it finishes a block of its own."""

    TAG = 0x4847

    def __init__(self, comm, total, mode, desc):
        self.comm = comm
        self.size = comm.Get_size() if comm is not None else 1
        self.rank = comm.Get_rank() if comm is not None else 0
        mode = {True: "bar", False: "off", None: "off"}.get(mode, mode)
        self.on = mode != "off"
        self.reqs, self.done, self.bar = [], 0, None
        if self.on and self.rank == 0:
            self.bar = Progress(total, "rec", desc, file=sys.stderr, mode=mode,
                                smoothing=0.05)

    def add(self, n):
        if not self.on:
            return
        if self.rank == 0:
            self.bar.update(n)
            self._drain(block=False)
        else:
            self.reqs.append(self.comm.isend(int(n), dest=0, tag=self.TAG))

    def _drain(self, block):
        from mpi4py import MPI  # mpi4py: importing it starts MPI
        while self.size > 1 and self.done < self.size - 1:
            if not block and not self.comm.iprobe(source=MPI.ANY_SOURCE, tag=self.TAG):
                return
            n = self.comm.recv(source=MPI.ANY_SOURCE, tag=self.TAG)
            if n < 0:
                self.done += 1
            else:
                self.bar.update(n)

    def finish(self):
        """Every rank, always (also after an error): no message is left unmatched."""
        if not self.on:
            return
        if self.rank == 0:
            self._drain(block=True)
            self.bar.close()
        else:
            from mpi4py import MPI  # mpi4py: importing it starts MPI
            self.reqs.append(self.comm.isend(-1, dest=0, tag=self.TAG))
            MPI.Request.waitall(self.reqs)


# ---- writing ----------------------------------------------------------------------------------

def _write_shards(out, source, spec, fmt, mine, ranges, progress, quality):
    """Write this rank's shards; returns their ShardResults."""
    results = []
    per = block_records(int(np.prod(spec.shape)))
    for k in mine:
        lo, hi = ranges[k]
        w = None
        path = os.path.join(out, fmt.targets(k, spec)[0])
        try:
            w = fmt.Writer(out, k, lo, hi, spec)
            for a in range(lo, hi, per):
                b = min(hi, a + per)
                w.write(source.block(a, b, spec.encoding, quality))
                progress.add(b - a)
            r = w.close()
            if r.crc is None and not r.extra.get("compressed_records"):
                # the shard was just written by this rank: its pages are still cached here
                r.crc = range_crcs([os.path.join(out, f) for f in r.files], r.file,
                                   r.offset, r.length)
            results.append(r)
        except HpcioError:
            if w is not None:
                w.abort()
            raise
        except Exception as e:  # OSError, lmdb.Error, h5py's and plyvel's errors: one line
            if w is not None:
                w.abort()
            if not isinstance(e, (OSError, RuntimeError)) and \
                    type(e).__module__.split(".")[0] not in ("lmdb", "h5py", "plyvel"):
                raise
            raise write_error(path, e)
    return results


def _assemble(results, spec):
    """The record index from all shards' results, in record order."""
    results = sorted(results, key=lambda r: r.records[0])
    files, file_bytes, fileno = [], [], []
    for r in results:
        fileno.append(r.file.astype(np.int64) + len(files))
        files.extend(r.files)
        file_bytes.extend(r.file_bytes)
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    crc = cat([r.crc for r in results], np.uint32) \
        if all(r.crc is not None for r in results) else None
    index = RecordIndex(cat(fileno, np.int32), cat([r.offset for r in results], np.int64),
                        cat([r.length for r in results], np.int64),
                        cat([r.label for r in results], np.int64),
                        np.asarray(files, dtype=str), np.asarray(file_bytes, np.int64), crc)
    if len(index) != spec.records:
        raise HpcioError(f"shards hold {len(index)} records, expected {spec.records}")
    return results, index


def dtypes_of(fmt):
    """The element types a format stores raw records as (``FormatInfo.dtypes``)."""
    return tuple(fmt.info.dtypes)


def check_dtype(format, dtype):
    """A one-line refusal of a ``dtype`` the format does not store, naming those that do."""
    have = dtypes_of(get_format(format))
    if dtype in have:
        return
    others = [n for n, m in FORMATS.items() if dtype in dtypes_of(m)]
    hint = f" ({dtype} records: --format {' or '.join(others)})" if others else ""
    raise HpcioError(f"--dtype {dtype}: the {format} format stores {' or '.join(have)} "
                     f"records only{hint}", everywhere=True)


def write_dataset(out, source, format="packed", encoding="raw", shards=1, force=False,
                  comm=None, progress=False, quality=90, manifest=None, desc=None,
                  dtype="uint8", **format_options):
    """Write the records of ``source`` (an object with ``records``, ``shape``,
    ``classes`` and ``block(lo, hi, encoding, quality) -> Block``) as a dataset in
    ``out``; collective over ``comm``. ``dtype``: the element type raw records are
    stored as (the format converts the uint8 pixels: hdf5's ``float32`` is Caffe's
    layout). Returns the :class:`~hpcio.dataset.Dataset` on every rank."""
    fmt = get_format(format)
    lookup(pictures.ENCODINGS, encoding, "encoding")
    dtype = dtype or "uint8"
    check_dtype(format, dtype)
    records, shards = int(source.records), int(shards)
    if records < 1:
        raise HpcioError(f"--records must be at least 1 (got {records})", everywhere=True)
    if shards < 1 or shards > records:
        raise HpcioError(f"--shards must be between 1 and the record count {records} "
                         f"(got {shards})", everywhere=True)
    out = os.path.abspath(out)
    spec = Spec(format, encoding, tuple(source.shape), int(source.classes), records, shards,
                {k: v for k, v in format_options.items() if v is not None}, dtype)
    keys = fmt.manifest_keys(spec)  # validates options on every rank
    targets = [t for k in range(shards) for t in fmt.targets(k, spec)]
    lock = []  # rank 0 holds the output directory's lock until the manifest is written

    def claim():
        need = space_needed(source, spec, quality)
        if not os.path.lexists(out):
            check_space(out, records, need)  # before anything is made
        lock.append(lock_output(out))
        prepare_output(out, targets, force, need, records)

    try:
        on_root(comm, claim)
        return _write(out, source, spec, fmt, comm, progress, quality, manifest, desc,
                      keys)
    finally:
        for fd in lock:
            os.close(fd)


def _write(out, source, spec, fmt, comm, progress, quality, manifest, desc, keys):
    """:func:`write_dataset` once rank 0 holds the output directory."""
    format, encoding, dtype = spec.format, spec.encoding, spec.dtype
    records, shards = spec.records, spec.shards
    if comm is not None and comm.Get_size() > 1:
        comm.Barrier()
    rank = comm.Get_rank() if comm is not None else 0
    size = comm.Get_size() if comm is not None else 1
    ranges = record_ranges(records, shards)
    bar = _Progress(comm, records, progress, desc or f"{format}/{encoding}")
    err, results = None, []
    try:
        results = _write_shards(out, source, spec, fmt, range(rank, shards, size), ranges,
                                bar, quality)
    except HpcioError as e:
        err = f"{e}" if size == 1 else f"{e} (rank {rank})"
    finally:
        bar.finish()
    if size > 1:
        gathered = comm.gather((err, results), root=0)
        if rank == 0:
            errs = [e for e, _ in gathered if e]
            err = errs[0] if errs else None
            results = [r for _, rs in gathered for r in rs]
    else:
        raise_everywhere(None, err)

    def finish():
        if err:
            raise HpcioError(err)
        res, index = _assemble(results, spec)
        m = {"kind": KIND, "format": format, "encoding": encoding,
             "shape": list(spec.shape), "dtype": dtype, "classes": spec.classes,
             "records": records}
        m.update(manifest or {})
        m.update({"generator": f"hpcio {__version__}", "index": INDEX,
                  "shards": [r.entry() for r in res]})
        if encoding == "jpeg":
            m["quality"] = int(quality)
        m.update(keys)
        ds = Dataset(out, m, index)
        if index.crc is None:  # records in compressed blocks: through the library
            index.crc = record_crcs_of(ds, open_native)
        ds.save()
        os.unlink(os.path.join(out, MARKER))  # the dataset is complete

    def finish_or_error():
        try:
            finish()
        except OSError as e:
            raise write_error(out, e)

    on_root(comm, finish_or_error)
    return open_dataset(out, comm, check=False)


def _fits_in_memory(shape):
    """Refuse a picture size whose drawing (a few float copies of one picture) cannot fit in
    this node's memory, before allocating it: a MemoryError has no useful line."""
    need = int(np.prod(shape)) * 16
    avail = probes.mem_available()
    if avail is not None and need > avail:
        raise HpcioError(f"shape {'x'.join(map(str, shape))}: drawing one picture needs about "
                         f"{need / 2**30:.1f} GiB, more than the {avail / 2**30:.1f} GiB of "
                         f"memory available here", everywhere=True)


def generate(out, preset="mnist", records=None, format="packed", encoding="raw", shards=1,
             seed=0, force=False, comm=None, progress=False, shape=None, workload=None,
             **format_options):
    """Write a synthetic ``preset`` dataset (``records`` of them, default the preset's
    count) to ``out``. Collective over ``comm`` (shard ``k`` on rank ``k % size``);
    returns the :class:`~hpcio.dataset.Dataset` on every rank. Format options: hdf5
    ``chunk_records``; ``dtype`` (hdf5 ``float32``: Caffe's HDF5 layout); ``quality``
    sets the JPEG quality (default the preset's).
    ``shape`` (H, W, C) draws the pictures at another size than the preset's, e.g. raw
    records already at a model's input for offline-preprocessing runs."""
    p = get_preset(preset)
    if records is not None and int(records) < 1:
        raise HpcioError(f"--records must be at least 1 (got {records})", everywhere=True)
    if shape is not None:
        shape = tuple(int(v) for v in shape)
        if len(shape) != 3 or min(shape) < 1 or shape[2] not in (1, 3):
            raise HpcioError(f"shape must be H x W x C with C 1 or 3 (got {shape})",
                             everywhere=True)
        _fits_in_memory(shape)
    # a workload's raw records are random bytes, as DLIO's (pictures would compress)
    noise = bool(workload) and encoding == "raw"
    src = Synthetic(p, seed, records, shape, style="noise" if noise else None)
    quality = format_options.pop("quality", None) or p.quality
    return write_dataset(out, src, format, encoding, shards, force, comm, progress,
                         quality, manifest={"preset": p.name, "seed": int(seed),
                                            "source": "generate",
                                            **({"workload": workload} if workload else {}),
                                            **({"content": "random bytes"} if noise
                                               else {})},
                         desc=f"{p.name} {format}/{encoding}", **format_options)
