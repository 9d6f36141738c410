"""The hostile-user audit of ``hpcio.analyze`` and ``hpcio.results`` (issue 18, item 6):
every input file wrong in some way a person or a crash can make it, each case one line
naming the file and field, a report made from the rest, no hang, no huge allocation,
nothing of the input overwritten. Run directories are copies of the real ones in
tests/fixtures/hpcio-runs, their Darshan logs corrupted in place."""

import glob
import io
import json
import os
import struct
import threading
import time
import zipfile
import zlib

import numpy as np
import pytest
import yaml

from common.inproc import run_main
from common.failure import one_line
from common.fixtures import LOGS, RUNS, copy_run
from hpcio.measure import schema
from hpcio.measure import darshanlog
from hpcio.explain.report import analyse
from hpcio.explain.runs import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANALYZE = ["-m", "hpcio.analyze"]
SUMMARIZE = ["-m", "hpcio.results", "summarize"]
BAD, GOOD = "pfs-inet-lmdb-naive-n2", "pfs-inet-lmdb-coordinated-n2"

pytestmark = pytest.mark.skipif(not os.path.isdir(RUNS), reason=f"no fixture runs at {RUNS}")


# --- helpers ---------------------------------------------------------------------------


def _copy(name, dest):
    return copy_run(RUNS, name, dest)


def _log(run):
    return glob.glob(os.path.join(run, "darshan", "*.darshan"))[0]


def _state(path):
    """Every file under ``path``: its bytes and mtime, to show nothing changed."""
    out = {}
    for d, _, files in os.walk(path):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p):
                with open(p, "rb") as fh:
                    out[p] = (fh.read(), os.stat(p).st_mtime_ns)
    return out


def _lines(stderr):
    return [ln for ln in stderr.splitlines() if ln.strip()]


def _edit(path, edit, load, dump):
    with open(path) as f:
        doc = load(f)
    doc = edit(doc) or doc
    with open(path, "w") as f:
        dump(doc, f)


def _edit_json(path, edit):
    _edit(path, edit, json.load, json.dump)


def _edit_yaml(path, edit):
    _edit(path, edit, yaml.safe_load, yaml.safe_dump)


