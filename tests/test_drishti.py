"""Drishti (drishti-io) run by ``python -m hpcio.analyze`` on the shared Darshan fixtures:
its verdicts parsed into rows beside hpcio's findings, and each way it can give none (a
log it fails on, a timeout, a Python without drishti-io) one line."""

import glob
import json
import os
import struct
import sys
import zlib
from importlib.metadata import version

import pytest

from common.fixtures import copy_run
from common.launch import launch
from hpcio.analyze import main
from hpcio.errors import HpcioError
from hpcio.explain.drishti import DrishtiMissing, verdicts
from hpcio.explain.report import analyse
from hpcio.explain.runs import load
from hpcio.measure.darshanlog import HEADER_BYTES, MAGIC, inflate

from common.fixtures import FIXTURES, LOGS, RUNS  # noqa: E402

pytest.importorskip("drishti", reason="drishti-io is not installed: pip install hpcio[analysis]")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _fixtures():
    if not os.path.isdir(RUNS) or not os.path.isdir(LOGS):
        pytest.skip(f"no Darshan fixtures at {FIXTURES}")


def _log(run_dir):
    return glob.glob(os.path.join(run_dir, "darshan", "*.darshan"))[0]


def _copy(name, dest):
    return copy_run(RUNS, name, dest)


def _set_hints(path, hints):
    """The log as Darshan writes it under DARSHAN_LOGHINTS=hints: the job record's ``h=``
    line replaced, the regions after it moved by the record's new compressed length."""
    with open(path, "rb") as f:
        data = f.read()
    order = "<" if struct.unpack_from("<q", data, 8)[0] == MAGIC else ">"
    assert data[16] == 0  # zlib
    name_off = struct.unpack_from(order + "Q", data, 32)[0]
    job = bytearray(inflate(data[HEADER_BYTES:name_off], 0, "job"))
    meta = bytes(job[56:56 + 1024]).split(b"\0")[0].decode()
    lines = [ln if not ln.startswith("h=") else f"h={hints}" for ln in meta.split("\n")]
    new = "\n".join(lines).encode()
    job[56:56 + 1024] = new + b"\0" * (1024 - len(new))
    packed = zlib.compress(bytes(job))
    shift = HEADER_BYTES + len(packed) - name_off
    head = bytearray(data[:HEADER_BYTES])
    struct.pack_into(order + "Q", head, 32, name_off + shift)
    for k in range(64):
        off, n = struct.unpack_from(order + "QQ", head, 48 + 16 * k)
        if n:
            struct.pack_into(order + "Q", head, 48 + 16 * k, off + shift)
    with open(path, "wb") as f:
        f.write(bytes(head) + packed + data[name_off:])


@pytest.mark.mpi  # runs drishti
def test_naive_hdf5_logs_small_and_misaligned_reads():
    """Drishti on the naive HDF5 log at 2 ranks (one h5py read per 16 KiB record): small
    reads and misaligned file requests, both HIGH, the shared file named; on the naive
    LMDB log (reads are page faults of a memory map) it sees no small reads at all."""
    v, rows = verdicts(os.path.join(LOGS, "naive-hdf5-np2.darshan"))
    assert v == version("drishti-io")
    by = {r["code"]: r for r in rows}
    assert by["P05"]["level"] == "HIGH"
    assert by["P05"]["message"] == ("Application issues a high number (2160) of small read "
                                    "requests (i.e., < 1MB) which represents 100.00% of all "
                                    "read requests")
    assert by["P05"]["details"] == ['2064 (95.56%) small read requests are to "train.h5"']
    assert by["P05"]["recommendations"][0] == ("Consider buffering read operations into "
                                               "larger more contiguous ones")
    assert by["P08"]["level"] == "HIGH"
    assert "(97.59%) of misaligned file requests" in by["P08"]["message"]
    assert by["M01"]["level"] == "WARN" and by["P02"]["level"] == "INFO"
    assert by["P12"]["level"] == "OK"
    _, lmdb = verdicts(os.path.join(LOGS, "naive-lmdb-np2.darshan"))
    assert "P05" not in {r["code"] for r in lmdb} and lmdb


