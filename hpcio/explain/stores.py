"""Storage formats compared on one dataset: each store's figure against the best store's,
and what each store takes on disk.

Lim et al. 2016 report training time per store relative to the fastest one ("6.8 times
slower than LevelDB"); that ratio means something only when every store holds the same
records, so a table whose stores hold different record counts is refused (one line).
"""

import os

from ..errors import HpcioError
from ..data.dataset import INDEX, MANIFEST

__all__ = ["same_records", "relative", "footprint"]


def same_records(rows):
    """Refuse (one line) ``rows`` (dicts with ``store`` and ``records``) whose stores hold
    different record counts."""
    counts = {}
    for r in rows:
        counts.setdefault(int(r["records"]), r["store"])
    if len(counts) > 1:
        seen = ", ".join(f"{s} {n:,}" for n, s in counts.items())
        raise HpcioError(f"stores of different record counts in one table ({seen} "
                         f"records): compare stores of the same records")


def relative(rows, key, best=min):
    """``rows`` (dicts with ``store``, ``records`` and ``key``) with ``ratio`` added: each
    row's ``key`` over the best row's (``best``: min for times, max for rates). Rows whose
    value is None keep ratio None; all rows must hold the same record count."""
    same_records(rows)
    values = [r[key] for r in rows if r.get(key) is not None]
    ref = best(values) if values else None
    return [dict(r, ratio=None if r.get(key) is None or not ref else r[key] / ref)
            for r in rows]


def footprint(root):
    """(bytes allocated on disk, files) of a dataset directory as ``du`` counts them
    (allocated blocks, directories included), without hpcio's own manifest and index."""
    total, files = 0, 0
    for d, dirs, names in os.walk(root):
        total += os.lstat(d).st_blocks * 512
        for n in names:
            if d == root and n in (MANIFEST, INDEX):
                continue
            total += os.lstat(os.path.join(d, n)).st_blocks * 512
            files += 1
    return total, files
