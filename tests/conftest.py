import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
# subprocesses (mpiexec ranks) import this checkout, not an installed copy
os.environ["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")


def pytest_terminal_summary(terminalreporter):
    """How many cases of the hostile-user audit (``@pytest.mark.hostile``) hold."""
    seen = {"passed": 0, "failed": 0}
    for outcome in seen:
        for rep in terminalreporter.stats.get(outcome, []):
            if rep.when == "call" and "hostile" in rep.keywords:
                seen[outcome] += 1
    if sum(seen.values()):
        terminalreporter.write_line(
            f"hostile cases: {seen['passed']} of {sum(seen.values())} hold")
