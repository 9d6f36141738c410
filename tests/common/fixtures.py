"""The shared fixtures (``../shared/fixtures``), read-only, and writable copies of them."""

import os
import shutil

__all__ = ["copy_run"]


def copy_run(runs, name, dest):
    """A writable copy of fixture run ``name`` of folder ``runs`` in ``dest`` (shared/ is
    read-only); returns its path."""
    d = os.path.join(str(dest), name)
    shutil.copytree(os.path.join(runs, name), d)
    for p, _, files in os.walk(d):
        os.chmod(p, 0o755)
        for f in files:
            os.chmod(os.path.join(p, f), 0o644)
    return d
