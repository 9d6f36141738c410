"""``python -m hpcio.analyze``: the real run directories and Darshan logs in
tests/fixtures/hpcio-runs, a sweep made here at 1, 2
and 3 ranks, every kind of bad input, and the scaling model's fit and check."""

import glob
import itertools
import json
import os
import shutil

import numpy as np
import pytest
import yaml

from common.fixtures import RUNS
from common.datasets import make_dataset
from common.inproc import run_main
from common.mpi import run_py
from common.launch import launch
from hpcio.explain import model
from hpcio.explain.report import analyse
from hpcio.explain.runs import load, load_run
from hpcio.measure import darshanlog
from hpcio.measure.darshanlog import find_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PFS = [os.path.join(RUNS, f"pfs-inet-lmdb-{r}-n{n}") for r in ("naive", "coordinated")
       for n in (1, 2, 4)]
ANALYZE = ["-m", "hpcio.analyze"]


def _fixtures():
    if not os.path.isdir(RUNS):
        pytest.skip(f"no fixture runs at {RUNS}")


def _counters():
    """Darshan's counters need PyDarshan or darshan-parser."""
    if darshanlog.counter_reader() is None:
        pytest.skip("neither PyDarshan nor darshan-parser: install hpcio[analysis]")


def _tree(path):
    """Every file under ``path`` with its size and mtime: to show nothing changed."""
    out = {}
    for d, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(d, f))
            out[os.path.join(d, f)] = (st.st_size, st.st_mtime_ns)
    return out


def _copy(names, dest):
    """Writable copies of fixture runs (their darshan/ is read-only in shared/)."""
    out = []
    for n in names:
        d = os.path.join(str(dest), os.path.basename(n))
        shutil.copytree(os.path.join(RUNS, n), d)
        for p, _, files in os.walk(d):
            os.chmod(p, 0o755)
            for f in files:
                os.chmod(os.path.join(p, f), 0o644)
        out.append(d)
    return out


def _log(run_dir):
    return glob.glob(os.path.join(run_dir, "darshan", "*.darshan"))[0]


def _errors(stderr):
    return [ln for ln in stderr.splitlines() if ln.strip()]


# --- the model -------------------------------------------------------------------------


def test_nnls_is_the_best_nonnegative_fit():
    """Lawson-Hanson against every active set, with a free first column."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(2, 8))
        A = rng.normal(size=(m, 4))
        A[:, 0] = 1
        y = rng.normal(size=m)
        w = model.nnls(A, y, free=[0])
        assert (w[1:] >= 0).all()
        best = np.inf
        for k in range(5):
            for S in itertools.combinations(range(4), k):
                v = np.zeros(4)
                if S:
                    v[list(S)] = np.linalg.lstsq(A[:, list(S)], y, rcond=None)[0]
                if (v[1:] >= -1e-12).all():
                    best = min(best, np.linalg.norm(A @ v - y))
        assert np.linalg.norm(A @ w - y) <= best + 1e-8


def test_model_recovers_its_terms_and_predicts_the_left_out_rank_count():
    b1, bagg = 100e6, 400e6
    x = 1e6
    truth = np.array([0.002, 0.5, 0.0003, 0.0])  # fixed, bandwidth share, grows with P
    P = [1, 2, 4, 8, 16, 32]  # the storage saturates past P = 4
    stall = model.design(P, x, b1, bagg) @ truth
    m = model.scaling(list(zip(P, stall)), x, (b1, bagg), (b1, bagg), 0.02, 0.001)
    assert m["fitted"] and np.allclose(list(m["coef"].values()), truth, atol=1e-6)
    assert m["dominant"] == "bandwidth share"  # at P=32: 0.5 * 1e6 * (32/4e8 - 1/1e8)
    assert abs(m["loo"]["error_s"]) < 1e-6 and m["loo"]["fitted_on"] == [1, 2, 4, 8, 16]
    assert m["stall_exceeds_compute_at"] == 16  # 2 ms + 15 ms + 4.8 ms > 20 ms
    # with the storage's limit given, no prediction is below what the storage can feed
    m = model.scaling(list(zip(P, stall)), x, (b1, bagg), (b1, bagg), 0.02, 0.001,
                      bounded=True)
    p1024 = [p for p in m["predict"] if p["P"] == 1024][0]
    assert p1024["stall_s"] >= 1024 * x / bagg - 0.021 - 1e-9 and p1024["storage_bound"]


def test_a_term_seen_at_one_rank_count_is_not_fitted():
    """From P = 1 and 2, log2 P is non-zero at one point only: fitting it would turn that
    point's noise into a slope."""
    coef = model.fit([1, 2], [0.030, 0.020], 1e6, 1e8, 4e8)
    assert coef[3] == 0 and coef[1] == 0
    assert model.predict(coef, [4], 1e6, 1e8, 4e8)[0] == pytest.approx(0.025)


