"""Darshan logs read back: the one reader of them in hpcio. :func:`read_log` reads a log
once into arrays: the job, the file names, every module's counters per (rank, file) and
every DXT segment; :func:`log_summary` (``python -m hpcio.measure.darshan summary``) and
:func:`log_is_partial` say what a log holds in a few numbers, from it. Running Darshan (its
library, config and the re-exec that preloads it) is :mod:`hpcio.measure.darshan`'s.

The header, job record, name table and DXT traces are read straight from the log's regions
(Darshan 3's layout: ``darshan-log-format.h``, ``darshan-dxt-log-format.h``): each region is
one or more zlib (or bzip2) streams, back to back; a DXT record is a fixed header followed
by its segments, so the segments of a (rank, file) are one ``np.frombuffer``. That keeps
the traces out of PyDarshan, whose DXT reader builds a dict per segment. The counters,
whose names change with each module's version, come from PyDarshan (the ``[analysis]``
extra) or, without it, from ``darshan-parser`` (:func:`find_parser`): both register in
``COUNTER_READERS``.

DXT times are seconds since the rank's own Darshan start; the log keeps only the smallest
of the ranks' starts (``start``), each read on its node's clock. ``tables.dxt_shifts``
restores each rank's own start from the stamps hpcio takes at ``MPI_Init``.
"""

import bz2
import contextlib
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from .schema import LIMITS, MAX_RANKS, read_bytes
from ..errors import HpcioError, describe

__all__ = ["DarshanLog", "Records", "read_log", "log_summary", "log_is_partial",
           "find_parser", "inflate", "COUNTER_MODULES", "COUNTER_READERS", "counter_reader",
           "MODULE_IDS", "MAGIC", "HEADER_BYTES", "DXT_RECORD_BYTES", "DXT_DTYPE"]

# Darshan 3's module ids (darshan-log-format.h, DARSHANMODULE_IDS): bit i of partial_flag.
MODULE_IDS = ("NULL", "POSIX", "MPI-IO", "H5F", "H5D", "PNETCDF_FILE", "PNETCDF_VAR", "BG/Q",
              "LUSTRE", "STDIO", "DXT_POSIX", "DXT_MPIIO", "MDHIM", "APXC", "APMPI", "HEATMAP",
              "DFS", "DAOS")
MAGIC = 6567223
#: the header layouts hpcio checks, by format (darshan-log-format.h of each release):
#: (partial flag's struct code and offset, offset of the name table's and modules' maps,
#: modules). Darshan 3.0.0 to 3.4.0 wrote 3.00 to 3.21 (16 modules), 3.4.1 on 3.41 (64)
LAYOUTS = {"3.41": ("Q", 24, 32, 64),
           **dict.fromkeys(("3.00", "3.10", "3.20", "3.21"), ("I", 20, 24, 16))}
#: the formats whose regions hpcio reads itself; a log of another goes through PyDarshan
PARSED = ("3.41",)
COUNTER_MODULES = ("POSIX", "MPI-IO", "STDIO", "H5D")
_DXT = {"DXT_POSIX": "POSIX", "DXT_MPIIO": "MPI-IO"}
_MAX_MODS = 64
HEADER_BYTES = 48 + 16 * _MAX_MODS + 4 * _MAX_MODS  # darshan_header, 1328 bytes
_SEGMENT = [("offset", "i8"), ("length", "i8"), ("start", "f8"), ("end", "f8")]
DXT_RECORD_BYTES = 104  # base record (id, rank), shared_record, hostname[64], write/read counts
# one row per traced operation; module: index into _DXT's values
DXT_DTYPE = np.dtype([("module", "u1"), ("rank", "i4"), ("id", "u8"), ("write", "?"),
                      ("offset", "i8"), ("length", "i8"), ("start", "f8"), ("end", "f8")])


@dataclass
class Records:
    """One module's records: row i is file ``id[i]`` on ``rank[i]`` (-1: shared by all
    ranks), with ``values[i, j]`` for counter ``names[j]``."""

    rank: np.ndarray
    id: np.ndarray
    names: List[str]
    values: np.ndarray

    def __len__(self):
        return len(self.rank)

    def get(self, name, unmonitored=0.0):
        """The counter's column (float64; zeros when this module version lacks it), with
        Darshan's -1 ("not monitored") as ``unmonitored``."""
        try:
            col = self.values[:, self.names.index(name)]
        except ValueError:
            return np.zeros(len(self.rank))
        return np.where(col < 0, unmonitored, col)

    def select(self, mask):
        return Records(self.rank[mask], self.id[mask], self.names, self.values[mask])