@pytest.mark.mpi  # runs drishti
def test_report_puts_drishtis_verdicts_beside_the_findings(tmp_path):
    """The naive HDF5 run: Drishti's rows (most severe first) in report.md, report.html and
    summary.json, after hpcio's findings; its small-read count is hpcio's."""
    out = tmp_path / "out"
    run = os.path.join(RUNS, "local-mnist-hdf5-naive-n2")
    assert main([run, "-o", str(out), "--report-formats", "md,html,json"]) == 0
    md = (out / "report.md").read_text()
    part = md[md.index("## Drishti's verdicts"):md.index("## A:")]
    assert md.index("## Findings") < md.index("## Drishti's verdicts")
    assert (f"Drishti {version('drishti-io')} (drishti-io) on each run's Darshan log"
            in part)
    assert ("| local-mnist-hdf5-naive-n2 | HIGH | P05 | Application issues a high number "
            "(12268) of small read requests (i.e., < 1MB) which represents 100.00% of all "
            "read requests; 12248 (99.84%) small read requests are to \"shard-00000.h5\" |"
            in part)
    levels = [ln.split(" | ")[1] for ln in part.splitlines() if ln.startswith("| local-")]
    assert levels == ["HIGH"] * 3 + ["WARN", "INFO", "INFO", "OK"]
    assert "12,268 reads under 1 MiB" in md[md.index("## Findings"):]  # hpcio's own count
    doc = json.loads((out / "summary.json").read_text())
    d = doc["drishti"]
    assert d["version"] == version("drishti-io") and d["not_given"] == []
    p08 = [r for r in d["verdicts"] if r["code"] == "P08"]
    assert p08 == [{"run": "local-mnist-hdf5-naive-n2", "log": _log(run), "level": "HIGH",
                    "code": "P08", "message": "Application issues a high number (99.46%) of "
                                              "misaligned file requests",
                    "details": [], "recommendations": [
                        "Consider aligning the requests to the file system block "
                        "boundaries"]}]
    page = (out / "report.html").read_text()
    assert "<h2>Drishti&#x27;s verdicts</h2>" in page and "<td>P05</td>" in page


def test_a_log_drishti_fails_on_is_one_line(tmp_path):
    """The coordinated run's log as written under DARSHAN_LOGHINTS with a trailing ';'
    (Darshan skips the empty hint; Drishti's own CLI fails on it): one line in the report
    naming the log, the naive run's verdicts and hpcio's tables for both still there."""
    naive = _copy("pfs-inet-lmdb-naive-n2", tmp_path / "in")
    coord = _copy("pfs-inet-lmdb-coordinated-n2", tmp_path / "in")
    log = _log(coord)
    _set_hints(log, "romio_no_indep_rw=true;cb_nodes=4;")
    cli = launch([os.path.join(os.path.dirname(sys.executable), "drishti"), log],
                         cwd=tmp_path, timeout=120)
    assert cli.returncode != 0 and "ValueError" in cli.stderr
    out = tmp_path / "out"
    assert main([naive, coord, "-o", str(out), "--report-formats", "md,json"]) == 0
    md = (out / "report.md").read_text()
    part = md[md.index("## Drishti's verdicts"):md.index("## A:")]
    line = (f"Drishti on {log}: failed (ValueError: not enough values to unpack (expected "
            f"2, got 1))")
    assert f"- {line}\n" in part and part.count("\n- ") == 1
    assert "| pfs-inet-lmdb-naive-n2 | HIGH | P08 |" in part
    assert "| pfs-inet-lmdb-coordinated-n2 |" not in part
    doc = json.loads((out / "summary.json").read_text())
    assert doc["drishti"]["not_given"] == [line]
    assert {r["run"] for r in doc["tables"]["table-b"]} == {"pfs-inet-lmdb-naive-n2",
                                                           "pfs-inet-lmdb-coordinated-n2"}


def test_timeout_and_missing_drishti_are_one_line(tmp_path):
    """Past the timeout, Drishti is stopped; a Python without drishti-io (this venv's base
    interpreter) is said once, and analyse without Drishti says it was not asked."""
    log = os.path.join(LOGS, "naive-hdf5-np1.darshan")
    with pytest.raises(HpcioError, match=r"^Drishti on .*naive-hdf5-np1.darshan: still "
                                         r"running after 0.01 s; stopped$"):
        verdicts(log, timeout=0.01)
    base = getattr(sys, "_base_executable", None)
    if not base or launch([base, "-c", "import drishti"], text=False).returncode == 0:
        pytest.skip("no Python without drishti-io beside this one")
    with pytest.raises(DrishtiMissing, match=r"^Drishti not run: .* has no module \w+ "
                                             r"\(pip install 'hpcio\[analysis\]' installs "
                                             r"drishti-io\)$"):
        verdicts(log, python=base)
    runs, _, _ = load([os.path.join(RUNS, "local-mnist-hdf5-naive-n2")])
    a = analyse(runs)
    assert a.drishti == [] and a.drishti_said == ["Drishti not run (--no-drishti)."]