def test_too_few_rank_counts_are_said_not_fitted():
    m = model.scaling([(1, 0.01), (2, 0.02), (2, 0.021)], 1e6, (1e8, 4e8), (1e8, 4e8),
                      0.02, 0.0)
    assert not m["fitted"] and "2 rank count(s) (1, 2); the model needs 3" in m["why"]
    assert model.loo(np.array([1, 2, 2.0]), np.array([0.01, 0.02, 0.02]), 1e6,
                     (1e8, 4e8)) is None


# --- reading Darshan logs --------------------------------------------------------------


def test_log_regions_match_darshan_parser():
    """Job, names and DXT read from the log itself agree with darshan-dxt-parser's text."""
    _fixtures()
    parser = find_parser()
    if parser is None:
        pytest.skip("no darshan-parser: scripts/darshan-local.sh build (or HPCIO_DARSHAN=LIB) "
                    "puts one beside libdarshan.so")
    dxt_parser = os.path.join(os.path.dirname(parser), "darshan-dxt-parser")
    path = _log(os.path.join(RUNS, "pfs-inet-lmdb-coordinated-n2"))
    log = darshanlog.read_log(path)
    text = launch([dxt_parser, path], check=True).stdout
    segs = [ln.split() for ln in text.splitlines() if ln.startswith(" X_")]
    assert len(log.dxt) == len(segs) == 714
    assert sorted(float(s[7]) for s in segs) == pytest.approx(sorted(log.dxt["end"]),
                                                               abs=1e-4)
    assert int(log.start) == int(next(ln.split(":")[1] for ln in text.splitlines()
                                      if ln.startswith("# start_time:")))
    assert log.nprocs == 2 and "--reader coordinated" in log.exe
    assert log.lib_version == "3.5.0" and log.partial == []


@pytest.mark.mpi  # darshan-parser, where it is built (.darshan/), is a process of its own
def test_counter_readers_agree():
    """PyDarshan and darshan-parser, where both are here, give the same counters."""
    _fixtures()
    _counters()
    have = [n for n, (ok, _) in darshanlog.COUNTER_READERS.items() if ok()]
    path = _log(os.path.join(RUNS, "local-mnist-hdf5-naive-n2"))
    logs = [darshanlog.read_log(path, reader=n) for n in have]
    for log in logs:
        px = log.counters["POSIX"]
        assert px.get("POSIX_BYTES_READ").sum() == 800475112
        assert sorted(set(px.rank.tolist())) == [0, 1]
    for a, b in zip(logs, logs[1:]):  # darshan-parser prints seconds to 6 decimals
        for name in ("POSIX_READS", "POSIX_F_READ_TIME", "POSIX_SEQ_READS"):
            assert sorted(a.counters["POSIX"].get(name)) == \
                pytest.approx(sorted(b.counters["POSIX"].get(name)), abs=1e-6)


