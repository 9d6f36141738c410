"""How stall per step scales with the number of ranks P: a fit per reader, its
extrapolation, and a check of it on the data.

The model (seconds of stall per step, the max over ranks)::

    t_stall(P) = max(0, a + b * (x / BW(P) - x / B1) + c * P + d * log2(P))

* ``a``: a fixed cost per step, negative when prefetching hides the I/O behind compute
  (the "- overlap" of a fixed overlap);
* ``x / BW(P)`` with ``x`` the bytes each rank reads per step and
  ``BW(P) = min(B1, Bagg / P)``: the rank's share of the storage bandwidth (one stream gets
  at most ``B1``; P streams share ``Bagg``). Its part up to saturation, ``x / B1``, is the
  same at every P and goes into ``a``; the term fitted is the excess,
  ``x * max(0, P / Bagg - 1 / B1)``, zero until the storage saturates and growing with P
  after: **bandwidth share**;
* ``c * P``: work each rank does that grows with the job (cursor skipping over other ranks'
  records, wake-ups, metadata storms): **grows with P**;
* ``d * log2(P)``: tree-shaped collectives and barriers: **synchronisation**.

B1 and Bagg are the storage's limits when given (``--storage-mibs``); then predictions take
the larger of the fit and the storage's floor, ``P * x / Bagg - (compute + rest)``: P ranks
cannot be fed faster than the storage delivers, however well the reads overlap compute, and
a fit over rank counts below saturation cannot see that. Without them B1 and Bagg are the
most one rank and all ranks delivered in the runs: lower bounds of the limits (a reader
that keeps up delivers what compute asks, not what the storage could), so no floor.

b, c, d >= 0 and a free, fitted by non-negative least squares (Lawson-Hanson, below: numpy
only) on every run of the reader (repeats are points), with one ``x`` for the series (its
runs' mean: the same data and batch). It needs stall at three rank counts or more; the
check refits without the largest P and predicts it (from two rank counts a growth term is
barely determined: P = 1 + log2 P at P = 1 and 2).
"""

import math

import numpy as np

from .tables import measured

__all__ = ["nnls", "design", "fit", "predict", "loo", "scaling", "TERMS", "MIN_POINTS"]

TERMS = ("fixed", "bandwidth share", "grows with P", "synchronisation")
MIN_POINTS = 3  # distinct rank counts to fit at all
PREDICT_AT = (16, 32, 64, 128, 256, 512, 1024)


