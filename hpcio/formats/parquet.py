"""Parquet files as pyarrow writes them (MLPerf Storage's dlrm and flux read parquet
through DLIO): one row per record, the sample's bytes in binary column ``data`` and its
class in int64 column ``label``, rows grouped ``--format-option row_group=N`` to a row
group (1,024 by default; a row group is written whole, so it bounds the writer's memory).

Layout: ``shard-00000.parquet``, rows in record-id order. With ``compression=none`` (the
default) the column is written PLAIN, without a dictionary or statistics: each value is
its 4-byte length and its bytes in a data page, so a record is the bytes of its value at
an offset of the file (found by walking the column chunk's page headers, Thrift's compact
protocol), and the coordinated reader reads it there. A column chunk that is compressed
or dictionary-encoded (``compression=snappy``, or most files made elsewhere) has no
record bytes of its own in the file: its records are indexed at the chunk
(``compressed_records``) and only pyarrow reads them.

Native access: as DLIO's parquet reader, ``ParquetFile.read_row_group(g, columns=...)``
of the row group holding the record, the last one read kept (rows read in order load a
row group once).

Data made elsewhere (``datagen index``): the record column is the one binary column (else
column ``data``, as DLIO's generator names its one column), or the columns named
(``--images a,b``: a record is the bytes of its row's values, one column after another:
binary values, fixed-width numbers, lists of them); the labels are column ``label``
(``--labels``) where it exists. Several columns lie in several column chunks, so such
records are read through pyarrow only.
"""

import os

import numpy as np

from ..data import pictures
from ..data.dataset import RecordIndex, sha256_file
from ..errors import HpcioError
from .base import SURE, FormatInfo, ShardResult, classes_of, files_under, index_manifest, \
    shard_stem, take_records

__all__ = ["NAME", "INFO", "Writer", "Native", "open_native", "targets", "manifest_keys",
           "scan", "index", "detect", "SUFFIXES"]

NAME = "parquet"
#: row_group: rows per row group (any positive integer); compression of the data column
INFO = FormatInfo(options={"row_group": ("1024", "N"), "compression": ("none", "snappy")},
                  named=True)  # --images/--labels: the record and label columns
SUFFIXES = (".parquet", ".pq")
MAGIC = b"PAR1"
DATA, LABEL = "data", "label"


def _pa():
    """pyarrow and pyarrow.parquet, or one line saying how to install them."""
    try:  # an optional extra ([parquet]): imported only where parquet is used
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise HpcioError("the parquet format needs pyarrow (pip install 'hpcio[parquet]')",
                         everywhere=True)
    return pyarrow, pyarrow.parquet


def _options(spec):
    o = dict(spec.options)
    bad = sorted(set(o) - set(INFO.options))
    if bad:
        raise HpcioError(f"the parquet format has no option {', '.join(bad)} (it has "
                         f"{', '.join(INFO.options)})", everywhere=True)
    rg = str(o.get("row_group", "1024"))
    if not rg.isdigit() or int(rg) < 1:
        raise HpcioError(f"parquet row_group={rg}: must be a positive integer",
                         everywhere=True)
    comp = o.get("compression", "none")
    if comp not in INFO.options["compression"]:
        raise HpcioError(f"parquet compression={comp}: must be none or snappy",
                         everywhere=True)
    return int(rg), comp


def targets(k, spec):
    return [shard_stem(k) + ".parquet"]


def manifest_keys(spec):
    rg, comp = _options(spec)
    return {"parquet": {"columns": [DATA], "label": LABEL, "row_group": rg,
                        "compression": comp}}


# ---- Thrift compact protocol (page headers) ---------------------------------------------

