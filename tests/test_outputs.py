"""Outputs never land where they would destroy something: not in a run's or a dataset's
directory (whatever --force says), not over a file hpcio did not write (unless
--force). Real run and dataset directories; the commands run in-process."""

import json
import os
import shutil

import pytest

from hpcio.errors import HpcioError
from hpcio.outputs import claim_dir, claim_file, holder

from common.datasets import make_dataset
from common.failure import one_line
from common.fixtures import RUNS
from common.inproc import run_main

RUN = os.path.join(RUNS, "local-inet-lmdb-naive-n2")
pytestmark = pytest.mark.hostile


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return make_dataset(tmp_path_factory.mktemp("outputs"), "packed", "raw", records=16)


def test_holder_is_the_nearest_run_sweep_or_dataset(tmp_path, dataset):
    assert holder(os.path.join(RUN, "a", "b.json")) == ("run", RUN)
    assert holder(os.path.join(dataset.root, "x.csv")) == ("dataset", dataset.root)
    (tmp_path / "sweep.json").write_text("{}")  # a sweep writes its simulation in its own
    assert holder(tmp_path / "simulated") is None
    assert holder("/") is None and holder(RUNS) is None


@pytest.mark.parametrize("where", ["summary.json", "rank-0.json", "new.json"])
def test_export_never_writes_into_a_run(tmp_path, where):
    run = shutil.copytree(RUN, tmp_path / "run")
    before = {f: (run / f).read_bytes() for f in os.listdir(run) if (run / f).is_file()}
    for force in ([], ["--force"]):
        p = run_main(["-m", "hpcio.results", "export", run, "-o", run / where] + force)
        assert one_line(p, "hpcio.results").endswith(
            f"-o {run / where}: inside the run directory {run}: hpcio never writes its "
            f"outputs into a run's directory; give a path outside it")
    assert {f: (run / f).read_bytes() for f in before} == before
    assert not (run / "new.json").exists()


def test_export_never_writes_into_a_dataset(tmp_path, dataset):
    m = os.path.join(dataset.root, "hpcio.json")
    with open(m, "rb") as f:
        before = f.read()
    p = run_main(["-m", "hpcio.results", "export", RUN, "-o", m, "--force"])
    assert "inside the dataset directory" in one_line(p, "hpcio.results")
    with open(m, "rb") as f:
        assert f.read() == before


def test_calibration_and_prediction_refuse_files_not_theirs(tmp_path):
    mine = tmp_path / "platform.yaml"
    mine.write_text("hosts: my own\n")
    p = run_main(["-m", "hpcio.simulate", "calibrate", RUN, "--platform", mine, "-o", mine])
    assert one_line(p, "hpcio.simulate").endswith(
        f"-o {mine}: exists and hpcio did not write it (--force replaces it)")
    assert mine.read_text() == "hosts: my own\n"
    d = tmp_path / "pred"
    d.mkdir()
    (d / "validation.json").write_text('{"mine": 1}')
    p = run_main(["-m", "hpcio.simulate", "predict", "--platform", mine, "--from", RUN,
                  "--ranks", "1,2", "-o", d])
    assert one_line(p, "hpcio.simulate").endswith(
        f"-o {d}: its validation.json exists and hpcio did not write it (--force replaces "
        f"it)")
    p = run_main(["-m", "hpcio.simulate", "predict", "--platform", mine, "--from", RUN,
                  "--ranks", "1,2", "-o", RUN, "--force"])
    assert "is the run directory" in one_line(p, "hpcio.simulate")


def test_own_files_are_recognised(tmp_path):
    from hpcio.explain.export import is_export
    from hpcio.simulate.calibration import is_calibration
    csv, js = tmp_path / "r.csv", tmp_path / "r.json"
    for f in (csv, js):
        assert run_main(["-m", "hpcio.results", "export", RUN, "-o", f]).returncode == 0
        assert is_export(f)
        claim_file(f, "-o", is_export)  # an earlier export: replaced
    js.write_text(json.dumps([{"name": "mine"}]))
    assert not is_export(js)
    with pytest.raises(HpcioError, match="exists and hpcio did not write it"):
        claim_file(js, "-o", is_export)
    claim_file(js, "-o", is_export, force=True)
    y = tmp_path / "c.yaml"
    y.write_text("readers: {naive: {cpu_us_per_sample: 1}}\ncalibrated_on: [/x]\n")
    assert is_calibration(y)
    y.write_text("{not yaml")
    with pytest.raises(HpcioError, match="exists and hpcio did not write it"):
        claim_file(y, "-o", is_calibration)
    with pytest.raises(HpcioError, match="is a directory"):
        claim_file(tmp_path, "-o", is_export)
    with pytest.raises(HpcioError, match="exists and is not a directory"):
        claim_dir(y, "-o", {})


def test_a_report_never_goes_into_a_dataset_or_another_run(tmp_path, dataset):
    other = shutil.copytree(os.path.join(RUNS, "local-inet-lmdb-coordinated-n2"),
                            tmp_path / "other")
    for kind, d in (("dataset", dataset.root), ("run", str(other))):
        out = os.path.join(d, "report")
        p = run_main(["-m", "hpcio.analyze", RUN, "-o", out, "--no-drishti"])
        assert one_line(p, "hpcio.analyze").endswith(
            f"inside the {kind} directory {d}: a report never goes into a run's or dataset's "
            f"directory; give another one"), p.stderr
        assert not os.path.exists(out)