@dataclass
class DarshanLog:
    path: str
    log_version: str
    lib_version: Optional[str]
    nprocs: int
    jobid: int
    start: float          # unix time of the earliest rank's Darshan start
    end: float
    exe: str
    metadata: Dict[str, str]
    modules: List[str]    # modules with data
    partial: List[str]    # modules that ran out of records or memory
    names: Dict[int, str]
    dxt: np.ndarray       # DXT_DTYPE rows
    counters: Dict[str, Records] = field(default_factory=dict)
    counter_reader: Optional[str] = None  # which reader gave the counters; None: none could

    def file_ids(self, prefix):
        """Ids of the files whose path is ``prefix`` or lies under it."""
        prefix = os.path.normpath(prefix)
        return np.array([i for i, n in self.names.items()
                         if n == prefix or n.startswith(prefix + "/")], dtype=np.uint64)


def inflate(blob, comp, what):
    """A region's bytes: its compressed streams (``comp``: the header's compression, a
    key of ``_INFLATERS``), back to back, decompressed (each stream's own checksum
    verified: a flipped byte fails here); ``what`` names the region in the error."""
    new = _INFLATERS[comp]
    if new is None:
        return blob
    out = []
    while blob:
        d = new()
        try:
            out.append(d.decompress(blob))
        except (zlib.error, OSError, ValueError, EOFError) as e:
            raise HpcioError(f"{what}: corrupt ({e})") from None
        if not d.eof:
            raise HpcioError(f"{what}: cut off inside a compressed stream")
        blob = d.unused_data
    return b"".join(out)


# darshan_comp_type: ZLIB, BZIP2, NONE
_INFLATERS = {0: zlib.decompressobj, 1: bz2.BZ2Decompressor, 2: None}


def _names(raw, order, what):
    """The name table: (uint64 id, NUL-terminated path) back to back."""
    out, pos = {}, 0
    while pos + 8 < len(raw):
        rid = struct.unpack_from(order + "Q", raw, pos)[0]
        end = raw.find(b"\0", pos + 8)
        if end < 0:
            raise HpcioError(f"{what}: corrupt (a name without its end)")
        out[rid] = raw[pos + 8:end].decode("utf-8", "replace")
        pos = end + 1
    return out


def _dxt(raw, order, module, nprocs, what):
    """One DXT module's records: a Python step per (rank, file) record, its segments
    taken as one array."""
    seg = np.dtype(_SEGMENT).newbyteorder(order)
    parts, pos = [], 0
    while pos + DXT_RECORD_BYTES <= len(raw):
        rid, rank = struct.unpack_from(order + "Qq", raw, pos)
        wc, rc = struct.unpack_from(order + "qq", raw, pos + 88)
        n = wc + rc
        if wc < 0 or rc < 0 or not 0 <= rank < nprocs or \
                pos + DXT_RECORD_BYTES + 32 * n > len(raw):
            raise HpcioError(f"{what}: corrupt (a record of rank {rank} with {wc} writes "
                             f"and {rc} reads at byte {pos:,} of {len(raw):,})")
        segs = np.frombuffer(raw, seg, n, pos + DXT_RECORD_BYTES)
        part = np.empty(n, DXT_DTYPE)
        for f, _ in _SEGMENT:
            part[f] = segs[f]
        part["module"], part["rank"], part["id"] = module, rank, rid
        part["write"] = np.arange(n) < wc  # writes first, then reads
        parts.append(part)
        pos += DXT_RECORD_BYTES + 32 * n
    if pos != len(raw):
        raise HpcioError(f"{what}: corrupt ({len(raw) - pos} bytes after its last record)")
    return parts


def _start(data, path):
    """(byte order, version, compression): what every Darshan 3 header begins with (the
    version string, the magic number, the compression), checked."""
    if not data.startswith(b"3."):
        raise HpcioError(f"{path}: not a Darshan 3 log")
    if len(data) < 17:
        raise HpcioError(f"{path}: truncated inside its header ({len(data):,} bytes)")
    order = next((o for o in "<>" if struct.unpack_from(o + "q", data, 8)[0] == MAGIC),
                 None)
    if order is None:
        raise HpcioError(f"{path}: this is not a Darshan 3 log (bad magic number)")
    version = data[:8].rstrip(b"\0").decode("ascii", "replace")
    comp = data[16]
    if comp not in _INFLATERS:
        raise HpcioError(f"{path}: unknown compression {comp}")
    return order, version, comp