# --- the fixture sweep -----------------------------------------------------------------


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
def test_fixture_sweep_answers_why_naive_stalls(tmp_path):
    """GlusterFS, 500 us a request, naive and coordinated at 1, 2 and 4 ranks: the report
    explains the naive reader's stall with hpcio's and Darshan's numbers, and checks its
    model; nothing is written outside -o."""
    _fixtures()
    _counters()
    before = _tree(RUNS)
    out = tmp_path / "report"
    p = run_main(ANALYZE + PFS + ["-o", out])
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert "leave-one-out at P=4" in p.stdout
    assert _tree(RUNS) == before
    names = sorted(os.listdir(out))
    for f in ("report.html", "report.md", "summary.json", "table-a.csv", "table-b.csv",
              "table-c.csv", "stall-vs-ranks.png", "breakdown.png", "heatmap.png",
              "bandwidth.png", "os-counters.png"):
        assert f in names
    assert any(n.startswith("dxt-steps-") for n in names)
    with open(out / "summary.json") as f:
        doc = json.load(f)
    a = {(r["reader"], r["ranks"]): r for r in doc["tables"]["table-a"]}
    b = {(r["reader"], r["ranks"]): r for r in doc["tables"]["table-b"]}
    for n in (1, 2, 4):
        assert a["naive", n]["stall_pct_steady"] > 30
        assert a["coordinated", n]["stall_pct_steady"] < 2
        assert b["naive", n]["coverage"] < 0.01          # memory-mapped: invisible
        assert 0.99 < b["coordinated", n]["coverage"] < 1.02
        assert b["coordinated", n]["mpiio_bytes_rank"] > 4e7
    fired = {(f["run"], f["rule"]) for f in doc["findings"]}
    assert ("pfs-inet-lmdb-naive-n2", "coverage") in fired
    assert ("pfs-inet-lmdb-naive-n2", "storage") in fired
    assert not any(r.startswith("pfs-inet-lmdb-coordinated") and rule in ("storage", "AU")
                   for r, rule in fired)
    for reader in ("naive", "coordinated"):
        m = doc["models"][reader]
        assert m["fitted"] and m["ranks"] == [1, 2, 4]
        assert m["loo"]["P"] == 4 and m["loo"]["fitted_on"] == [1, 2]
    assert abs(doc["models"]["naive"]["loo"]["error_s"]) < 0.01          # 4.5 of 20.6 ms
    assert abs(doc["models"]["coordinated"]["loo"]["error_s"]) < 0.001   # 0.02 of 0.09 ms
    why = " ".join(doc["answers"])
    assert len(doc["answers"]) == 3
    assert "Darshan saw 0.1% of the" in why and "page faults on a memory map" in why
    assert "MPI-IO reads" in why and "naive waited 18.5 ms per step" in why
    # over every step the coordinated reader's start-up outweighs its steady state at 4
    # ranks: the heading claims neither reader stalls more everywhere
    assert "coordinated stalls more than naive: 50.7% against 42.5%" in doc["answers"][2]
    assert "naive stalls more than coordinated: 36.1% against 0.4%" in doc["answers"][2]
    with open(out / "report.md") as f:
        md = f.read()
    assert "## Which reader stalls more: naive or coordinated" in md
    assert "Why naive stalls" not in md and "Check (leave-one-out)" in md
    with open(out / "report.html") as f:
        page = f.read()
    assert page.count("data:image/png;base64,") >= 6 and 'src="http' not in page


def test_hdf5_sieve_buffer_is_read_amplification():
    _fixtures()
    _counters()
    runs, _, _ = load([os.path.join(RUNS, "local-mnist-hdf5-naive-n2")])
    a = analyse(runs)
    d = a.figures[runs[0].path]["darshan"]
    assert d["coverage"] > 50  # the 64 KiB sieve buffer per 784-byte record
    amp = [f for f in a.findings if f.rule == "read amplification"]
    assert amp and f"{d['coverage']:.1f}x the bytes delivered" in amp[0].what
    assert not a.models["naive"]["fitted"]  # one rank count
    assert "needs 3" in a.models["naive"]["why"]


def test_dxt_reads_split_into_exposed_and_overlapped():
    """The coordinated reader's reads at 4 ranks: in the first step's wait (start-up) or
    overlapping compute, none in a later step's wait."""
    _fixtures()
    run = load_run(os.path.join(RUNS, "pfs-inet-lmdb-coordinated-n4"))
    from hpcio.explain.tables import exposure
    e, o, outside = exposure(run, run.logs[0])
    assert e.shape == o.shape == (4, 24)
    assert e[:, 0].sum() > 0.3 and e[:, 1:].sum() < 0.01 and o.sum() > 0.02
    io = (run.logs[0].dxt["end"] - run.logs[0].dxt["start"])[
        ~run.logs[0].dxt["write"] & (run.logs[0].dxt["module"] == 0)
        & np.isin(run.logs[0].dxt["id"], run.logs[0].file_ids(run.data_path))].sum()
    assert e.sum() + o.sum() + outside == pytest.approx(io)