class _Thrift:
    """Reads Thrift compact-protocol structs from ``buf`` at ``pos``: a struct is a dict
    of field id -> value (nested structs as dicts, lists as lists)."""

    def __init__(self, buf, pos=0):
        self.buf, self.pos = buf, pos

    def _byte(self):
        if self.pos >= len(self.buf):
            raise EOFError
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self):
        out, shift = 0, 0
        while True:
            b = self._byte()
            out |= (b & 0x7F) << shift
            if b < 0x80:
                return out
            shift += 7

    def zigzag(self):
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t):
        if t in (1, 2):  # booleans in a field header carry their value
            return t == 1
        if t == 3:
            b = self._byte()
            return b - 256 if b > 127 else b
        if t in (4, 5, 6):
            return self.zigzag()
        if t == 7:
            self.pos += 8
            return None
        if t == 8:
            n = self.varint()
            self.pos += n
            return bytes(self.buf[self.pos - n:self.pos])
        if t in (9, 10):
            head = self._byte()
            n, et = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            return [self._byte() == 1 if et in (1, 2) else self.value(et) for _ in range(n)]
        if t == 11:
            n = self.varint()
            kv = self._byte() if n else 0
            return [(self.value(kv >> 4), self.value(kv & 0x0F)) for _ in range(n)]
        if t == 12:
            return self.struct()
        raise ValueError(f"Thrift type {t}")

    def struct(self):
        out, fid = {}, 0
        while True:
            head = self._byte()
            if head == 0:
                return out
            delta, t = head >> 4, head & 0x0F
            fid = fid + delta if delta else self.zigzag()
            out[fid] = self.value(t)


# PageHeader: 1 type, 3 compressed_page_size, 5 data_page_header (1 num_values,
# 2 encoding), 8 data_page_header_v2 (1 num_values, 5/6 def/rep levels' byte lengths)
_DATA_V1, _DICT, _DATA_V2 = 0, 2, 3
_PLAIN = 0


def _page_header(f, at, path):
    """(header dict, header length) of the page at byte ``at`` of open file ``f``."""
    size = 256
    while True:
        f.seek(at)
        buf = f.read(size)
        try:
            t = _Thrift(buf)
            head = t.struct()
            return head, t.pos
        except EOFError:
            if len(buf) < size:
                raise HpcioError(f"{path}: truncated page header at byte {at}")
            size *= 4
        except (ValueError, IndexError) as e:
            raise HpcioError(f"{path}: unreadable page header at byte {at} ({e})")


def _plain_values(f, start, end, count, path, at):
    """Offsets and lengths of the ``count`` PLAIN BYTE_ARRAY values in bytes
    ``start``..``end`` of ``f`` (each a 4-byte length and its bytes); None where the
    page holds fewer (nulls)."""
    offs, lens = [], []
    pos = start
    small = end - start <= (8 << 20)
    if small:
        f.seek(start)
        page = f.read(end - start)
    while pos < end and len(offs) < count:
        if small:
            raw = page[pos - start:pos - start + 4]
        else:
            f.seek(pos)
            raw = f.read(4)
        if len(raw) < 4:
            raise HpcioError(f"{path}: truncated data page at byte {at}")
        n = int.from_bytes(raw, "little")
        offs.append(pos + 4)
        lens.append(n)
        pos += 4 + n
    if pos > end:
        raise HpcioError(f"{path}: the data page at byte {at} holds values past its end")
    return (offs, lens) if len(offs) == count and pos == end else None