def _header_bytes(version):
    """The size of a header of ``LAYOUTS[version]``: maps, then each module's version."""
    _, _, maps_at, mods = LAYOUTS[version]
    return maps_at + 16 * (mods + 1) + 4 * mods


def _header(data, path):
    """(byte order, version, compression, partial flags, regions): the header (a layout of
    ``LAYOUTS``, else only what :func:`_start` checks: regions None) checked; regions:
    name -> (offset, length) of the name table and each module with data, each inside
    the file, after the header and apart from the others."""
    order, version, comp = _start(data, path)
    if version not in LAYOUTS:
        return order, version, comp, 0, None
    code, flag_at, maps_at, mods = LAYOUTS[version]
    size = _header_bytes(version)
    if len(data) < size:
        raise HpcioError(f"{path}: truncated inside its header ({len(data):,} of "
                         f"{size:,} bytes)")
    partial_flag = struct.unpack_from(order + code, data, flag_at)[0]
    maps = struct.unpack_from(order + f"{2 * mods + 2}Q", data, maps_at)
    regions = {"name table": maps[:2]}
    ids = MODULE_IDS if version in PARSED else ()  # the ids of earlier formats differ
    for k, (off, n) in enumerate(zip(maps[2::2], maps[3::2])):
        if n:
            regions[ids[k] if k < len(ids) else f"module {k}"] = (off, n)
    end = max(off + n for off, n in regions.values())
    if len(data) < end:
        raise HpcioError(f"{path}: truncated ({len(data):,} of {end:,} bytes)")
    at = size + 1  # the job record comes first and is never empty
    for name, (off, n) in sorted(regions.items(), key=lambda kv: kv[1]):
        if off < at:
            raise HpcioError(f"{path}: corrupt header (the {name} region at byte {off:,} "
                             f"overlaps what comes before it)")
        at = off + n
    return order, version, comp, partial_flag, regions


def read_log(path, reader=None, counters=True, parser=None, dxt=True):
    """Read the log at ``path`` once (see the module docstring). Raises HpcioError with one
    line naming the file when it is missing, not a regular file, not a Darshan 3 log,
    truncated, or corrupt: a bad header or region length, a compressed stream that fails
    its checksum, records that fail the checks of :func:`_check_counters`. ``reader``
    names a counter reader (``COUNTER_READERS``); by default the first available;
    ``parser``: that darshan-parser reads them; ``counters=False`` reads none (the header,
    names and DXT only); ``dxt=False`` leaves the DXT traces out."""
    try:
        data = read_bytes(path, LIMITS["darshan"])
    except FileNotFoundError:
        raise HpcioError(f"{path}: no such file") from None
    _, version, comp, _, regions = _header(data, path)
    if version not in PARSED:
        if regions is not None:  # every compressed stream's own checksum, first
            first = min(off for off, _ in regions.values())
            inflate(data[_header_bytes(version):first], comp, f"{path}: job record")
            for name, (off, n) in regions.items():
                inflate(data[off:off + n], comp, f"{path}: {name} region")
        log = _older(path, version, dxt)
        raw = None
    else:
        log, raw = _own(path, data, dxt)
    wanted = [m for m in COUNTER_MODULES if m in log.modules]
    if parser:
        reader = "darshan-parser"
    name = (reader or counter_reader()) if counters else None
    if wanted and name:
        with _stderr_kept() as said:
            try:
                log.counters = _parser(path, wanted, parser) if parser else \
                    COUNTER_READERS[name][1](path, wanted)
            except HpcioError:
                raise
            except Exception as e:  # a library's own check on a log that passed ours
                raise HpcioError(f"{path}: {name} cannot read its counters "
                                 f"({describe(e)})") from None
        try:
            for mod, rec in log.counters.items():
                _check_counters(rec, None if raw is None else len(raw[mod]), mod, log,
                                f"{path}: {mod} region")
        except HpcioError as e:
            raise HpcioError(f"{e}" + (f"; {name} said: {said[-1]}" if said else "")) \
                from None
        log.counter_reader = name
    return log