def test_dxt_alignment_follows_each_ranks_clock(tmp_path):
    """Ranks 2 and 3 moved to a node whose clock is 5 s ahead (their step origins and
    MPI_Init stamps read 5 s later, the log's start is still the smallest start): the
    stamps put each rank's reads where they were; the log's start alone would not."""
    _fixtures()
    base = load_run(os.path.join(RUNS, "pfs-inet-lmdb-coordinated-n4"))
    from hpcio.explain.tables import dxt_shifts, exposure
    e0, o0, out0 = exposure(base, base.logs[0])
    (moved,) = _copy(["pfs-inet-lmdb-coordinated-n4"], tmp_path)
    start = base.logs[0].start
    for r in range(4):
        path = os.path.join(moved, f"rank-{r}.json")
        with open(path) as f:
            info = json.load(f)
        ahead = 5.0 if r >= 2 else 0.0
        info["origin_unix"] += ahead
        info["mpi_init_unix"] = start + 0.002 + ahead
        info["clock"] = {"offset_s": ahead, "rtt_s": 1e-4}
        with open(path, "w") as f:
            json.dump(info, f)
    run = load_run(moved)
    assert list(dxt_shifts(run, run.logs[0]) - start) == pytest.approx([0, 0, 5, 5])
    e, o, out = exposure(run, run.logs[0])
    assert e == pytest.approx(e0) and o == pytest.approx(o0) and out == pytest.approx(out0)
    for r in (2, 3):  # without the stamps: the log's start for every rank
        with open(os.path.join(moved, f"rank-{r}.json")) as f:
            info = json.load(f)
        info.pop("mpi_init_unix")
        with open(os.path.join(moved, f"rank-{r}.json"), "w") as f:
            json.dump(info, f)
    e1, _, out1 = exposure(load_run(moved), run.logs[0])
    assert e1[2:].sum() < 0.5 * e0[2:].sum() and out1 > out0


