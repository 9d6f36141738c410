"""The suite's tiers (tests/common/tiers.py): a test that starts a process is found and
marked ``mpi``, one outside that tier that starts a process anyway fails, ``slow`` comes
from measured durations, and the tests a run selects fit its budget as last measured."""

import os
import subprocess

import pytest

from common import tiers, tiersamples


@pytest.mark.parametrize("name, starts", [
    ("direct", True), ("through_helper", True), ("through_module", True),
    ("through_class", True), ("none", False), ("nested", False)])
def test_a_launch_is_found_through_helpers_classes_and_modules(name, starts):
    assert tiers.launches(getattr(tiersamples, name)) is starts


def test_hpcio_and_the_standard_library_are_not_followed():
    assert not tiers.launches(subprocess.run)  # not written in tests/
    assert not tiers.launches(os.path.join)


def test_this_module_is_in_the_fast_tier(request):
    assert request.node.get_closest_marker("mpi") is None


class _Refused(Exception):
    pass


def _refuse(message):
    raise _Refused(message)


def test_a_process_outside_the_tier_is_refused_before_it_starts(tmp_path):
    made = tmp_path / "made"
    with tiers.guard_launches(lambda: False, _refuse):
        with pytest.raises(_Refused, match="not in the mpi tier"):
            subprocess.run(["touch", str(made)])
    assert not made.exists()


def test_the_standard_librarys_own_probes_pass():
    """What platform.processor() runs, as it runs it; and hpcio's fault watcher."""
    with tiers.guard_launches(lambda: False, _refuse):
        assert subprocess.run(["uname", "-p"], capture_output=True).returncode == 0
    assert tiers.exempt(["python", "-I", "-S", "-c", f"import sys; {tiers.WATCHER}()"])


def test_durations_round_trip(tmp_path):
    path = str(tmp_path / "d.json")
    tiers.save_durations({"a::x": 1.234, "a::gone": 2.0}, path=path)
    tiers.save_durations({"b::y": 30.0}, path=path)
    assert tiers.load_durations(path) == {"a::x": 1.23, "a::gone": 2.0, "b::y": 30.0}
    # a run that collected file a without a::gone drops it; b's, not collected, stays
    tiers.save_durations({"a::x": 1.0}, ["a::x"], path=path)
    assert tiers.load_durations(path) == {"a::x": 1.0, "b::y": 30.0}
    assert tiers.load_durations(str(tmp_path / "none.json")) == {}


def test_slow_is_set_from_the_recorded_durations(request):
    took = tiers.load_durations()
    for item in request.session.items:
        if took.get(item.nodeid, 0) > tiers.SLOW_S:
            assert item.get_closest_marker("slow"), item.nodeid


#: make test's speed-up on its two pytest workers over one, measured on 2 cores (657 s of
#: tests one after the other, 528 s on two workers): most of its time is CPU, a third waits
SPEEDUP = {1: 1.0, 2: 1.2}


def test_what_this_run_selected_fits_its_budget_as_measured(request):
    """The recorded durations of the tests this run selected (make durations: one worker),
    over the measured speed-up of this run's workers, with 10 s for collection and start-up,
    fit the budget its make target names (make test: 600 s, make test-fast: 90 s): a new
    test that would break the budget fails here, on any machine."""
    budget = float(os.environ.get("HPCIO_TEST_BUDGET_S", 0) or 0)
    if not budget:
        pytest.skip("no HPCIO_TEST_BUDGET_S: run through make test or make test-fast")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", 1))
    speedup = SPEEDUP.get(workers, SPEEDUP[2])
    took = tiers.load_durations()
    total = sum(took.get(item.nodeid, 0.0) for item in request.session.items)
    assert total / speedup + 10 <= budget, (
        f"the selected tests took {total:.0f} s one after the other when last recorded "
        f"(make durations), {total / speedup:.0f} s on {workers} worker(s), and 10 s to "
        f"start: over the {budget:.0f} s budget; slowest: " + ", ".join(
            f"{k} {v:.0f} s" for k, v in sorted(
                ((i.nodeid, took.get(i.nodeid, 0.0)) for i in request.session.items),
                key=lambda kv: -kv[1])[:5]))