def _own(path, data, dxt):
    """The log read by hpcio itself (a format of ``PARSED``): (DarshanLog without
    counters, each module's region decompressed)."""
    order, version, comp, partial_flag, regions = _header(data, path)
    name_off = regions["name table"][0]
    job = inflate(data[HEADER_BYTES:name_off], comp, f"{path}: job record")
    meta_at = 56  # uid, start and end as (sec, nsec), nprocs, jobid
    if len(job) < meta_at:
        raise HpcioError(f"{path}: job record: corrupt ({len(job)} bytes)")
    _, s, sn, e, en, nprocs, jobid = struct.unpack_from(order + "7q", job, 0)
    start, stop = s + 1e-9 * sn, e + 1e-9 * en
    if not 1 <= nprocs <= MAX_RANKS:
        raise HpcioError(f"{path}: job record: corrupt ({nprocs} processes)")
    meta = job[meta_at:meta_at + 1024].split(b"\0")[0].decode("utf-8", "replace")
    metadata = dict(kv.split("=", 1) for kv in meta.splitlines() if "=" in kv)
    exe = job[meta_at + 1024:].split(b"\0")[0].decode("utf-8", "replace").split("\n")[0]
    raw = {name: inflate(data[off:off + n], comp, f"{path}: {name} region")
           for name, (off, n) in regions.items()}
    names = _names(raw.pop("name table"), order, f"{path}: name table")
    modules = list(raw)
    parts = []
    for k, mod in enumerate(_DXT):
        if dxt and mod in raw:
            parts += _dxt(raw[mod], order, k, nprocs, f"{path}: {mod} region")
    log = DarshanLog(
        path=os.path.abspath(path), log_version=version, lib_version=metadata.get("lib_ver"),
        nprocs=int(nprocs), jobid=int(jobid), start=start, end=stop, exe=exe.strip(),
        metadata=metadata, modules=modules,
        partial=[m for i, m in enumerate(MODULE_IDS) if partial_flag >> i & 1],
        names=names, dxt=np.concatenate(parts) if parts else np.empty(0, DXT_DTYPE))
    return log, raw


def _older(path, version, dxt):
    """A log of a layout hpcio does not parse itself (Darshan 3.0 to 3.4.0 wrote formats
    3.00 to 3.21, with 16 modules in the header): read through PyDarshan's
    libdarshan-util, which converts every earlier format; DarshanLog without counters."""
    if importlib.util.find_spec("darshan") is None:
        raise HpcioError(f"{path}: a Darshan log of format {version}, which hpcio reads "
                         f"through PyDarshan: install it (pip install 'hpcio[darshan]')")
    from darshan.backend import cffi_backend as be  # PyDarshan: optional, loads its C library

    with _stderr_kept() as said:
        h = be.log_open(path)
    if h["handle"] == be.ffi.NULL:
        raise HpcioError(f"{path}: a Darshan log of format {version} that PyDarshan "
                         f"cannot read either" + (f" ({said[-1]})" if said else ""))
    try:
        with _stderr_kept() as said:
            job = be.log_get_job(h)
            mods = be.log_get_modules(h)
            names = be.log_get_name_records(h)
            exe = be.log_get_exe(h)
            parts = []
            for k, mod in enumerate(_DXT):
                rec = be.log_get_dxt_record(h, mod) if dxt and mod in mods else None
                while rec is not None:
                    parts.append(_dxt_rows(rec, k))
                    rec = be.log_get_dxt_record(h, mod)
    except Exception as e:
        raise HpcioError(f"{path}: PyDarshan cannot read this Darshan {version} log "
                         f"({said[-1] if said else describe(e)})") from None
    finally:
        be.log_close(h)
    nprocs = int(job["nprocs"])
    if not 1 <= nprocs <= MAX_RANKS:
        raise HpcioError(f"{path}: job record: corrupt ({nprocs} processes)")
    meta = job["metadata"]
    return DarshanLog(
        path=os.path.abspath(path), log_version=version, lib_version=meta.get("lib_ver"),
        nprocs=nprocs, jobid=int(job["jobid"]),
        start=job["start_time_sec"] + 1e-9 * job["start_time_nsec"],
        end=job["end_time_sec"] + 1e-9 * job["end_time_nsec"],
        exe=exe.split("\n")[0].strip(), metadata=meta, modules=list(mods),
        partial=[m for m, i in mods.items() if i["partial_flag"]], names=names,
        dxt=np.concatenate(parts) if parts else np.empty(0, DXT_DTYPE))


