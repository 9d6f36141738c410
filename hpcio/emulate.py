"""The ``emulate`` model: a training step that sleeps for a compute time.

Storage can be studied without accelerators the way DLIO and MLPerf Storage do it: each
step "computes" by sleeping for a time that is fixed or drawn from a distribution (DLIO's
``computation_time`` with ``computation_time_stdev``). The draws are seeded per rank, so a
run repeats exactly and ranks do not move in lock step. Sleeping releases the GIL, so the
loader threads run during it as they would during a GPU kernel.
"""

import time

import numpy as np
import torch

from .errors import HpcioError

__all__ = ["DISTRIBUTIONS", "ComputeTime", "EmulatedModel", "SPEC"]


def _fixed(rng, mean, std, n):
    return np.full(n, mean)


def _normal(rng, mean, std, n):
    return rng.normal(mean, std, n)


def _uniform(rng, mean, std, n):
    # a uniform distribution on [a, b] has stdev (b - a) / sqrt(12)
    half = std * np.sqrt(3.0)
    return rng.uniform(mean - half, mean + half, n)


def _lognormal(rng, mean, std, n):
    # parameters of the underlying normal that give this mean and stdev
    if mean <= 0:
        return np.zeros(n)
    s2 = np.log1p((std / mean) ** 2)
    return rng.lognormal(np.log(mean) - s2 / 2, np.sqrt(s2), n)


DISTRIBUTIONS = {"fixed": _fixed, "normal": _normal, "uniform": _uniform,
                 "lognormal": _lognormal}


class ComputeTime:
    """Per-step compute times in seconds: ``mean`` and ``std`` of the named distribution,
    negative draws clipped to 0. Seeded by (seed, rank); drawn in blocks (no per-step RNG
    set-up)."""

    def __init__(self, mean, std=0.0, dist="fixed", seed=0, rank=0, block=4096):
        if dist not in DISTRIBUTIONS:
            raise HpcioError(f"unknown compute-time distribution {dist!r} (choose from "
                             f"{', '.join(DISTRIBUTIONS)})", everywhere=True)
        if mean < 0 or std < 0:
            raise HpcioError("--compute-time and --compute-std must be >= 0",
                             everywhere=True)
        self.mean, self.std, self.dist = float(mean), float(std), dist
        self._rng = np.random.default_rng([int(seed), int(rank), 0xE3])
        self._block = block
        self._buf = np.empty(0)
        self._i = 0

    def draw(self):
        if self._i >= len(self._buf):
            self._buf = np.maximum(DISTRIBUTIONS[self.dist](self._rng, self.mean, self.std,
                                                            self._block), 0.0)
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return float(v)


class EmulatedModel(torch.nn.Module):
    """A model whose step is a sleep. It holds one scalar parameter so that optimisers,
    checkpoints and state dicts work unchanged; it never touches the input."""

    def __init__(self, compute):
        super().__init__()
        self.compute = compute
        self.w = torch.nn.Parameter(torch.zeros(1))

    def step(self):
        """Sleep for the next compute time; returns it."""
        dt = self.compute.draw()
        if dt > 0:
            time.sleep(dt)
        return dt


class _Spec:
    """Model spec of ``emulate``: no input shape of its own (the data's is used)."""

    name = "emulate"
    input_shape = None
    classes = None


SPEC = _Spec()
