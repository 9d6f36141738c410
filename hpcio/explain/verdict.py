"""Verdicts decided from the numbers alone, each by one rule whose threshold is written here
once.

*Which of two readers stalls more* (:func:`compare`): repeats are compared by their
medians, with their range (min-max) as the spread. When the two ranges overlap, or the
medians are less than :data:`DIFF_POINTS` apart, the repeats do not tell the readers apart
and the verdict says so. One run a side has no spread; its verdict says that too. Headings
are made from the verdicts, so a report cannot title a section with a claim its numbers
contradict.

*What the accelerator waits for* (:func:`cause`): the step of every rank split into parts
that add up to it, over the steady steps (each epoch's first left out, as AU is), as
shares of the step (``tables.STEADY_PARTS``). Each part that is not compute is a cause,
one rule per row of :data:`CAUSES`: it is *a* cause of a run from :data:`CAUSE_PCT` percent
of the step (a part that size alone keeps AU under MLPerf Storage's pass mark,
:data:`AU_PASS`), and the run's cause is the largest of those; ``none`` (the accelerator
is busy) when no part reaches it.
"""

from dataclasses import dataclass
from typing import Callable, Optional

from .tables import measured

__all__ = ["Verdict", "spread", "compare", "heading", "Cause", "CAUSES", "CAUSE_PCT", "AU_PASS",
           "DIFF_POINTS", "NONE", "shares", "causes", "cause", "cause_text", "why_not_busy",
           "advice"]

# --- which reader stalls more ----------------------------------------------------------

DIFF_POINTS = 1.0   # medians of stall % closer than this (points of the step): no difference


@dataclass
class Verdict:
    more: Optional[str]   # the reader that stalls more; None: no clear difference
    less: Optional[str]
    text: str


def spread(values):
    """(measured value, min, max) of a figure over repeats (the measured value: the
    median, :func:`hpcio.explain.tables.measured`)."""
    v = [float(x) for x in values]
    return measured(v), min(v), max(v)


def _show(values):
    med, lo, hi = spread(values)
    if len(values) == 1:
        return f"{med:.1f}%"
    return f"{med:.1f}% (median of {len(values)}, {lo:.1f}-{hi:.1f})"


def compare(a, va, b, vb):
    """The verdict on readers ``a`` and ``b`` from their stall % over repeats (``va``,
    ``vb``): which stalls more and by how much, or no clear difference when the ranges
    overlap (equal single runs included) or the medians are under :data:`DIFF_POINTS`
    apart."""
    (ma, lo_a, hi_a), (mb, lo_b, hi_b) = spread(va), spread(vb)
    if lo_a <= hi_b and lo_b <= hi_a:
        return Verdict(None, None, f"no clear difference: {a} {_show(va)} against {b} "
                                   f"{_show(vb)}; the ranges overlap")
    if abs(ma - mb) < DIFF_POINTS:
        return Verdict(None, None, f"no clear difference: {a} {_show(va)} against {b} "
                                   f"{_show(vb)}, {abs(ma - mb):.2f} points apart (a "
                                   f"difference is {DIFF_POINTS:g} point or more)")
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


# --- what the accelerator waits for ----------------------------------------------------

AU_PASS = 90.0      # MLPerf Storage's pass mark (resnet50, unet3d): AU at or above, %
CAUSE_PCT = 100.0 - AU_PASS   # a part of the step is a cause from this share of it (steady
# state): a part that size alone keeps AU under the pass mark
NONE = "none"       # the cause of a run where no part reaches CAUSE_PCT


@dataclass(frozen=True)
class Cause:
    name: str       # what the report calls it
    part: str       # its share: a tables.STEADY_PARTS key
    what: str       # what the time goes to
    detail: Callable[[dict], str]   # the figures behind the share, from run_figures
    advice: dict    # reader ("*": any other) -> what to do about it


def _ms(f, key):
    return f"{1000 * f.get(key, float('nan')):.1f} ms"


def _per_step(key):
    return lambda f: f"{_ms(f, key)} per step, mean over ranks"


