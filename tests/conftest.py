import collections
import os
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# subprocesses (mpiexec ranks) import this checkout, not an installed copy
os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")

from common import tiers  # noqa: E402  (needs the path above)

pytest_plugins = ["common.prediction"]  # testbed_prediction: one simulation, several tests

_running = {"item": None}
_measured = collections.defaultdict(float)  # test id: seconds, setup + call + teardown
_unpassed = set()
_slow = set()  # test ids in the slow tier
_started = time.monotonic()


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true", default=False,
                     help="write each passed test's duration into tests/durations.json "
                          "(which sets the slow tier)")


def _fixture_funcs(item):
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        for d in (info.name2fixturedefs.get(name, ()) if info else ()):
            yield d.func


def pytest_collection_modifyitems(config, items):
    """Mark the tiers from what the tests do and how long they took (common/tiers.py)."""
    took = tiers.load_durations()
    for item in items:
        fn = getattr(item, "function", None)
        if fn is not None and item.get_closest_marker("mpi") is None and (
                tiers.launches(fn) or any(tiers.launches(f) for f in _fixture_funcs(item))):
            item.add_marker(pytest.mark.mpi)
        if took.get(item.nodeid, 0.0) > tiers.SLOW_S and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is not None:
            _slow.add(item.nodeid)


def _launch_allowed():
    item = _running["item"]
    return item is None or item.get_closest_marker("mpi") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _running["item"] = item
    with tiers.guard_launches(_launch_allowed, pytest.fail):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with tiers.guard_launches(_launch_allowed, pytest.fail):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _running["item"] = None


def pytest_runtest_logreport(report):
    if report.when == "call" and "slow" in report.keywords:  # also from a worker
        _slow.add(report.nodeid)
    if report.failed or report.skipped:
        _unpassed.add(report.nodeid)
    _measured[report.nodeid] += report.duration


def pytest_sessionfinish(session):
    if session.config.getoption("--record-durations"):
        tiers.save_durations({k: v for k, v in _measured.items() if k not in _unpassed},
                             [item.nodeid for item in session.items])


def _skip_reasons(reporter):
    """{reason: count} of the skipped tests."""
    out = collections.Counter()
    for rep in reporter.stats.get("skipped", []):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        out[reason.removeprefix("Skipped: ")] += 1
    return out


def pytest_terminal_summary(terminalreporter):
    """How many cases of the hostile-user audit (``@pytest.mark.hostile``) hold; tests that
    outgrew their tier; skips counted by reason."""
    seen = {"passed": 0, "failed": 0}
    for outcome in seen:
        for rep in terminalreporter.stats.get(outcome, []):
            if rep.when == "call" and "hostile" in rep.keywords:
                seen[outcome] += 1
    if sum(seen.values()):
        terminalreporter.write_line(
            f"hostile cases: {seen['passed']} of {sum(seen.values())} hold")
    grown = sorted(k for k, v in _measured.items() if v > tiers.SLOW_S and k not in _slow)
    if grown:
        terminalreporter.write_line(
            f"outgrew the fast tiers (> {tiers.SLOW_S:g} s, not marked slow; "
            f"pytest --record-durations updates tests/durations.json): " + ", ".join(grown))
    budget = float(os.environ.get("HPCIO_TEST_BUDGET_S", 0) or 0)
    if budget:  # the Makefile's targets name theirs: test 600 s, test-fast 90 s
        took = time.monotonic() - _started
        terminalreporter.write_line(
            f"time: {took:.0f} s of the {budget:.0f} s budget" +
            ("" if took <= budget else " - OVER BUDGET: see the slowest tests below, and "
             "tests/durations.json"))
    skips = _skip_reasons(terminalreporter)
    if skips:
        terminalreporter.write_line("skipped, by reason: " + "; ".join(
            f"{n} x {reason}" for reason, n in skips.most_common()))