def _dxt_rows(rec, module):
    """PyDarshan's DXT record (a dict per segment) as DXT_DTYPE rows, writes first."""
    segs = rec["write_segments"] + rec["read_segments"]
    part = np.empty(len(segs), DXT_DTYPE)
    for f, _ in _SEGMENT:
        part[f] = [s[f if f in ("offset", "length") else f + "_time"] for s in segs]
    part["module"], part["rank"], part["id"] = module, rec["rank"], rec["id"]
    part["write"] = np.arange(len(segs)) < len(rec["write_segments"])
    return part


@contextlib.contextmanager
def _stderr_kept():
    """The lines a C library prints on fd 2 meanwhile (libdarshan-util prints "Error: ..."
    and goes on), kept out of the one line the user sees: yields a list filled on exit."""
    said = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            said += [ln.strip() for ln in tmp.read(1 << 16).decode("utf-8", "replace")
                     .splitlines() if ln.strip()]


# bytes of a record beyond (id, rank) and its counters (darshan-hdf5-log-format.h:
# darshan_hdf5_dataset ends with its file's record id)
_RECORD_EXTRA = {"H5D": 8}
# counters that hold a record id (a hash), not a count: any 64-bit value
_ID_COUNTERS = ("_RENAMED_FROM",)


def _check_counters(rec, nbytes, mod, log, what):
    """A module's records against its region and the log: as many records as the region
    holds (``nbytes``), ranks of this job (-1: shared), names in the name table, counts
    and times finite and >= -1 (Darshan's "not monitored"). ``nbytes`` None: a layout
    read through PyDarshan, whose releases wrote negative counts and times (3.1.3 to
    3.1.5's POSIX_MMAPS = -4, times off a skewed clock) that PyDarshan reads as they are;
    :meth:`Records.get` takes them as unmonitored."""
    size = 16 + 8 * len(rec.names) + _RECORD_EXTRA.get(mod, 0)
    if nbytes is not None and len(rec) * size != nbytes:
        raise HpcioError(f"{what}: corrupt ({nbytes:,} bytes are not {len(rec)} records "
                         f"of {size} bytes)")
    bad = (rec.rank < -1) | (rec.rank >= log.nprocs)
    if bad.any():
        raise HpcioError(f"{what}: corrupt (a record of rank {int(rec.rank[bad][0])} in "
                         f"a job of {log.nprocs})")
    unnamed = [i for i in rec.id.tolist() if i not in log.names]
    if unnamed:
        raise HpcioError(f"{what}: corrupt (record id {unnamed[0]} is not in its name "
                         f"table)")
    counts = [j for j, n in enumerate(rec.names) if not n.endswith(_ID_COUNTERS)]
    v = rec.values[:, counts]
    bad = ~np.isfinite(v) | ((v < -1) & (nbytes is not None))
    if bad.any():
        row, col = (int(x[0]) for x in np.nonzero(bad))
        raise HpcioError(f"{what}: corrupt ({rec.names[counts[col]]} = {float(v[row, col]):g} "
                         f"in record {row})")


# --- counter readers --------------------------------------------------------------------


def _pydarshan(path, modules):
    from darshan.backend import cffi_backend as be  # PyDarshan: the [analysis] extra

    log = be.log_open(path)
    try:
        out = {}
        for mod in modules:
            names = be.counter_names(mod) + be.fcounter_names(mod)
            ranks, ids, rows = [], [], []
            rec = be.log_get_generic_record(log, mod, dtype="numpy")
            while rec is not None:
                ranks.append(rec["rank"])
                ids.append(rec["id"])
                rows.append(np.concatenate([rec["counters"], rec["fcounters"]]))
                rec = be.log_get_generic_record(log, mod, dtype="numpy")
            out[mod] = Records(np.array(ranks, np.int64), np.array(ids, np.uint64), names,
                               np.array(rows, np.float64).reshape(len(rows), len(names)))
        return out
    finally:
        be.log_close(log)


_COMMENTS = re.compile(r"^(?:#.*)?\n", re.M)