def _reads_advice():
    return {
        "coordinated": "more requests in flight (--reader-prefetch), larger requests "
                       "(--reader-option request_bytes=...), or faster storage",
        "naive": "prefetch further ahead and read in larger requests (the coordinated "
                 "reader), or faster storage",
        "*": "a reader that prefetches and reads in larger requests, or faster storage"}


CAUSES = (
    Cause("storage", "reads_pct_steady", "the batch's reads",
          lambda f: (f"the reader's call {f['fetch_pct_steady']:.1f}%, the hand-over "
                     f"{f['reads_pct_steady'] - f['fetch_pct_steady']:.1f}%; the own wait for "
                     f"a batch {_ms(f, 'stall_max_s')} per step on the slowest rank"),
          _reads_advice()),
    Cause("preprocessing", "prep_pct_steady", "the batch's preprocessing", _per_step("prep_s"),
          {"*": "more preprocessing threads (--threads), or data preprocessed offline "
                "(--offline)"}),
    Cause("exchange", "exchange_pct_steady", "the gradient exchange's allreduce",
          _per_step("exchange_s"),
          {"*": "not the data: overlap the exchange with the backward pass (as DDP does), a "
                "faster fabric, or fewer bytes per step; a faster reader does not help"}),
    Cause("straggler", "straggler_pct_steady", "slower ranks at the per-step barrier",
          lambda f: (f"{_ms(f, 'straggler_s')} per step, mean over ranks; the own wait for a "
                     f"batch {_ms(f, 'stall_max_s')} on the slowest rank"),
          {"*": "find what makes a rank arrive late (its own wait for data, its compute, "
                "its node's load: the run's rank-R.npz, step by step) and even it out; a "
                "faster reader helps only where the late rank waits for reads"}),
    Cause("rest", "other_pct_steady",
          "host-to-device copies, checkpoints and bookkeeping", _per_step("other_s"),
          {"*": "checkpoint less often, or to faster storage"}),
)


def shares(f):
    """{cause name: its share of the step, %} of one run's figures (tables.run_figures);
    empty when the figures lack the split (no step records)."""
    if not f or any(c.part not in f for c in CAUSES):
        return {}
    return {c.name: float(f[c.part]) for c in CAUSES}


def causes(f):
    """[(Cause, share %)] of every part at or above :data:`CAUSE_PCT`, the largest first."""
    s = shares(f)
    hit = [(c, s[c.name]) for c in CAUSES if s.get(c.name, 0.0) >= CAUSE_PCT]
    return sorted(hit, key=lambda t: -t[1])


def cause(f):
    """The run's cause: the name of its largest part at or above :data:`CAUSE_PCT`, or
    :data:`NONE`."""
    hit = causes(f)
    return hit[0][0].name if hit else NONE


def cause_text(f):
    """The run's cause in words, with the share it is decided by."""
    hit = causes(f)
    if not hit:
        s = shares(f)
        top = max(s.values()) if s else 0.0
        name = max(s, key=s.get) if s else "none"
        return (f"{NONE}: the accelerator is busy, computing "
                f"{f.get('compute_pct_steady', float('nan')):.1f}% of the step; no other part "
                f"reaches {CAUSE_PCT:g}% (the largest: {name} {top:.1f}%)")
    (c, pct), rest = hit[0], hit[1:]
    return (f"{c.name}: {pct:.1f}% of the step goes to {c.what}"
            + "".join(f"; also {o.name} {p:.1f}%" for o, p in rest))


def why_not_busy(f):
    """What a run whose accelerator is not busy enough waits for, for the AU finding's
    advice: the cause and where its finding is, or that no one part reaches the
    threshold (the parts listed)."""
    hit = causes(f)
    if hit:
        c, pct = hit[0]
        return (f"the accelerator waits most for {c.what} ({pct:.1f}% of the step): see "
                f"the {c.name} finding")
    s = shares(f)
    parts = ", ".join(f"{k} {v:.1f}%" for k, v in s.items())
    return (f"no one part of the step reaches {CAUSE_PCT:g}% ({parts}): several small "
            f"waits add up (the table of what the accelerator waits for)")


def advice(c, reader):
    """What to do about cause ``c`` for a run of ``reader``."""
    return c.advice.get(reader, c.advice["*"])