def nnls(A, y, free=(), tol=1e-12, max_iter=None):
    """argmin ||A w - y|| with w >= 0 except the columns in ``free`` (Lawson and Hanson's
    active-set method; a free column is split into a positive and a negative part)."""
    A = np.asarray(A, float)
    y = np.asarray(y, float)
    free = list(free)
    B = np.hstack([A, -A[:, free]]) if free else A
    scale = np.linalg.norm(B, axis=0)
    scale[scale == 0] = 1.0
    B = B / scale
    n = B.shape[1]
    w = np.zeros(n)
    passive = np.zeros(n, bool)
    for _ in range(max_iter or 3 * n + 10):
        grad = B.T @ (y - B @ w)
        if passive.all() or grad[~passive].max() <= tol:
            break
        passive[np.argmax(np.where(passive, -np.inf, grad))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(B[:, passive], y, rcond=None)[0]
            if (z[passive] > tol).all():
                w = z
                break
            neg = passive & (z <= tol)
            alpha = np.min(w[neg] / (w[neg] - z[neg] + 1e-300))
            w = w + alpha * (z - w)
            passive &= w > tol
            w[~passive] = 0.0
    w = w / scale
    out = w[:A.shape[1]].copy()
    out[free] -= w[A.shape[1]:]
    return out


def design(P, x, b1, bagg):
    """The model's columns for rank counts ``P`` reading ``x`` bytes per step and rank."""
    P = np.asarray(P, float)
    excess = float(x) * np.maximum(0.0, P / bagg - 1.0 / b1)
    return np.column_stack([np.ones_like(P), excess, P, np.log2(P)])


def fit(P, stall, x, b1, bagg):
    """Coefficients (a, b, c, d) fitted to the points (see the module docstring). A term
    that is zero at all but one of the rank counts (log2 P with P = 1 and 2; the bandwidth
    share saturating only at the largest) would fit that one point's noise exactly and
    extrapolate it: it is left out (0)."""
    A = design(P, x, b1, bagg)
    P = np.asarray(P, float)
    support = [len(np.unique(P[np.abs(A[:, j]) > 0])) for j in range(A.shape[1])]
    use = [0] + [j for j in range(1, A.shape[1]) if support[j] >= 2]
    coef = np.zeros(A.shape[1])
    coef[use] = nnls(A[:, use], stall, free=[0])
    return coef


def predict(coef, P, x, b1, bagg, cycle=None):
    """The fitted stall at ``P``; with ``cycle`` (compute + rest per step, s) no less than
    the storage's floor ``P * x / Bagg - cycle``."""
    P = np.asarray(P, float)
    fitted = np.maximum(0.0, design(P, x, b1, bagg) @ coef)
    return fitted if cycle is None else np.maximum(fitted, P * x / bagg - cycle)


def loo(P, stall, x, limits, cycle=None):
    """Fit without the largest P (``limits``: B1, Bagg known without it), predict it:
    {P, measured (:func:`hpcio.explain.tables.measured` of its repeats), predicted,
    error_s, error_pct, fitted_on}, or None when fewer than two other rank counts
    remain."""
    P, stall = np.asarray(P, float), np.asarray(stall, float)
    top = P.max()
    keep = P < top
    if len(np.unique(P[keep])) < 2:
        return None
    coef = fit(P[keep], stall[keep], x, *limits)
    meas = measured(stall[~keep])
    pred = float(predict(coef, [top], x, *limits, cycle)[0])
    return {"P": int(top), "measured_s": meas, "predicted_s": pred,
            "error_s": pred - meas,
            "error_pct": 100.0 * (pred - meas) / meas if meas > 0 else float("nan"),
            "fitted_on": sorted(int(p) for p in np.unique(P[keep]))}


def scaling(points, x, limits, loo_limits, compute_s, rest_s, bounded=False):
    """The model for one reader's points [(P, stall_max_s)] reading ``x`` bytes per step
    and rank, with ``limits`` (B1, Bagg in B/s; ``loo_limits``: as known without the
    largest P; ``bounded``: they are the storage's real limits, so the floor applies):
    coefficients, each term at the largest measured P and the dominant one, predictions of
    stall and AU, the rank count where stall exceeds compute, and the leave-one-out check;
    or {"fitted": False, "why": ...} with too few rank counts."""
    P = np.array([p[0] for p in points], float)
    stall = np.array([p[1] for p in points], float)
    ranks = sorted(int(p) for p in np.unique(P))
    if len(ranks) < MIN_POINTS:
        return {"fitted": False, "ranks": ranks,
                "why": f"stall measured at {len(ranks)} rank count(s) "
                       f"({', '.join(map(str, ranks))}); the model needs {MIN_POINTS}"}
    coef = fit(P, stall, x, *limits)
    cycle = compute_s + rest_s
    floor = cycle if bounded else None
    top = max(ranks)
    parts = design([top], x, *limits)[0] * coef
    resid = stall - predict(coef, P, x, *limits, floor)
    at = np.array(PREDICT_AT, float)
    pred = predict(coef, at, x, *limits, floor)
    fitted = predict(coef, at, x, *limits)
    grid = 2.0 ** np.arange(0, 21)
    over = predict(coef, grid, x, *limits, floor) > compute_s
    return {
        "fitted": True, "ranks": ranks, "points": len(P),
        "coef": dict(zip(("a_s", "b", "c_s_per_rank", "d_s_per_doubling"), coef.tolist())),
        "terms_at_max_P": dict(zip(TERMS, parts.tolist())), "max_P": top,
        "dominant": TERMS[int(np.argmax(parts))] if parts.max() > 0 else "none (no stall)",
        "rms_error_s": float(math.sqrt(np.mean(resid ** 2))),
        "predict": [{"P": int(p), "stall_s": float(s),
                     "au_pct": float(100.0 * compute_s / (cycle + s)),
                     "storage_bound": bool(s > f)}
                    for p, s, f in zip(at, pred, fitted)],
        "stall_exceeds_compute_at": int(grid[over.argmax()]) if over.any() else None,
        "loo": loo(P, stall, x, loo_limits, floor),
    }
