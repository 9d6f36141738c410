"""Which of two readers stalls more, decided from the numbers alone.

Repeats are compared by their medians, with their range (min-max) as the spread: when the
two ranges overlap, the repeats do not tell the readers apart and the verdict says so. One
run a side has no spread; its verdict says that too. Headings are made from the verdicts,
so a report cannot title a section with a claim its numbers contradict.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["Verdict", "spread", "compare", "heading"]


@dataclass
class Verdict:
    more: Optional[str]   # the reader that stalls more; None: no clear difference
    less: Optional[str]
    text: str


def spread(values):
    """(median, min, max) of a figure over repeats."""
    v = np.asarray(values, float)
    return float(np.median(v)), float(v.min()), float(v.max())


def _show(values):
    med, lo, hi = spread(values)
    if len(values) == 1:
        return f"{med:.1f}%"
    return f"{med:.1f}% (median of {len(values)}, {lo:.1f}-{hi:.1f})"


def compare(a, va, b, vb):
    """The verdict on readers ``a`` and ``b`` from their stall % over repeats (``va``,
    ``vb``): which stalls more and by how much, or no clear difference when the ranges
    overlap (equal single runs included)."""
    (ma, lo_a, hi_a), (mb, lo_b, hi_b) = spread(va), spread(vb)
    if lo_a <= hi_b and lo_b <= hi_a:
        return Verdict(None, None, f"no clear difference: {a} {_show(va)} against {b} "
                                   f"{_show(vb)}; the ranges overlap")
    (more, vm, m), (less, vl, lm) = sorted([(a, va, ma), (b, vb, mb)], key=lambda t: -t[2])
    ratio = f", {m / lm:.1f}x" if lm > 0 else ""
    alone = "; one run each: no spread to judge the difference by" \
        if len(va) == len(vb) == 1 else ""
    return Verdict(more, less, f"{more} stalls more than {less}: {_show(vm)} against "
                               f"{_show(vl)}, {m - lm:.1f} points more{ratio}{alone}")


def heading(verdicts, a, b):
    """A section heading that every verdict bears out."""
    pairs = {(v.more, v.less) for v in verdicts}
    if len(pairs) == 1:
        more, less = pairs.pop()
        if more is None:
            return f"{a} and {b}: no clear difference in stall"
        return f"Why {more} stalls more than {less}"
    return f"Which reader stalls more: {a} or {b}"
