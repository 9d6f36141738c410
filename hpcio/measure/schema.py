"""What each input of ``hpcio.analyze`` and ``hpcio.results`` must hold, checked before use.

Run directories come back from other machines, other versions and other hands: a field of
the wrong type, a NaN, a FIFO where a file should be, or an array header that claims 10**12
elements must cost one line naming the file and the field, never a traceback, a hang or a
huge allocation. So every such file is read here and nowhere else: :func:`read_bytes`
(regular files only, size bounded before reading), :func:`load` (parsed, then cleaned
against its schema in ``SCHEMAS``) and :func:`load_columns` (an npz's arrays, each size
checked from its header before anything is allocated). A bad optional field is dropped and
named (``gaps``), so the report is made from the rest; a bad required one makes the whole
file unusable (:class:`Invalid`).
"""

import io
import json
import math
import os
import stat
import zipfile

import numpy as np
import yaml

from ..errors import HpcioError

__all__ = ["Invalid", "MissingColumns", "read_bytes", "load", "load_columns", "gap_line",
           "spans", "SCHEMAS", "LIMITS", "MAX_RANKS", "SWEEP_STATUSES"]

MAX_RANKS = 1 << 20  # more than any machine has; a rank count above it is a bad field
_MIB = 1 << 20
LIMITS = {  # bytes read at most, per kind of file: far above what hpcio writes
    "yaml": 16 * _MIB, "json": 256 * _MIB, "npz": 2048 * _MIB, "npz_arrays": 2048 * _MIB,
    "darshan": 4096 * _MIB,
}


class Invalid(HpcioError):
    """A file that cannot be used: its message is ``path: what`` in one line. ``field``
    names the field its schema refused (None: the file as a whole could not be read) and
    ``problem`` says what is wrong, for a caller that words the line itself."""

    def __init__(self, message, field=None, problem=None):
        super().__init__(message)
        self.field, self.problem = field, problem


class MissingColumns(Invalid):
    """An npz without columns it must have (an older step format)."""

    def __init__(self, message, columns):
        super().__init__(message)
        self.columns = columns


class _Bad(Exception):
    def __init__(self, at, what):
        super().__init__(at, what)
        self.at, self.what = at, what


# --- bounded reads ------------------------------------------------------------------------