def _parser(path, modules, exe=None):
    exe = exe or find_parser()
    p = subprocess.run([exe, "--show-incomplete", path], capture_output=True, timeout=600)
    if p.returncode:
        last = (p.stderr.decode(errors="replace").strip().splitlines()
                or [f"darshan-parser exited {p.returncode}"])[-1]
        raise HpcioError(f"{path}: darshan-parser: {last}")
    # every counter line: module, rank, record id, counter, value, file, mount, fs type
    body = _COMMENTS.sub("", p.stdout.decode("utf-8", "replace")).rstrip("\n")
    cells = np.array(body.replace("\n", "\t").split("\t")) if body else np.empty(0, str)
    if len(cells) % 8:
        raise HpcioError(f"{path}: darshan-parser printed lines of an unknown layout")
    t = cells.reshape(-1, 8)
    out = {}
    for mod in modules:
        m = t[t[:, 0] == mod]
        key = np.char.add(np.char.add(m[:, 1], ":"), m[:, 2])
        keys, row = np.unique(key, return_inverse=True)
        names, col = np.unique(m[:, 3], return_inverse=True)
        values = np.zeros((len(keys), len(names)))
        values[row, col] = m[:, 4].astype(np.float64)
        first = np.unique(row, return_index=True)[1]
        out[mod] = Records(m[first, 1].astype(np.int64), m[first, 2].astype(np.uint64),
                           names.tolist(), values)
    return out


def find_parser(lib=None):
    """darshan-parser: beside ``lib``'s install (PREFIX/bin), in this checkout's .darshan
    (scripts/darshan-local.sh), or on PATH."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    places = [os.path.join(repo, ".darshan", "bin", "darshan-parser")]
    if lib:
        places.insert(0, os.path.join(os.path.dirname(os.path.dirname(
            os.path.realpath(lib))), "bin", "darshan-parser"))
    for p in places:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("darshan-parser")


# name: (available(), read(path, modules) -> {module: Records}); first available wins
COUNTER_READERS = {
    "pydarshan": (lambda: importlib.util.find_spec("darshan") is not None, _pydarshan),
    "darshan-parser": (lambda: find_parser() is not None, _parser),
}


def counter_reader():
    """The first counter reader this machine has, or None."""
    return next((n for n, (ok, _) in COUNTER_READERS.items() if ok()), None)


# --- what a log holds, in a few numbers ---------------------------------------------------

_SUMMED = {"POSIX": "POSIX_BYTES_", "MPI-IO": "MPIIO_BYTES_", "STDIO": "STDIO_BYTES_"}


def log_summary(path, parser=None):
    """What a log says: {path, modules: [those with data], partial: [those that ran out of
    records or memory], version, nprocs, records: {module: files}, bytes_read and
    bytes_written: {module: {rank: bytes}}} for the POSIX, MPI-IO and STDIO modules (rank -1
    holds files shared by all ranks when the run did not disable the shared reduction).

    From :func:`read_log` (no DXT): its counters read with PyDarshan when it is installed,
    else with ``parser`` (darshan-parser; :func:`find_parser` by default)."""
    if not os.path.isfile(path):
        raise HpcioError(f"no Darshan log at {path}")
    if parser is None and counter_reader() is None:
        read_log(path, counters=False, dxt=False)  # a file that is no log says so first
        raise HpcioError("cannot read Darshan logs: install PyDarshan (pip install "
                         "'hpcio[darshan]') or build darshan-parser (scripts/darshan-local.sh)")
    log = read_log(path, parser=parser, dxt=False)
    s = {"path": log.path, "modules": [m for m in log.modules if m in MODULE_IDS],
         "partial": log.partial, "version": log.lib_version, "nprocs": log.nprocs,
         "records": {}, "bytes_read": {m: {} for m in _SUMMED},
         "bytes_written": {m: {} for m in _SUMMED}}
    for module, prefix in _SUMMED.items():
        rec = log.counters.get(module)
        if rec is None or not len(rec):
            continue
        s["records"][module] = len(rec)
        for key, op in (("bytes_read", "READ"), ("bytes_written", "WRITTEN")):
            col = rec.values[:, rec.names.index(prefix + op)]
            ranks, at = np.unique(rec.rank, return_inverse=True)
            sums = np.zeros(len(ranks))
            np.add.at(sums, at, col)
            s[key][module] = {int(r): int(n) for r, n in zip(ranks, sums)}
    return s


def log_is_partial(path):
    """Whether a module of the log ran out of records or memory (its data is incomplete)."""
    if not os.path.isfile(path):
        raise HpcioError(f"no Darshan log at {path}")
    return bool(read_log(path, counters=False, dxt=False).partial)
