"""A Darshan log read once into arrays: the job, the file names, every module's counters
per (rank, file) and every DXT segment.

The header, job record, name table and DXT traces are read straight from the log's regions
(Darshan 3's layout: ``darshan-log-format.h``, ``darshan-dxt-log-format.h``): each region is
one or more zlib (or bzip2) streams, back to back; a DXT record is a fixed header followed
by its segments, so the segments of a (rank, file) are one ``np.frombuffer``. That keeps
the traces out of PyDarshan, whose DXT reader builds a dict per segment. The counters,
whose names change with each module's version, come from PyDarshan (the ``[analysis]``
extra) or, without it, from ``darshan-parser``: both register in ``COUNTER_READERS``.

DXT times are seconds since the rank's own Darshan start; the log keeps only the smallest
of the ranks' starts (``start``), each read on its node's clock. ``tables.dxt_shifts``
restores each rank's own start from the stamps hpcio takes at ``MPI_Init``.
"""

import bz2
import importlib.util
import os
import re
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..errors import HpcioError
from ..measure.darshan import _MAGIC, _MODULE_IDS, find_parser

__all__ = ["DarshanLog", "Records", "read_log", "COUNTER_MODULES", "COUNTER_READERS",
           "counter_reader"]

COUNTER_MODULES = ("POSIX", "MPI-IO", "STDIO", "H5D")
_DXT = {"DXT_POSIX": "POSIX", "DXT_MPIIO": "MPI-IO"}
_MAX_MODS = 64
_HEADER = 48 + 16 * _MAX_MODS + 4 * _MAX_MODS  # darshan_header, 1328 bytes
_SEGMENT = [("offset", "i8"), ("length", "i8"), ("start", "f8"), ("end", "f8")]
_DXT_RECORD = 104  # base record (id, rank), shared_record, hostname[64], write/read counts
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


def _inflate(blob, comp, what):
    """A region's bytes: its compressed streams, back to back, decompressed."""
    if comp == 2:
        return blob
    new = zlib.decompressobj if comp == 0 else bz2.BZ2Decompressor
    out = []
    while blob:
        d = new()
        try:
            out.append(d.decompress(blob))
        except (zlib.error, OSError, ValueError) as e:
            raise HpcioError(f"{what}: corrupt ({e})") from None
        if not d.eof:
            raise HpcioError(f"{what}: cut off inside a compressed stream")
        blob = d.unused_data
    return b"".join(out)


def _names(raw, order):
    """The name table: (uint64 id, NUL-terminated path) back to back."""
    out, pos = {}, 0
    while pos + 8 < len(raw):
        rid = struct.unpack_from(order + "Q", raw, pos)[0]
        end = raw.index(b"\0", pos + 8)
        out[rid] = raw[pos + 8:end].decode("utf-8", "replace")
        pos = end + 1
    return out


def _dxt(raw, order, module):
    """One DXT module's records: a Python step per (rank, file) record, its segments
    taken as one array."""
    seg = np.dtype(_SEGMENT).newbyteorder(order)
    parts, pos = [], 0
    while pos + _DXT_RECORD <= len(raw):
        rid, rank = struct.unpack_from(order + "Qq", raw, pos)
        wc, rc = struct.unpack_from(order + "qq", raw, pos + 88)
        n = wc + rc
        segs = np.frombuffer(raw, seg, n, pos + _DXT_RECORD)
        part = np.empty(n, DXT_DTYPE)
        for f, _ in _SEGMENT:
            part[f] = segs[f]
        part["module"], part["rank"], part["id"] = module, rank, rid
        part["write"] = np.arange(n) < wc  # writes first, then reads
        parts.append(part)
        pos += _DXT_RECORD + 32 * n
    return parts


def read_log(path, reader=None):
    """Read the log at ``path`` once (see the module docstring). Raises HpcioError with one
    line when the file is missing, not a Darshan 3 log, truncated or corrupt. ``reader``
    names a counter reader (``COUNTER_READERS``); by default the first available."""
    if not os.path.isfile(path):
        raise HpcioError(f"{path}: no such file")
    with open(path, "rb") as f:
        data = f.read()
    order = next((o for o in "<>" if len(data) >= _HEADER and data.startswith(b"3.")
                  and struct.unpack_from(o + "q", data, 8)[0] == _MAGIC), None)
    if order is None:
        raise HpcioError(f"{path}: not a Darshan 3 log")
    version = data[:8].rstrip(b"\0").decode("ascii", "replace")
    comp = data[16]
    partial_flag = struct.unpack_from(order + "Q", data, 24)[0]
    name_off, name_len = struct.unpack_from(order + "QQ", data, 32)
    maps = np.frombuffer(data, np.dtype(order + "u8"), 2 * _MAX_MODS, 48).reshape(-1, 2)
    end = max(int((maps[:, 0] + maps[:, 1]).max()), name_off + name_len)
    if len(data) < end:
        raise HpcioError(f"{path}: truncated ({len(data):,} of {end:,} bytes)")
    if comp > 2:
        raise HpcioError(f"{path}: unknown compression {comp}")
    job = _inflate(data[_HEADER:name_off], comp, f"{path}: job record")
    if version >= "3.41":  # start and end as (sec, nsec)
        _, s, sn, e, en, nprocs, jobid = struct.unpack_from(order + "7q", job, 0)
        start, stop, meta_at = s + 1e-9 * sn, e + 1e-9 * en, 56
    else:
        _, s, e, nprocs, jobid = struct.unpack_from(order + "5q", job, 0)
        start, stop, meta_at = float(s), float(e), 40
    meta = job[meta_at:meta_at + 1024].split(b"\0")[0].decode("utf-8", "replace")
    metadata = dict(kv.split("=", 1) for kv in meta.splitlines() if "=" in kv)
    exe = job[meta_at + 1024:].split(b"\0")[0].decode("utf-8", "replace").split("\n")[0]
    names = _names(_inflate(data[name_off:name_off + name_len], comp,
                            f"{path}: name table"), order)
    modules = [m for m, (_, n) in zip(_MODULE_IDS, maps) if n]
    parts = []
    for k, mod in enumerate(_DXT):
        off, n = (int(x) for x in maps[_MODULE_IDS.index(mod)])
        if n:
            parts += _dxt(_inflate(data[off:off + n], comp, f"{path}: {mod} region"),
                          order, k)
    log = DarshanLog(
        path=os.path.abspath(path), log_version=version, lib_version=metadata.get("lib_ver"),
        nprocs=int(nprocs), jobid=int(jobid), start=start, end=stop, exe=exe.strip(),
        metadata=metadata, modules=modules,
        partial=[m for i, m in enumerate(_MODULE_IDS) if partial_flag >> i & 1],
        names=names, dxt=np.concatenate(parts) if parts else np.empty(0, DXT_DTYPE))
    wanted = [m for m in COUNTER_MODULES if m in modules]
    name = reader or counter_reader()
    if wanted and name:
        log.counters = COUNTER_READERS[name][1](path, wanted)
        log.counter_reader = name
    return log


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


def _parser(path, modules):
    exe = find_parser()
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


# name: (available(), read(path, modules) -> {module: Records}); first available wins
COUNTER_READERS = {
    "pydarshan": (lambda: importlib.util.find_spec("darshan") is not None, _pydarshan),
    "darshan-parser": (lambda: find_parser() is not None, _parser),
}


def counter_reader():
    """The first counter reader this machine has, or None."""
    return next((n for n, (ok, _) in COUNTER_READERS.items() if ok()), None)