def _npz_members(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _write_npz(path, arrays, raw=None):
    """``arrays`` saved as an npz; ``raw``: members written as given bytes instead."""
    with zipfile.ZipFile(path, "w") as z:
        for k, a in arrays.items():
            buf = io.BytesIO()
            np.save(buf, a)
            z.writestr(f"{k}.npy", buf.getvalue())
        for k, b in (raw or {}).items():
            z.writestr(f"{k}.npy", b)


def _edit_npz(path, edit):
    arrays = _npz_members(path)
    raw = edit(arrays)
    _write_npz(path, arrays, raw)


def _huge_header(arrays):
    """``wall`` whose header claims 10**12 doubles while the member holds 8 bytes."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buf, {"descr": "<f8", "fortran_order": False, "shape": (10 ** 12,)})
    del arrays["wall"]
    return {"wall": buf.getvalue() + b"\0" * 8}


def _nan(arrays):
    arrays["fetch"] = arrays["fetch"].copy()
    arrays["fetch"][3] = np.nan


# --- Darshan logs: the header and regions, rebuilt ---------------------------------------


def _regions(data):
    """[(key, offset, length)] of a little-endian log's name table ("names") and modules
    (their index), by offset."""
    name_off, name_len = struct.unpack_from("<QQ", data, 32)
    maps = struct.unpack_from("<128Q", data, 48)
    out = [("names", name_off, name_len)]
    out += [(k, maps[2 * k], maps[2 * k + 1]) for k in range(64) if maps[2 * k + 1]]
    return sorted(out, key=lambda r: r[1])


def _rebuild(data, module, edit):
    """The log with module ``module``'s region decompressed, edited and compressed again,
    the regions after it moved and the header's offsets and lengths set to match."""
    idx = darshanlog.MODULE_IDS.index(module)
    regions = _regions(data)
    out = bytearray(data[:regions[0][1]])
    for key, off, n in regions:
        blob = data[off:off + n]
        if key == idx:
            blob = zlib.compress(edit(bytearray(_inflate(blob))))
        new_off = len(out)
        out += blob
        at = 32 if key == "names" else 48 + 16 * key
        struct.pack_into("<QQ", out, at, new_off, len(blob))
    return bytes(out)


def _inflate(blob, comp=0):
    """A region's streams, back to back, decompressed (Darshan writes one per rank)."""
    return darshanlog.inflate(blob, comp, "region")


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _region(data, module):
    idx = darshanlog.MODULE_IDS.index(module)
    return next((off, n) for k, off, n in _regions(data) if k == idx)


def _truncate(data):
    return data[:len(data) * 2 // 3]


def _zero_header(data):
    return bytes(darshanlog.HEADER_BYTES) + data[darshanlog.HEADER_BYTES:]


def _bad_magic(data):
    return data[:8] + struct.pack("<q", 12345) + data[16:]


def _flip(module):
    def flip(data):
        off, n = _region(data, module)
        b = bytearray(data)
        b[off + n // 2] ^= 0x5A
        return bytes(b)
    return flip


def _foreign_rank(data):
    """A POSIX record claims rank 99 of a 2-rank job: its stream is sound, its content
    is not."""
    def edit(raw):
        struct.pack_into("<q", raw, 8, 99)
        return raw
    return _rebuild(data, "POSIX", edit)


def _negative_count(data):
    """POSIX_BYTES_READ of the first record set to -5: no count is below Darshan's -1."""
    from darshan.backend import cffi_backend as be
    col = be.counter_names("POSIX").index("POSIX_BYTES_READ")

    def edit(raw):
        struct.pack_into("<q", raw, 16 + 8 * col, -5)
        return raw
    return _rebuild(data, "POSIX", edit)


def _stretched_region(data):
    """The POSIX region 8 bytes longer than its records, in a sound stream."""
    return _rebuild(data, "POSIX", lambda raw: raw + bytes(8))


def _counters():
    if darshanlog.counter_reader() != "pydarshan":
        pytest.skip("PyDarshan (hpcio[analysis]) reads the counters these cases check")


CORRUPT_LOGS = {
    "truncated": (_truncate, "truncated ("),
    "zeroed header": (_zero_header, "not a Darshan 3 log"),
    "bad magic": (_bad_magic, "not a Darshan 3 log (bad magic number)"),
    "flipped byte in a compressed counter region": (_flip("POSIX"), "POSIX region: corrupt ("),
    "counter region whose checks fail": (_foreign_rank,
                                         "POSIX region: corrupt (a record of rank 99 in a "
                                         "job of 2)"),
}


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
@pytest.mark.hostile
@pytest.mark.parametrize("variant", list(CORRUPT_LOGS))
def test_a_corrupt_log_is_skipped_by_name_and_the_report_made(tmp_path, variant):
    """analyze on a run whose log is corrupt: one line naming the log, exit 1, the run's
    own figures still in the report, the input untouched."""
    _counters()
    corrupt, says = CORRUPT_LOGS[variant]
    bad, good = _copy(BAD, tmp_path / "in"), _copy(GOOD, tmp_path / "in")
    log = _log(bad)
    with open(log, "rb") as f:
        data = f.read()
    with open(log, "wb") as f:
        f.write(corrupt(data))
    before = _state(tmp_path / "in")
    out = tmp_path / "out"
    p = run_main(ANALYZE + [bad, good, "-o", out, "--report-formats", "json"])
    line = one_line(p, f"hpcio.analyze: {log}: ", rc=1, raw=True)
    assert says in line and line.endswith("; left out"), line
    with open(out / "summary.json") as f:
        doc = json.load(f)
    assert [r["run"] for r in doc["tables"]["table-b"]] == [GOOD]
    assert len(doc["tables"]["table-a"]) == 2
    assert _state(tmp_path / "in") == before


@pytest.mark.hostile
@pytest.mark.parametrize("corrupt, says", [
    (_flip("MPI-IO"), "MPI-IO region: corrupt ("),
    (_flip("DXT_POSIX"), "DXT_POSIX region: corrupt ("),
    (_negative_count, "POSIX region: corrupt (POSIX_BYTES_READ = -5 in record 0)"),
    (_stretched_region, "POSIX region: corrupt ("),
    (lambda d: d[:100], "truncated inside its header"),
], ids=["flipped MPI-IO", "flipped DXT", "negative count", "stretched region", "header cut"])
def test_every_region_is_checked(tmp_path, corrupt, says):
    _counters()
    src = os.path.join(LOGS, "coordinated-mpiio-np2.darshan")
    with open(src, "rb") as f:
        data = f.read()
    if b"DXT" in says.encode() and not any(
            k == darshanlog.MODULE_IDS.index("DXT_POSIX") for k, _, _ in _regions(data)):
        pytest.skip("this log has no DXT_POSIX region")
    p = tmp_path / "x.darshan"
    p.write_bytes(corrupt(data))
    with pytest.raises(darshanlog.HpcioError) as e:
        darshanlog.read_log(str(p))
    assert str(e.value).startswith(f"{p}: ") and says in str(e.value), str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.hostile
def test_a_rebuilt_but_sound_log_reads_as_the_original(tmp_path):
    """The corruptions above are of content, not of the rebuilding: an edit that changes
    nothing gives a log that reads exactly as the original."""
    _counters()
    src = os.path.join(LOGS, "coordinated-mpiio-np2.darshan")
    with open(src, "rb") as f:
        data = f.read()
    p = tmp_path / "same.darshan"
    p.write_bytes(_rebuild(data, "POSIX", lambda raw: raw))
    a, b = darshanlog.read_log(src), darshanlog.read_log(str(p))
    assert np.array_equal(a.counters["POSIX"].values, b.counters["POSIX"].values)
    assert np.array_equal(a.dxt, b.dxt) and a.names == b.names


@pytest.mark.hostile
def test_a_bzip2_log_is_read_and_its_corruption_found(tmp_path, capfd):
    """Darshan may compress with bzip2: every region re-compressed so reads the same; a
    flipped byte in one fails bzip2's check; a counter library that cannot read it says
    so in the one line, not on stderr."""
    import bz2
    src = os.path.join(LOGS, "coordinated-mpiio-np2.darshan")
    with open(src, "rb") as f:
        data = f.read()
    regions = _regions(data)
    out = bytearray(data[:darshanlog.HEADER_BYTES])
    out += bz2.compress(_inflate(data[darshanlog.HEADER_BYTES:regions[0][1]]))
    out[16] = 1
    for key, off, n in regions:
        blob = bz2.compress(_inflate(data[off:off + n]))
        at = 32 if key == "names" else 48 + 16 * key
        struct.pack_into("<QQ", out, at, len(out), len(blob))
        out += blob
    p = tmp_path / "bz.darshan"
    p.write_bytes(bytes(out))
    a = darshanlog.read_log(src, counters=False)
    b = darshanlog.read_log(str(p), counters=False)
    assert np.array_equal(a.dxt, b.dxt) and a.names == b.names and a.nprocs == b.nprocs
    assert a.start == b.start and a.exe == b.exe
    if darshanlog.counter_reader():
        capfd.readouterr()
        try:
            c = darshanlog.read_log(str(p))
        except darshanlog.HpcioError as e:  # a libdarshan-util built without bzip2
            assert str(e).startswith(f"{p}: ") and "\n" not in str(e)
        else:
            full = darshanlog.read_log(src)
            assert np.array_equal(c.counters["POSIX"].values, full.counters["POSIX"].values)
        assert capfd.readouterr().err == ""
    off, n = _region(bytes(out), "MPI-IO")
    out[off + n // 2] ^= 0x5A
    p.write_bytes(bytes(out))
    with pytest.raises(darshanlog.HpcioError, match=r"MPI-IO region: corrupt"):
        darshanlog.read_log(str(p), counters=False)


# --- run directories: each file wrong in its own way ----------------------------------------

# case: (file, edit(path), what the one line says after the path; None: the run is left out)
BAD_FILES = {
    "config ranks a string": ("config.yaml", lambda p: _edit_yaml(
        p, lambda d: d.update(ranks="two")), "ranks: expected an integer, got str 'two'"),
    "config ranks 10**9": ("config.yaml", lambda p: _edit_yaml(
        p, lambda d: d.update(ranks=1000000000)), "ranks: 1000000000 is out of range"),
    "config a list": ("config.yaml", lambda p: _edit_yaml(p, lambda d: [d]),
                      "(top level): expected a mapping, got list"),
    "config dataset a number": ("config.yaml", lambda p: _edit_yaml(
        p, lambda d: d.update(dataset=5)), "dataset: expected a mapping, got int 5; left out"),
    "summary cut_short a string": ("summary.json", lambda p: _edit_json(
        p, lambda d: d.update(cut_short="yes")),
        "cut_short: expected true or false, got str 'yes'; left out"),
    "summary a list": ("summary.json", lambda p: _edit_json(p, lambda d: [d]),
                       "(top level): expected a mapping, got list"),
    "rank json origin a string": ("rank-0.json", lambda p: _edit_json(
        p, lambda d: d.update(origin_unix="noon")),
        "origin_unix: expected a number, got str 'noon'; left out"),
    "rank json epochs a mapping": ("rank-0.json", lambda p: _edit_json(
        p, lambda d: d.update(epochs={})), "epochs: expected a list, got dict {}; left out"),
    "rank json counter a string": ("rank-1.json", lambda p: _edit_json(
        p, lambda d: d["epochs"][0]["counters"]["io"].update(rchar="many")),
        "epochs[0].counters.io.rchar: expected a number, got str 'many'; left out"),
    "rank json counter NaN": ("rank-1.json", lambda p: _edit_json(
        p, lambda d: d["epochs"][0]["counters"]["rusage"].update(minflt=float("nan"))),
        "epochs[0].counters.rusage.minflt: nan is not a measured value (NaN/inf); left out"),
    "rank json nested too deeply": ("rank-0.json", lambda p: _write(
        p, "[" * 100000 + "]" * 100000), "unreadable (nested too deeply)"),
    "rank npz strings": ("rank-0.npz", lambda p: _edit_npz(
        p, lambda a: a.update(wall=np.array(["a"] * 24))), "wall: dtype <U1 is not numeric"),
    "rank npz 2-D": ("rank-0.npz", lambda p: _edit_npz(
        p, lambda a: a.update(wall=np.zeros((24, 2)))), "wall: shape (24, 2) is not one column"),
    "rank npz huge header": ("rank-0.npz", lambda p: _edit_npz(p, _huge_header),
                             "wall: its header claims 8,000,000,000,000 bytes, the file "
                             "holds 8"),
    "rank npz NaN": ("rank-1.npz", lambda p: _edit_npz(p, _nan),
                     "fetch: 1 NaN/inf value(s), the first at row 3: not measured values"),
    "rank npz not a zip": ("rank-1.npz", lambda p: _write(p, "hello"),
                           "not an npz file"),
    "rank npz negative wall": ("rank-0.npz", lambda p: _edit_npz(
        p, lambda a: a.update(wall=-a["wall"])), "wall: negative value"),
    "env data a string": ("env.json", lambda p: _edit_json(
        p, lambda d: d.update(data="ext4")), "data: expected a mapping, got str 'ext4'; left out"),
}


@pytest.mark.hostile
@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_wrong_file_is_one_line_naming_it_and_the_field(tmp_path, case):
    """load + analyse in process: exactly one problem line, naming the file and the
    field; the analysis made from the rest without an exception."""
    name, edit, says = BAD_FILES[case]
    bad, good = _copy(BAD, tmp_path), _copy(GOOD, tmp_path)
    path = os.path.join(bad, name)
    edit(path)
    runs, problems, notes = load([bad, good])
    lines = problems + [p for r in runs for p in r.problems]
    mine = [ln for ln in lines if ln.startswith(path + ":")]
    assert len(mine) == 1, lines
    assert mine[0].startswith(f"{path}: {says}"), mine[0]
    assert [ln for ln in lines if ln not in mine] == [], lines
    a = analyse(runs, problems, notes)
    assert good in [r.path for r in a.runs]
    if case.startswith("config") and "left out" not in says:
        assert bad not in [r.path for r in a.runs]


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
@pytest.mark.hostile
def test_wrong_files_from_the_command_line_one_line_each(tmp_path):
    """The same through ``python -m hpcio.analyze``: exit 1, one line per bad file, no
    traceback, the report made."""
    cases = ["config ranks 10**9", "summary a list", "rank json counter a string",
             "rank npz huge header", "rank npz NaN"]
    dirs = []
    for k, case in enumerate(cases):
        d = _copy(BAD, tmp_path / f"in{k}")
        name, edit, _ = BAD_FILES[case]
        edit(os.path.join(d, name))
        dirs.append(d)
    good = _copy(GOOD, tmp_path / "good")
    t = time.monotonic()
    p = run_main(ANALYZE + dirs + [good, "-o", tmp_path / "out", "--report-formats", "md"])
    assert time.monotonic() - t < 120
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    lines = _lines(p.stderr)
    assert len(lines) == len(cases), lines
    for d, case, line in zip(dirs, cases, lines):
        name, _, says = BAD_FILES[case]
        assert line.startswith(f"hpcio.analyze: {os.path.join(d, name)}: {says}"), line
    assert (tmp_path / "out" / "report.md").exists()


@pytest.mark.hostile
def test_a_sweep_json_of_wrong_types(tmp_path):
    """A sweep.json whose runs is no list: the sweep left out in one line; one entry of
    the wrong type: that run left out, named, the others analysed."""
    sweep = tmp_path / "sweep"
    os.makedirs(sweep / "runs")
    runs = [_copy(n, sweep / "runs") for n in (BAD, GOOD)]
    entries = [{"point": {"reader": "naive", "ranks": 2}, "repeat": "first",
                "status": "done", "run_dir": runs[0]},
               {"point": {"reader": "coordinated", "ranks": 2}, "repeat": 0,
                "status": "done", "run_dir": runs[1]}]
    (sweep / "sweep.json").write_text(json.dumps({"runs": entries}))
    got, problems, _ = load([str(sweep)])
    assert [r.path for r in got] == [runs[1]]
    assert problems == [f"{sweep / 'sweep.json'}: runs[0].repeat: expected an integer, got "
                        f"str 'first'; left out (those runs are not analysed)"]
    (sweep / "sweep.json").write_text(json.dumps({"runs": "all of them"}))
    got, problems, _ = load([str(sweep)])
    assert got == [] and problems == [
        f"{sweep / 'sweep.json'}: runs: expected a list, got str 'all of them'; this sweep "
        f"is left out"]


# --- bounded reads ---------------------------------------------------------------------------


def _fifo_unblocker(path, stop):
    """If a reader ever blocks on the FIFO, open it for writing so the test ends (and
    fails) instead of hanging."""
    def run():
        if not stop.wait(60):
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["rank-1.npz", "rank-1.json", "summary.json", "env.json"])
def test_a_fifo_in_place_of_a_file_does_not_hang(tmp_path, name):
    bad, good = _copy(BAD, tmp_path), _copy(GOOD, tmp_path)
    path = os.path.join(bad, name)
    os.remove(path)
    os.mkfifo(path)
    stop = threading.Event()
    _fifo_unblocker(path, stop)
    t = time.monotonic()
    runs, problems, _ = load([bad, good])
    stop.set()
    assert time.monotonic() - t < 30
    lines = problems + [p for r in runs for p in r.problems]
    assert f"{path}: not a regular file (a FIFO)" in [ln.split(";")[0] for ln in lines]


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
@pytest.mark.hostile
def test_a_fifo_rank_file_does_not_hang_either_command(tmp_path):
    run = _copy(BAD, tmp_path)
    os.remove(os.path.join(run, "summary.json"))
    os.remove(os.path.join(run, "summary.txt"))
    os.remove(os.path.join(run, "rank-1.npz"))
    os.mkfifo(os.path.join(run, "rank-1.npz"))
    stop = threading.Event()  # in-process: a command blocked on the FIFO fails, not hangs
    _fifo_unblocker(os.path.join(run, "rank-1.npz"), stop)
    try:
        p = run_main(SUMMARIZE + [run])
        assert one_line(p, rc=1, raw=True) == \
            f"hpcio.results: {run}/rank-1.npz: not a regular file (a FIFO); rank 1 is left out"
        assert "rank 1: unusable (see below)" in p.stdout
        with open(os.path.join(run, "summary.json")) as f:
            s = json.load(f)
        assert s["ranks_missing"] == [1] and s["ranks_summarized"] == [0]
        p = run_main(ANALYZE + [run, "-o", tmp_path / "out", "--report-formats", "md"])
        assert p.returncode == 1 and "Traceback" not in p.stderr
        assert f"{run}/rank-1.npz: not a regular file (a FIFO)" in p.stderr
    finally:
        stop.set()


@pytest.mark.hostile
def test_a_billion_ranks_neither_hangs_nor_allocates(tmp_path):
    run = _copy(BAD, tmp_path)
    _edit_yaml(os.path.join(run, "config.yaml"), lambda d: d.update(ranks=1000000000))
    os.remove(os.path.join(run, "summary.json"))
    t = time.monotonic()
    p = run_main(SUMMARIZE + [run])
    assert time.monotonic() - t < 30
    assert one_line(p, rc=2, raw=True) == (
        f"hpcio.results: error: {run}/config.yaml: ranks: 1000000000 is out of range "
        f"(1 to {schema.MAX_RANKS:,})")
    p = run_main(ANALYZE + [run, "-o", tmp_path / "out"])
    assert p.returncode == 2 and "out of range" in p.stderr and "Traceback" not in p.stderr


@pytest.mark.hostile
def test_many_ranks_missing_are_one_line(tmp_path):
    """A config that claims 100,000 ranks where 2 left files: one line for the missing
    ones, quickly."""
    run = _copy(BAD, tmp_path)
    _edit_yaml(os.path.join(run, "config.yaml"), lambda d: d.update(ranks=100000))
    os.remove(os.path.join(run, "summary.json"))
    os.remove(os.path.join(run, "summary.txt"))
    t = time.monotonic()
    p = run_main(SUMMARIZE + [run])
    assert time.monotonic() - t < 30 and p.returncode == 0, p.stderr
    assert "  ranks 2-99999: missing (no rank-R.npz)" in p.stdout
    assert len(p.stdout.splitlines()) < 40


@pytest.mark.hostile
def test_an_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    """The size is checked from fstat before a byte is read (the limit lowered here, the
    file sparse)."""
    p = tmp_path / "env.json"
    with open(p, "wb") as f:
        f.truncate(1 << 30)
    monkeypatch.setitem(schema.LIMITS, "json", 1 << 20)
    with pytest.raises(schema.Invalid, match=r"1,073,741,824 bytes, more than the 1,048,576"):
        schema.load(str(p), "env")


# --- outputs: never into an input, never over a stranger's file ----------------------------


@pytest.mark.hostile
@pytest.mark.parametrize("where", ["run", "run/darshan", "parent"])
def test_analyze_never_writes_into_its_input(tmp_path, where):
    run = _copy(BAD, tmp_path / "runs")
    out = {"run": run, "run/darshan": os.path.join(run, "darshan"),
           "parent": str(tmp_path / "runs")}[where]
    inputs = [str(tmp_path / "runs")] if where == "parent" else [run]
    before = _state(tmp_path)
    p = run_main(ANALYZE + inputs + ["-o", out])
    assert p.returncode == 2 and len(_lines(p.stderr)) == 1, p.stderr
    assert _lines(p.stderr)[0].startswith(f"hpcio.analyze: error: -o {out}: is ")
    assert "the report never goes into what it reads" in p.stderr
    assert _state(tmp_path) == before


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
@pytest.mark.hostile
def test_analyze_never_writes_over_a_strangers_files(tmp_path):
    run = _copy(BAD, tmp_path / "runs")
    out = tmp_path / "mine"
    out.mkdir()
    (out / "summary.json").write_text("my notes\n")
    p = run_main(ANALYZE + [run, "-o", out])
    assert p.returncode == 2 and _lines(p.stderr) == [
        f"hpcio.analyze: error: -o {out}: holds files hpcio.analyze did not write "
        f"(summary.json); give a new or empty directory, or a report directory of an "
        f"earlier analysis"]
    assert os.listdir(out) == ["summary.json"]
    assert (out / "summary.json").read_text() == "my notes\n"
    # its own report directory it may write again
    p = run_main(ANALYZE + [run, "-o", tmp_path / "report", "--report-formats", "json"])
    assert p.returncode == 0, p.stderr
    p = run_main(ANALYZE + [run, "-o", tmp_path / "report", "--report-formats", "json"])
    assert p.returncode == 0, p.stderr


@pytest.mark.hostile
@pytest.mark.parametrize("name", ["summary.txt", "summary.json"])
def test_summarize_never_writes_over_a_users_summary(tmp_path, name):
    """A directory with a config.yaml of its own and the user's summary file: refused in
    one line, the file as it was."""
    d = tmp_path / "mine"
    d.mkdir()
    (d / "config.yaml").write_text("ranks: 2\nreader: mine\n")
    (d / name).write_text("the user's own words\n")
    before = _state(d)
    p = run_main(SUMMARIZE + [d])
    assert p.returncode == 2 and _lines(p.stderr) == [
        f"hpcio.results: error: {d / name}: exists and was not written by hpcio.results; "
        f"not overwritten (move it away to summarize this run)"]
    assert _state(d) == before


@pytest.mark.hostile
def test_summarize_writes_again_over_its_own_summary(tmp_path):
    """What hpcio.results wrote it may replace: summarize twice."""
    run = _copy(BAD, tmp_path)
    os.remove(os.path.join(run, "summary.json"))
    os.remove(os.path.join(run, "summary.txt"))
    for _ in range(2):
        p = run_main(SUMMARIZE + [run])
        assert p.returncode == 0, p.stderr
    with open(os.path.join(run, "summary.txt")) as f:
        assert f.read().startswith("hpcio.results: ")


@pytest.mark.hostile
def test_summarize_flags_a_nan_rank_instead_of_averaging_it(tmp_path):
    run = _copy(BAD, tmp_path)
    os.remove(os.path.join(run, "summary.json"))
    os.remove(os.path.join(run, "summary.txt"))
    _edit_npz(os.path.join(run, "rank-1.npz"), _nan)
    p = run_main(SUMMARIZE + [run])
    assert p.returncode == 1 and _lines(p.stderr) == [
        f"hpcio.results: {run}/rank-1.npz: fetch: 1 NaN/inf value(s), the first at row 3: "
        f"not measured values; rank 1 is left out"]
    with open(os.path.join(run, "summary.json")) as f:
        s = json.load(f)
    assert s["ranks_summarized"] == [0] and s["complete"] is False
    assert s["metrics"]["records"] == int(_npz_members(os.path.join(run, "rank-0.npz"))
                                          ["records"].sum())


@pytest.mark.hostile
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e308", "fast"])
def test_storage_bandwidth_out_of_range_is_one_line(tmp_path, value):
    p = run_main(ANALYZE + [tmp_path, "--storage-mibs", value, "-o", tmp_path / "r"])
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and "--storage-mibs" in lines[-1], p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "r").exists()