def _plain_chunk(f, col, max_def, path):
    """(offsets, lengths) of the values of the column chunk ``col`` (its metadata) where
    they lie plain in the file: uncompressed PLAIN data pages, no dictionary, no nulls;
    None otherwise."""
    if col.compression != "UNCOMPRESSED" or col.has_dictionary_page:
        return None
    at, end = col.data_page_offset, col.data_page_offset + col.total_compressed_size
    offs, lens = [], []
    while at < end:
        head, hlen = _page_header(f, at, path)
        ptype, size = head.get(1), head.get(3, 0)
        body = at + hlen
        if ptype == _DATA_V1:
            dph = head.get(5, {})
            if dph.get(2) != _PLAIN:
                return None
            start = body
            if max_def > 0:  # definition levels: a 4-byte length and their RLE runs
                f.seek(start)
                start += 4 + int.from_bytes(f.read(4), "little")
            got = _plain_values(f, start, body + size, dph.get(1, 0), path, at)
        elif ptype == _DATA_V2:
            dph = head.get(8, {})
            if dph.get(4) != _PLAIN:
                return None
            start = body + dph.get(5, 0) + dph.get(6, 0)
            got = _plain_values(f, start, body + size, dph.get(1, 0) - dph.get(2, 0),
                                path, at)
            if dph.get(2, 0):
                got = None
        elif ptype == _DICT:
            return None
        else:  # an index page: nothing of the values
            got = ([], [])
        if got is None:
            return None
        offs += got[0]
        lens += got[1]
        at = body + size
    if len(offs) != col.num_values:
        return None
    return offs, lens


# ---- record bytes through pyarrow -------------------------------------------------------

def _column_bytes(pa, arr, name, path):
    """(uint8 data, int64 offsets) of each row's value of column ``arr`` as bytes."""
    t = arr.type
    if arr.null_count:
        raise HpcioError(f"{path}: column {name} has null values (a record cannot be "
                         f"empty of its value)")
    types = pa.types
    n = len(arr)
    if types.is_binary(t) or types.is_string(t) or types.is_large_binary(t) or \
            types.is_large_string(t):
        wide = types.is_large_binary(t) or types.is_large_string(t)
        bufs = arr.buffers()
        offs = np.frombuffer(bufs[1], np.int64 if wide else np.int32)[
            arr.offset:arr.offset + n + 1].astype(np.int64)
        data = np.frombuffer(bufs[2], np.uint8) if bufs[2] is not None else \
            np.zeros(0, np.uint8)
        return data[offs[0]:offs[-1]], offs - offs[0]
    if types.is_fixed_size_binary(t) or (types.is_primitive(t) and not types.is_boolean(t)):
        w = t.byte_width
        data = np.frombuffer(arr.buffers()[1], np.uint8)[arr.offset * w:(arr.offset + n) * w]
        return data, np.arange(n + 1, dtype=np.int64) * w
    if types.is_list(t) or types.is_large_list(t) or types.is_fixed_size_list(t):
        inner = arr.flatten()
        if types.is_fixed_size_list(t):
            rows = np.arange(n + 1, dtype=np.int64) * t.list_size
        else:
            rows = np.asarray(arr.offsets, np.int64)
            rows = rows - rows[0]
        data, offs = _column_bytes(pa, inner, name, path)
        return data[offs[0]:offs[-1]], offs[rows]
    raise HpcioError(f"{path}: column {name} is {t}: a record is bytes, fixed-width "
                     f"numbers or lists of them")


def _rows(pa, table, columns, path):
    """(uint8 data, int64 offsets) of the records of ``table``: each row's values of
    ``columns`` as bytes, one column after another."""
    parts = [_column_bytes(pa, table.column(c).combine_chunks(), c, path) for c in columns]
    if len(parts) == 1:
        return parts[0]
    lens = np.stack([np.diff(o) for _, o in parts])
    offs = np.zeros(table.num_rows + 1, np.int64)
    np.cumsum(lens.sum(axis=0), out=offs[1:])
    out = np.empty(int(offs[-1]), np.uint8)
    before = np.zeros(table.num_rows, np.int64)
    for (data, o), ln in zip(parts, lens):
        total = int(ln.sum())
        within = np.arange(total, dtype=np.int64) - np.repeat(o[:-1] - o[0], ln)
        out[np.repeat(offs[:-1] + before, ln) + within] = \
            data[np.repeat(o[:-1], ln) + within]
        before += ln
    return out, offs


# ---- scanning a file ----------------------------------------------------------------------