def read_bytes(path, limit):
    """The bytes of the regular file ``path``, at most ``limit`` of them. Opened without
    blocking (a FIFO would wait for a writer forever) and checked to be a regular file and
    small enough before a byte is read. FileNotFoundError passes through: callers say
    what a missing file means."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as e:
        raise Invalid(f"{path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Invalid(f"{path}: not a regular file ({_kind(st.st_mode)})")
        if st.st_size > limit:
            raise Invalid(f"{path}: {st.st_size:,} bytes, more than the {limit:,} such a "
                          f"file may have")
        chunks, n = [], 0
        while True:  # to EOF, not st_size: a file still growing is cut at the limit
            b = os.read(fd, min(limit + 1 - n, 1 << 24))
            if not b:
                break
            chunks.append(b)
            n += len(b)
            if n > limit:
                raise Invalid(f"{path}: grew past the {limit:,} bytes such a file may have")
        return b"".join(chunks)
    except OSError as e:
        raise Invalid(f"{path}: {e.strerror}") from None
    finally:
        os.close(fd)


_KINDS = {stat.S_ISDIR: "a directory", stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket",
          stat.S_ISCHR: "a character device", stat.S_ISBLK: "a block device"}


def _kind(mode):
    return next((k for test, k in _KINDS.items() if test(mode)), "not a file")


# --- field specs: clean(value, at, gaps) -> value, or raise _Bad --------------------------


class Num:
    """A finite number (not a bool) in [lo, hi]; ``integer``: a whole one."""

    def __init__(self, lo=-math.inf, hi=math.inf, integer=False):
        self.lo, self.hi, self.integer = lo, hi, integer

    def clean(self, v, at, gaps):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise _Bad(at, f"expected {'an integer' if self.integer else 'a number'}, "
                           f"got {_show(v)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise _Bad(at, f"{v} is not a measured value (NaN/inf)")
        if self.integer and not float(v).is_integer():
            raise _Bad(at, f"expected an integer, got {v!r}")
        if not self.lo <= v <= self.hi:
            raise _Bad(at, f"{v!r} is out of range ({_g(self.lo)} to {_g(self.hi)})")
        return int(v) if self.integer else v


def Int(lo=0, hi=math.inf):
    return Num(lo, hi, integer=True)


class Type:
    """A value of one of ``types`` (bool is not an int here)."""

    def __init__(self, *types, name):
        self.types, self.name = types, name

    def clean(self, v, at, gaps):
        if not isinstance(v, self.types) or (isinstance(v, bool) and bool not in self.types):
            raise _Bad(at, f"expected {self.name}, got {_show(v)}")
        return v


Str = Type(str, name="a string")
Bool = Type(bool, name="true or false")
Scalar = Type(str, int, float, name="a string or a number")


class OneOf:
    """One of a fixed set of values (a status, a mode)."""

    def __init__(self, *values):
        self.values = values

    def clean(self, v, at, gaps):
        if v not in self.values:
            raise _Bad(at, f"expected one of {', '.join(map(str, self.values))}, got "
                           f"{_show(v)}")
        return v


class Any:
    def clean(self, v, at, gaps):
        return v


class Opt:
    """``spec`` or null."""

    def __init__(self, spec):
        self.spec = spec

    def clean(self, v, at, gaps):
        return None if v is None else self.spec.clean(v, at, gaps)


class Obj:
    """A mapping with known fields: name -> spec, or (spec, True) when required. A bad
    optional field is dropped and named in ``gaps`` (``strict``: it makes the mapping
    bad); other keys pass as they are (``closed``: they make it bad)."""

    def __init__(self, fields, strict=False, closed=False):
        self.fields = {k: v if isinstance(v, tuple) else (v, False) for k, v in fields.items()}
        self.strict = strict  # a bad optional field makes the whole mapping bad
        self.closed = closed  # a key not among the fields makes the whole mapping bad

    def clean(self, v, at, gaps):
        if not isinstance(v, dict):
            raise _Bad(at or "(top level)", f"expected a mapping, got {_show(v)}")
        other = sorted(map(str, set(v) - set(self.fields))) if self.closed else None
        if other:
            raise _Bad(f"{at}.{other[0]}" if at else other[0], "not a field of it")
        out = dict(v)
        for k, (spec, required) in self.fields.items():
            where = f"{at}.{k}" if at else k
            if k not in v:
                if required:
                    raise _Bad(where, "missing")
                continue
            try:
                out[k] = spec.clean(v[k], where, gaps)
            except _Bad as b:
                if required or self.strict:
                    raise
                gaps.append((b.at, b.what))
                del out[k]
        return out


class Each:
    """A mapping whose every value is ``spec``; a bad value is dropped and named."""

    def __init__(self, spec):
        self.spec = spec

    def clean(self, v, at, gaps):
        if not isinstance(v, dict):
            raise _Bad(at, f"expected a mapping, got {_show(v)}")
        out = {}
        for k, x in v.items():
            try:
                out[k] = self.spec.clean(x, f"{at}.{k}", gaps)
            except _Bad as b:
                gaps.append((b.at, b.what))
        return out


class List:
    """A list of ``spec``: all or nothing (a sum over what is left of it would be untrue),
    unless ``drop`` (its items stand alone, like a sweep's runs)."""

    def __init__(self, spec, drop=False):
        self.spec, self.drop = spec, drop

    def clean(self, v, at, gaps):
        if not isinstance(v, list):
            raise _Bad(at, f"expected a list, got {_show(v)}")
        out = []
        for i, x in enumerate(v):
            try:
                out.append(self.spec.clean(x, f"{at}[{i}]", gaps))
            except _Bad as b:
                if not self.drop:
                    raise
                gaps.append((b.at, b.what))
        return out


class Counter:
    """One counter of an epoch: a finite number or null (a nested record passes: nothing
    reads it as a number)."""

    def clean(self, v, at, gaps):
        if v is None or isinstance(v, (dict, list)):
            return v
        return Num().clean(v, at, gaps)


def _show(v):
    text = repr(v)
    return f"{type(v).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def _g(x):
    return f"{x:g}" if isinstance(x, float) else f"{x:,}"


# --- the schemas --------------------------------------------------------------------------

CONFIG = Obj({
    "ranks": (Int(1, MAX_RANKS), True),
    "reader": Str, "reader_option": Opt(List(Str)), "model": Opt(Str), "data": Opt(Str),
    "out": Opt(Str), "run_dir": Opt(Str), "darshan": Any(),
    "epochs": Opt(Int()), "steps_per_epoch": Opt(Int()), "batch": Opt(Int(1)),
    "nodes": Opt(Int(1)), "dataset_bytes": Opt(Int()), "exchange": Any(),
    "dataset": Opt(Obj({"format": Str, "encoding": Opt(Str), "records": Opt(Int())})),
})
ENV = Obj({"data": Opt(Obj({"fs_type": Opt(Str)})), "darshan": Any()})
PROVENANCE = Obj({
    "workload_hash": (Str, True), "hpcio_version": Opt(Str),
    "git": Opt(Obj({"commit": (Str, True), "dirty": (Bool, True)}, strict=True)),
    "ranks": Opt(Int(1, MAX_RANKS)), "data_fs_type": Opt(Str), "mpi_library": Opt(Str),
    "hosts": Opt(List(Obj({"host": (Str, True), "ranks": (Int(1, MAX_RANKS), True),
                           "mem_total_bytes": (Opt(Int()), True)}))),
})
SUMMARY = Obj({
    "source": Str, "cut_short": Bool, "signal": Opt(Scalar), "steps_per_epoch": Opt(Int()),
    "signal_after_summary": Opt(Str),
    "ranks": Int(1, MAX_RANKS), "nodes": Opt(Int(1)), "batch": Opt(Int(1)),
    "epochs_run": Opt(Int()), "epochs_requested": Opt(Int()),
    "metrics": Opt(Obj({  # what hpcio.results export reads
        "steps_per_rank": Opt(Int()), "au_percent": Num(0), "au_percent_all_steps": Num(0),
        "samples_per_s": Num(0), "mib_per_s": Num(0), "stall_percent": Num(0),
        "fetch_percent": Num(0), "epoch_s_mean": Opt(Num(0)),
        "per_epoch": List(Obj({"au_percent": (Num(0), True)})),
    })),
})
RANK = Obj({
    "partial": Bool, "origin_unix": Num(0), "mpi_init_unix": Opt(Num(0)),
    "clock": Opt(Obj({"offset_s": Num(), "rtt_s": Num(0)})),
    "epochs": List(Obj({"counters": (Each(Each(Counter())), True)})),
    "summary": Opt(Obj({"all": (Obj({"records": (Int(), True)}), True)})),
})
SWEEP = Obj({"runs": (List(Obj({
    "point": (Obj({"reader": Opt(Str), "ranks": Opt(Int(1, MAX_RANKS))}), True),
    "status": (Str, True), "repeat": Opt(Int()), "error": Opt(Str), "run_dir": Opt(Str),
}, strict=True), drop=True), True)})  # a run's entry half understood is not analysed

# sweep.json read back by the sweep that resumes it: every run whole, or none (a point
# half understood would be run again, or skipped, wrongly)
SWEEP_STATUSES = ("pending", "running", "done", "cut_short", "interrupted", "failed")
SWEEP_RECORD = Obj({
    "settings": (Obj({}), True),
    "runs": (List(Obj({
        "point": (Obj({"data": (Str, True), "reader": (Str, True),
                       "ranks": (Int(1, MAX_RANKS), True), "reader_option": (Str, True)},
                      closed=True), True),
        "repeat": (Int(), True), "attempts": (Int(), True),
        "status": (OneOf(*SWEEP_STATUSES), True),
    })), True),
})

# ``python -m hpcio.simulate predict``'s files (``hpcio.analyze --prediction``): the fields
# the report reads are checked, the rest pass as they are
_SIM_POINT = Obj({
    "reader": (Str, True), "ranks": (Int(1, MAX_RANKS), True),
    "stall_s_per_step": (Num(0), True), "au_percent": (Num(0, 100), True),
    "samples_per_s": (Num(0), True), "storage_mib_per_s": (Num(0), True),
    "extrapolated": (Bool, True), "validated": (Bool, True), "dominant": Opt(Str),
})
PREDICTION = Obj({
    "points": (List(_SIM_POINT), True), "fit": Opt(Str), "stall_s_per_step": Opt(Str),
    "accelerators_supported": Opt(Each(Obj({
        "ranks": (Opt(Int(1, MAX_RANKS)), True), "threshold_au_percent": (Num(0, 100), True),
    }))),
})
_SIM_ROW = Obj({
    "reader": (Str, True), "ranks": (Int(1, MAX_RANKS), True),
    "stall_err_rel": (Num(), True), "au_err_points": (Num(), True),
    "measured_stall_s": Num(0), "simulated_stall_s": Num(0), "run": Opt(Str),
})
VALIDATION = Obj({
    "simulated_back": Opt(List(_SIM_ROW)),
    "held_out": (Opt(Obj({
        "calibrated_on_ranks": (List(Int(1, MAX_RANKS)), True),
        "held_out_ranks": (Int(1, MAX_RANKS), True), "fit": Opt(Str),
        "points": (List(_SIM_ROW), True),
    })), True),
})


def _json(data):
    """Parses (the reverse of :func:`hpcio.fsutil.jsonable`, which cleans what is written)."""
    return json.loads(data.decode("utf-8"))


def _yaml(data):
    return yaml.safe_load(data.decode("utf-8"))


# kind: (parse(bytes) -> value, limit key, spec)
SCHEMAS = {
    "config": (_yaml, "yaml", CONFIG),
    "env": (_json, "json", ENV),
    "provenance": (_json, "json", PROVENANCE),
    "summary": (_json, "json", SUMMARY),
    "rank": (_json, "json", RANK),
    "sweep": (_json, "json", SWEEP),
    "sweep_record": (_json, "json", SWEEP_RECORD),
    "prediction": (_json, "json", PREDICTION),
    "validation": (_json, "json", VALIDATION),
}
_PARSE_ERRORS = (ValueError, yaml.YAMLError, RecursionError)  # UnicodeError is a ValueError


def load(path, kind):
    """(value, gaps) of the file ``path`` checked against ``SCHEMAS[kind]``; ``gaps``:
    (field, what) of each optional field dropped. Raises :class:`Invalid` (one line) when
    the file cannot be used, FileNotFoundError when it is missing."""
    parse, limit, spec = SCHEMAS[kind]
    data = read_bytes(path, LIMITS[limit])
    try:
        value = parse(data)
    except _PARSE_ERRORS as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else \
            (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise Invalid(f"{path}: unreadable ({what})", problem=what) from None
    gaps = []
    try:
        return spec.clean(value, "", gaps), gaps
    except _Bad as b:
        raise Invalid(f"{path}: {b.at}: {b.what}", b.at, b.what) from None
    except RecursionError:
        raise Invalid(f"{path}: nested too deeply") from None


def gap_line(path, gaps):
    """One line for the fields of ``path`` that were dropped."""
    (at, what), more = gaps[0], len(gaps) - 1
    return (f"{path}: {at}: {what}; left out"
            + (f" (and {more} more field{'s' if more > 1 else ''})" if more else ""))


# --- npz ----------------------------------------------------------------------------------

_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0}


def load_columns(path, required, optional=(), nonnegative=()):
    """The 1-D numeric arrays ``required`` (and those of ``optional`` present) of the npz
    ``path``: each array's size is checked against its header before it is read, every
    value must be finite (a NaN is flagged, never averaged), the columns in
    ``nonnegative`` >= 0, all of one length. Other members are not read."""
    data = read_bytes(path, LIMITS["npz"])
    try:
        z = zipfile.ZipFile(io.BytesIO(data))
        members = {n[:-4]: z.getinfo(n) for n in z.namelist() if n.endswith(".npy")}
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise Invalid(f"{path}: not an npz file ({e})") from None
    missing = [c for c in required if c not in members]
    if missing:
        raise MissingColumns(f"{path}: no column {', '.join(missing)}", missing)
    wanted = [c for c in list(required) + list(optional) if c in members]
    total = sum(members[c].file_size for c in wanted)
    if total > LIMITS["npz_arrays"]:
        raise Invalid(f"{path}: its arrays hold {total:,} bytes, more than "
                      f"{LIMITS['npz_arrays']:,}")
    out = {}
    for c in wanted:
        try:
            out[c] = _array(z, members[c])
        except _Bad as b:
            raise Invalid(f"{path}: {c}: {b.what}") from None
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
            raise Invalid(f"{path}: {c}: unreadable ({str(e).splitlines()[0]})") from None
    lengths = {len(a) for a in out.values()}
    if len(lengths) > 1:
        raise Invalid(f"{path}: columns of different lengths ({min(lengths)} to "
                      f"{max(lengths)})")
    for c, a in out.items():
        bad = ~np.isfinite(a) if a.dtype.kind == "f" else np.zeros(len(a), bool)
        if bad.any():
            raise Invalid(f"{path}: {c}: {int(bad.sum())} NaN/inf value(s), the first at "
                          f"row {int(bad.argmax())}: not measured values")
        if c in nonnegative and (a < 0).any():
            raise Invalid(f"{path}: {c}: negative value {a[a < 0][0].item()!r} at row "
                          f"{int((a < 0).argmax())}")
    return out


def _array(z, info):
    """One member as an array, its header's claim checked against the member's size."""
    with z.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version not in _HEADERS:
            raise _Bad("", f"npy format {version} is not one hpcio writes")
        shape, _, dtype = _HEADERS[version](f)
        if dtype.kind not in "biuf" or dtype.hasobject:
            raise _Bad("", f"dtype {dtype} is not numeric")
        if len(shape) != 1:
            raise _Bad("", f"shape {shape} is not one column")
        nbytes = shape[0] * dtype.itemsize
        left = info.file_size - f.tell()
        if nbytes != left:
            raise _Bad("", f"its header claims {nbytes:,} bytes, the file holds {left:,}")
        buf = f.read(nbytes)
    if len(buf) != nbytes:
        raise _Bad("", f"cut off ({len(buf):,} of {nbytes:,} bytes)")
    return np.frombuffer(buf, dtype, shape[0]).astype(dtype.newbyteorder("="), copy=False)


def spans(numbers):
    """``[0, 1, 2, 5]`` as ``"0-2, 5"``: a million missing ranks in one short line."""
    out, run = [], []
    for n in sorted(numbers):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
        run = [n]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else f"{run[0]}")
    return ", ".join(out[:20]) + (f" and {len(out) - 20} more spans" if len(out) > 20 else "")
