"""The recorded fixtures the tests read (``tests/fixtures``: real hpcio runs and Darshan
logs, each folder's README says how they were recorded), and writable copies of them."""

import os
import shutil

__all__ = ["FIXTURES", "RUNS", "LOGS", "CKPT_RUNS", "copy_run"]

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")
RUNS = os.path.join(FIXTURES, "hpcio-runs")  # hpcio.train runs, each with its Darshan log
LOGS = os.path.join(FIXTURES, "darshan")  # Darshan 3.5.0 logs of the four access patterns
CKPT_RUNS = os.path.join(FIXTURES, "checkpoint-runs")  # checkpoint runs, with their logs


def copy_run(runs, name, dest):
    """A writable copy of fixture run ``name`` of folder ``runs`` in ``dest`` (the fixtures
    stay as recorded); returns its path."""
    d = os.path.join(str(dest), name)
    shutil.copytree(os.path.join(runs, name), d)
    for p, _, files in os.walk(d):
        os.chmod(p, 0o755)
        for f in files:
            os.chmod(os.path.join(p, f), 0o644)
    return d