def _open(pq, path):
    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise HpcioError(f"{path}: file missing")
    except Exception as e:  # pyarrow's ArrowInvalid, OSError
        line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise HpcioError(f"{path}: not a parquet file ({line})")


def _leaves(md, name):
    """The leaf columns (column chunks) of top-level column ``name``."""
    return [j for j in range(md.num_columns)
            if md.schema.column(j).path.split(".")[0] == name]


def scan(path, columns=None, label=None):
    """What the index needs of one parquet file: (offsets, lengths, labels, columns,
    label column, plain), ``plain`` False where the records lie compressed or encoded
    (their offsets then the start of their row group's column chunk)."""
    pa, pq = _pa()
    pf = _open(pq, path)
    schema = pf.schema_arrow
    names = schema.names
    if columns:
        for c in columns:
            if c not in names:
                raise HpcioError(f"{path}: no column {c} (its columns: "
                                 f"{', '.join(names[:12])}{', ...' if len(names) > 12 else ''})")
    else:
        binary = [f.name for f in schema if pa.types.is_binary(f.type) or
                  pa.types.is_large_binary(f.type)]
        if not binary and DATA in names:  # DLIO's one column: a list of the sample's bytes
            binary = [DATA]
        if len(binary) != 1:
            raise HpcioError(f"{path}: {len(binary)} binary columns"
                             f"{' (' + ', '.join(binary[:6]) + ')' if binary else ''}: name "
                             f"the record's column(s) with --images COL[,COL...]")
        columns = binary
    if label is not None and label not in names:
        raise HpcioError(f"{path}: no column {label} (the labels; its columns: "
                         f"{', '.join(names[:12])})")
    label = label if label is not None else (LABEL if LABEL in names else None)
    if label is not None and not pa.types.is_integer(schema.field(label).type):
        raise HpcioError(f"{path}: column {label} holds {schema.field(label).type}, not "
                         f"integer class labels (--labels names another column)")
    md = pf.metadata
    n = md.num_rows
    offs, lens, plain = [], [], False
    if len(columns) == 1:
        leaf = _leaves(md, columns[0])
        desc = md.schema.column(leaf[0]) if len(leaf) == 1 else None
        if desc is not None and desc.physical_type == "BYTE_ARRAY" and \
                desc.max_repetition_level == 0:
            plain = True
            with open(path, "rb") as f:
                for g in range(md.num_row_groups):
                    got = _plain_chunk(f, md.row_group(g).column(leaf[0]),
                                       desc.max_definition_level, path)
                    if got is None:
                        plain = False
                        break
                    offs += got[0]
                    lens += got[1]
    if plain:
        offset, length = np.array(offs, np.int64), np.array(lens, np.int64)
    else:  # through pyarrow: the lengths of the records, each at its column chunk
        offset, length = [], []
        leaf = _leaves(md, columns[0])[0]
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            col = rg.column(leaf)
            start = col.dictionary_page_offset if col.has_dictionary_page else \
                col.data_page_offset
            _, o = _rows(pa, pf.read_row_group(g, columns=columns), columns, path)
            offset.append(np.full(rg.num_rows, start, np.int64))
            length.append(np.diff(o))
        offset = np.concatenate(offset) if offset else np.zeros(0, np.int64)
        length = np.concatenate(length) if length else np.zeros(0, np.int64)
    labels = np.asarray(pf.read(columns=[label]).column(0).to_numpy(), np.int64) \
        if label is not None else np.full(n, -1, np.int64)
    if len(offset) != n:
        raise HpcioError(f"{path}: {len(offset)} values of column {columns[0]} in its "
                         f"pages, {n} rows in its footer")
    return offset, length, labels, list(columns), label, plain


def _chunk_codec(path, columns):
    """How the column chunks of ``path`` are stored, in a word (the manifest's)."""
    _, pq = _pa()
    md = _open(pq, path).metadata
    if not md.num_row_groups:
        return "none"
    if len(columns) > 1:
        return "columns"
    col = md.row_group(0).column(_leaves(md, columns[0])[0])
    if col.compression != "UNCOMPRESSED":
        return col.compression.lower()
    return "dictionary" if col.has_dictionary_page else "encoded"


