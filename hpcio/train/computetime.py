"""The emulated step's compute times: fixed or drawn from DLIO's distributions, per rank.

Apart from :mod:`.emulate` (torch) so that the command line and the tests name the
distributions without loading torch. The draws are seeded per rank, so a run repeats
exactly and ranks do not move in lock step.
"""

import numpy as np

from ..errors import HpcioError, lookup

__all__ = ["DISTRIBUTIONS", "ComputeTime"]


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
        lookup(DISTRIBUTIONS, dist, "compute-time distribution")
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