# --- bad input -------------------------------------------------------------------------


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
def test_bad_logs_are_one_line_each_and_the_report_is_made(tmp_path):
    """A truncated log, a file that is no Darshan log, another run's log and a traced run
    without its log: one line each naming the file, exit 1, the report from the rest."""
    _fixtures()
    _counters()
    cut, junk, other, gone, good = _copy(
        ["pfs-inet-lmdb-naive-n1", "pfs-inet-lmdb-naive-n2", "pfs-inet-lmdb-naive-n4",
         "pfs-inet-lmdb-coordinated-n1", "pfs-inet-lmdb-coordinated-n2"], tmp_path / "in")
    log = _log(cut)
    size = os.path.getsize(log)
    with open(log, "r+b") as f:
        f.truncate(size // 2)
    junk_log = _log(junk)
    with open(junk_log, "wb") as f:
        f.write(b"not a darshan log\n" * 100)
    os.remove(_log(other))
    shutil.copy(_log(os.path.join(RUNS, "pfs-inet-lmdb-naive-n2")),
                os.path.join(other, "darshan", "x.darshan"))
    shutil.rmtree(os.path.join(gone, "darshan"))
    with open(os.path.join(gone, "config.yaml"), "a") as f:
        f.write("darshan: /opt/darshan/lib/libdarshan.so\n")
    before = _tree(tmp_path / "in")
    out = tmp_path / "out"
    p = run_main(ANALYZE + [cut, junk, other, gone, good, "-o", out])
    assert p.returncode == 1, p.stderr
    lines = _errors(p.stderr)
    assert lines == [
        f"hpcio.analyze: {log}: truncated ({size // 2:,} of {size:,} bytes); left out",
        f"hpcio.analyze: {junk_log}: not a Darshan 3 log; left out",
        f"hpcio.analyze: {os.path.join(other, 'darshan', 'x.darshan')}: a log of another "
        f"run (its command wrote to /scratch/hpcio/runs/shared/pfs-inet-lmdb-naive-n2, this "
        f"run's to /scratch/hpcio/runs/shared/pfs-inet-lmdb-naive-n4); left out",
        f"hpcio.analyze: {os.path.join(gone, 'darshan')}: no Darshan log although the run "
        f"was traced; Darshan tables left out"]
    assert _tree(tmp_path / "in") == before
    with open(out / "summary.json") as f:
        doc = json.load(f)
    assert [r["run"] for r in doc["tables"]["table-b"]] == ["pfs-inet-lmdb-coordinated-n2"]
    assert len(doc["tables"]["table-a"]) == 5  # the runs' own figures are all there
    with open(out / "report.md") as f:
        md = f.read()
    assert "## Gaps in the input" in md and "truncated" in md


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
def test_cut_short_and_older_runs_are_said(tmp_path):
    """A run cut short, one without summary.json, one lacking a rank's step file and one
    of an older format (no step origins, no reader counters)."""
    _fixtures()
    cut, nosum, norank, old = _copy(
        ["pfs-inet-lmdb-naive-n1", "pfs-inet-lmdb-naive-n2", "pfs-inet-lmdb-naive-n4",
         "pfs-inet-lmdb-coordinated-n2"], tmp_path / "in")
    with open(os.path.join(cut, "summary.json")) as f:
        s = json.load(f)
    s.update(cut_short=True, signal="SIGTERM")
    with open(os.path.join(cut, "summary.json"), "w") as f:
        json.dump(s, f)
    os.remove(os.path.join(nosum, "summary.json"))
    os.remove(os.path.join(norank, "rank-3.npz"))
    for r in (0, 1):
        p = os.path.join(old, f"rank-{r}.json")
        with open(p) as f:
            info = json.load(f)
        info.pop("origin_unix")
        for e in info["epochs"]:
            e["counters"].pop("rusage")
        with open(p, "w") as f:
            json.dump(info, f)
    out = tmp_path / "out"
    p = run_main(ANALYZE + [cut, nosum, norank, old, "-o", out, "--report-formats", "md"])
    assert p.returncode == 1, p.stderr
    assert _errors(p.stderr) == [
        f"hpcio.analyze: {cut}: cut short (signal SIGTERM) after 24 of 24 steps per epoch; "
        f"its figures cover the steps it ran",
        f"hpcio.analyze: {os.path.join(nosum, 'summary.json')}: missing or unreadable: the "
        f"run did not finish (killed or cut short); analysed from its rank files",
        f"hpcio.analyze: {os.path.join(norank, 'rank-3.npz')}: missing; this run's step "
        f"tables are left out"]
    assert sorted(os.listdir(out)) == sorted(
        [".hpcio-report", "report.md", "table-a.csv", "table-b.csv", "table-c.csv",
         "table-causes.csv",
         "breakdown.png",
         "heatmap.png", "stall-vs-ranks.png", "bandwidth.png", "os-counters.png",
         "dxt-steps-pfs-inet-lmdb-naive-n1.png"])
    with open(out / "report.md") as f:
        md = f.read()
    assert "older format: no origin_unix in rank-R.json" in md
    assert "minor faults, major faults, voluntary ctx switches, involuntary ctx switches" \
        in md  # what the older run's counters lack
    with open(out / "table-a.csv") as f:
        assert sum(1 for _ in f) == 1 + 3  # the run without rank-3.npz has no step rows


@pytest.mark.mpi  # analyze runs Drishti in a child Python on each Darshan log
def test_mixed_datasets_are_refused_unless_allowed(tmp_path):
    _fixtures()
    lmdb = os.path.join(RUNS, "pfs-inet-lmdb-naive-n1")
    hdf5 = os.path.join(RUNS, "local-mnist-hdf5-naive-n2")
    p = run_main(ANALYZE + [lmdb, hdf5, "-o", tmp_path / "a", "--report-formats", "json"])
    assert p.returncode == 1
    assert _errors(p.stderr) == [
        f"hpcio.analyze: {hdf5}: data hdf5/raw 16384 records 12845056 B on "
        f"ext4:/scratch/hpcio/data/mnist-hdf5 differs from lmdb/jpeg 2048 records 222322593 B "
        f"on fuse.glusterfs:/mnt/pfs/inet-lmdb of pfs-inet-lmdb-naive-n1; left out of the "
        f"scaling tables (--allow-mixed keeps every dataset, each its own)"]
    with open(tmp_path / "a" / "summary.json") as f:
        doc = json.load(f)
    assert len(doc["tables"]["table-a"]) == 1 and len(doc["tables"]["table-c"]) == 2
    p = run_main(ANALYZE + [lmdb, hdf5, "-o", tmp_path / "b", "--report-formats", "json",
                            "--allow-mixed"])
    assert p.returncode == 0 and p.stderr == ""
    with open(tmp_path / "b" / "summary.json") as f:
        doc = json.load(f)
    assert len(doc["tables"]["table-a"]) == 2 and len(doc["models"]) == 2


def test_unusable_arguments_are_one_line(tmp_path):
    p = run_main(ANALYZE + [tmp_path, "-o", tmp_path / "out"])
    assert p.returncode == 2 and _errors(p.stderr) == [
        f"hpcio.analyze: error: no run to analyse: {tmp_path}: neither a run nor a sweep "
        f"directory, nor holds any"]
    assert not (tmp_path / "out").exists()
    p = run_main(ANALYZE + [tmp_path / "nope", "-o", tmp_path / "out", "--report-formats", "pdf"])
    assert p.returncode == 2 and _errors(p.stderr) == [
        "hpcio.analyze: error: --report-formats pdf: unknown pdf (choose from html, md, json)"]


# --- a sweep made here -----------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.slow
def test_sweep_at_1_2_3_ranks(tmp_path):
    """hpcio.sweep at 1, 2 and 3 ranks with both readers, then the report on the sweep
    directory: every point in table A, a model per reader with its check, untraced runs
    said so."""
    ds = make_dataset(tmp_path, "packed", "raw", records=96)
    sweep = tmp_path / "sweep"
    p = run_py(["-m", "hpcio.sweep", "--data", ds.root, "--ranks", "1,2,3", "--reader",
                "naive,coordinated", "--out", sweep, "--", "--model", "emulate", "--batch",
                "4", "--compute-time", "0.002"], timeout=600)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "report"
    p = run_main(ANALYZE + [sweep, "-o", out])
    assert p.returncode == 0, p.stderr
    with open(out / "summary.json") as f:
        doc = json.load(f)
    rows = doc["tables"]["table-a"]
    assert sorted((r["reader"], r["ranks"]) for r in rows) == [
        (rd, n) for rd in ("coordinated", "naive") for n in (1, 2, 3)]
    assert all(0 < r["au_pct"] <= 100 and r["samples_s"] > 0 for r in rows)
    for reader in ("naive", "coordinated"):
        m = doc["models"][reader]
        assert m["fitted"] and m["ranks"] == [1, 2, 3]
        assert m["loo"]["P"] == 3 and np.isfinite(m["loo"]["error_s"])
        # synchronous steps (the preset's model's exchange): the split at the largest P
        assert m["straggler_s"] > 0 and m["own_wait_s"] >= 0
    with open(out / "report.md") as f:
        assert f.read().count("waiting in the exchange for the slowest rank") == 2
    assert doc["tables"]["table-b"] == []
    assert sum("not traced with Darshan" in n for n in doc["notes"]) == 6
    c = doc["tables"]["table-c"]
    assert all(r["minflt"] is not None and r["rchar"] > 0 and r["sleep_us"] is not None
               and r["cache_gained"] is not None and r["lacks"] == "" for r in c)
    with open(os.path.join(sweep, "sweep.json")) as f:
        run_dirs = [r["run_dir"] for r in json.load(f)["runs"]]
    assert doc["runs"] == run_dirs
    with open(os.path.join(run_dirs[0], "config.yaml")) as f:
        assert yaml.safe_load(f)["ranks"] == 1


def _libdarshan():
    lib = os.environ.get("HPCIO_DARSHAN") or os.path.join(ROOT, ".darshan", "lib",
                                                          "libdarshan.so")
    if not os.path.isfile(lib):
        pytest.skip(f"no Darshan runtime at {lib} (scripts/darshan-local.sh build, or "
                    f"HPCIO_DARSHAN=LIB)")
    return lib


@pytest.mark.mpi
@pytest.mark.slow
def test_traced_sweep_is_read_with_its_logs(tmp_path):
    """A sweep traced with Darshan and DXT (hpcio.train --darshan --darshan-dxt): every run's
    log is its own, the coordinated reader's MPI-IO bytes are in Table B, and its reads are
    placed among the steps."""
    lib = _libdarshan()
    _counters()
    ds = make_dataset(tmp_path, "packed", "raw", records=96)
    sweep = tmp_path / "sweep"
    p = run_py(["-m", "hpcio.sweep", "--data", ds.root, "--ranks", "1,2,3", "--reader",
                "naive,coordinated", "--darshan", lib, "--out", sweep, "--", "--model",
                "emulate", "--batch", "4", "--compute-time", "0.002", "--darshan-dxt"],
               timeout=600)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "report"
    p = run_main(ANALYZE + [sweep, "-o", out, "--report-formats", "json"])
    assert p.returncode == 0 and p.stderr == "", p.stderr
    with open(out / "summary.json") as f:
        doc = json.load(f)
    b = {(r["reader"], r["ranks"]): r for r in doc["tables"]["table-b"]}
    assert sorted(b) == [(rd, n) for rd in ("coordinated", "naive") for n in (1, 2, 3)]
    for n in (1, 2, 3):
        assert b["coordinated", n]["mpiio_bytes_rank"] * n >= 96 * 784
        assert b["naive", n]["coverage"] >= 1  # pread: Darshan sees every record
        for reader in ("naive", "coordinated"):  # DXT traced the dataset's reads
            assert b[reader, n]["dxt_io_s"] + b[reader, n]["dxt_outside_s"] > 0
    assert not any("not traced" in n for n in doc["notes"])