# ---- writing --------------------------------------------------------------------------------

class Writer:
    """Collects blocks into row groups of ``row_group`` rows and writes each through
    pyarrow's ParquetWriter; on close, the file's pages are walked for the index (the
    offsets where pyarrow put each value)."""

    def __init__(self, root, k, lo, hi, spec):
        self.pa, pq = _pa()
        self.rel = shard_stem(k) + ".parquet"
        self.path = os.path.join(root, self.rel)
        self.lo, self.hi = lo, hi
        self.rows, comp = _options(spec)
        self.snappy = comp == "snappy"
        pa = self.pa
        self.schema = pa.schema([pa.field(DATA, pa.large_binary(), nullable=False),
                                 pa.field(LABEL, pa.int64(), nullable=False)])
        self.w = pq.ParquetWriter(self.path, self.schema,
                                  compression="snappy" if self.snappy else "none",
                                  use_dictionary=self.snappy, write_statistics=False)
        self.pending, self.count = [], 0

    def write(self, block):
        self.pending.append(block)
        self.count += block.hi - block.lo
        while self.count >= self.rows:
            self._flush(self.rows)

    def _flush(self, n):
        data, lens, labs = take_records(self.pending, n)
        self.count -= n
        pa = self.pa
        data = np.ascontiguousarray(data, np.uint8)
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        col = pa.Array.from_buffers(pa.large_binary(), n,
                                    [None, pa.py_buffer(offs), pa.py_buffer(data)])
        lab = pa.array(labs.astype(np.int64))
        self.w.write_table(pa.Table.from_arrays([col, lab], schema=self.schema),
                           row_group_size=n)

    def close(self):
        if self.count:
            self._flush(self.count)
        self.w.close()
        with open(self.path, "rb") as f:
            os.fsync(f.fileno())
        off, length, label, _, _, plain = scan(self.path, [DATA], LABEL)
        n = self.hi - self.lo
        extra = {} if plain else {"compressed_records": n}
        return ShardResult(self.rel, (self.lo, self.hi), [self.rel],
                           [os.path.getsize(self.path)], np.zeros(n, np.int32), off,
                           length, label, sha256_file(self.path), extra=extra)

    def abort(self):
        try:
            self.w.close()
        except Exception:
            pass


# ---- native reads -------------------------------------------------------------------------

class Native:
    """``ParquetFile.read_row_group`` of the record's row group, as DLIO's reader reads;
    the row group last read kept, each file opened once."""

    def __init__(self, ds):
        self.pa, self.pq = _pa()
        self.ds = ds
        keys = ds.manifest.get("parquet", {})
        self.columns = keys.get("columns", [DATA])
        self.first = np.searchsorted(ds.index.file, np.arange(len(ds.index.files)))
        self.files, self.bounds = {}, {}
        self.cur, self.data, self.offs = None, None, None
        self.opens = 0  # files opened so far (ReaderStats.opens)

    def _file(self, j):
        pf = self.files.get(j)
        if pf is None:
            pf = self.files[j] = _open(self.pq, self.ds.path(j))
            md = pf.metadata
            b = np.zeros(md.num_row_groups + 1, np.int64)
            np.cumsum([md.row_group(g).num_rows for g in range(md.num_row_groups)],
                      out=b[1:])
            self.bounds[j] = b
            self.opens += 1
        return pf

    def get(self, i):
        j = int(self.ds.index.file[i])
        pf = self._file(j)
        row = i - int(self.first[j])
        b = self.bounds[j]
        g = int(np.searchsorted(b, row, side="right")) - 1
        if self.cur != (j, g):
            p = self.ds.path(j)
            try:
                table = pf.read_row_group(g, columns=self.columns)
            except Exception as e:  # ArrowInvalid, OSError: a changed or cut file
                line = str(e).strip().splitlines()[0] if str(e).strip() else \
                    type(e).__name__
                raise HpcioError(f"{p}: unreadable row group {g} ({line})")
            self.data, self.offs = _rows(self.pa, table, self.columns, p)
            self.cur = (j, g)
        k = row - int(b[g])
        return self.data[int(self.offs[k]):int(self.offs[k + 1])]

    def close(self):
        for pf in self.files.values():
            pf.close()
        self.files, self.data, self.offs, self.cur = {}, None, None, None


def open_native(ds):
    return Native(ds)


# ---- data made elsewhere ------------------------------------------------------------------


def _holds(path, depth=1):
    """Whether folder ``path`` or its sub-folders ``depth`` levels down (DLIO's
    ``train/``, ``valid/``) hold a parquet file."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    if any(e.name.endswith(SUFFIXES) and e.is_file() for e in entries):
        return True
    return depth > 0 and any(e.is_dir() and not e.name.startswith(".") and
                             _holds(e.path, depth - 1) for e in entries)


def detect(path):
    """A parquet file (``PAR1`` at its start, or named so), or a folder of them (or of
    folders of them)."""
    if os.path.isdir(path):
        return SURE if _holds(path) else 0
    if path.endswith(SUFFIXES):
        return SURE
    try:
        with open(path, "rb") as f:
            return SURE if f.read(4) == MAGIC else 0
    except OSError:
        return 0


def index(path, out, images=None, labels=None, columns=None, **_):
    """Manifest and record index of parquet files made elsewhere (one file, or a folder
    of them, sorted by path): the record column(s) ``columns`` (or ``images``, comma
    separated; default the one binary column), labels from ``labels`` (default column
    ``label`` where there is one)."""
    cols = columns or images
    cols = [c for c in cols.split(",") if c] if isinstance(cols, str) else cols
    paths = files_under(path, SUFFIXES)
    if not paths:
        raise HpcioError(f"{path}: no .parquet files")
    offs, lens, labs, file_of, sizes = [], [], [], [], []
    packed, lo, shards = 0, 0, []
    first_cols, first_label = None, None
    for j, p in enumerate(paths):
        off, ln, lab, got, lcol, plain = scan(p, cols or first_cols, labels or first_label)
        if first_cols is None:
            first_cols, first_label = got, lcol
        offs.append(off)
        lens.append(ln)
        labs.append(lab)
        file_of.append(np.full(len(off), j, np.int32))
        sizes.append(os.path.getsize(p))
        shard = {"path": os.path.relpath(p, out), "records": [lo, lo + len(off)],
                 "bytes": sizes[-1], "sha256": sha256_file(p)}
        if not plain:
            shard["compressed_records"] = len(off)
            packed += len(off)
        shards.append(shard)
        lo += len(off)
    off, length, label = np.concatenate(offs), np.concatenate(lens), np.concatenate(labs)
    n = len(off)
    if n == 0:
        raise HpcioError(f"{path}: its parquet files hold no rows")
    file = np.concatenate(file_of)
    files = [os.path.relpath(p, out) for p in paths]
    idx = RecordIndex(file, off, length, label, files, sizes)
    pa, pq = _pa()
    pf = _open(pq, paths[int(file[0])])
    data, o = _rows(pa, pf.read_row_group(0, columns=first_cols), first_cols, paths[0])
    first = data[o[0]:o[1]].tobytes()
    enc = pictures.sniff(first) or "raw"
    shape = [len(first)] if enc == "raw" else \
        list(pictures.decode(first, enc, where=f"{paths[0]}: record 0").shape)
    extra = {"parquet": {"columns": first_cols, "label": first_label,
                         "compression": _chunk_codec(paths[0], first_cols) if packed
                         else "none"}}
    m = index_manifest(NAME, enc, shape, "uint8", classes_of(label), n, shards[0], extra)
    m["shards"] = shards
    return m, idx
