"""Progress on rank 0 that reaches the user through a pipe.

mpiexec, srun and batch logs give the ranks pipes, not terminals: a tqdm bar there is
either hidden or one ever-growing line of carriage returns. So a bar on a terminal, and
otherwise a plain line every ``every`` seconds (none for work shorter than that).
"""

import sys
import time

from tqdm import tqdm

__all__ = ["Progress", "MODES", "EVERY"]

MODES = ("auto", "bar", "lines", "off")
EVERY = 20.0  # s between plain lines: often enough to see a job move, rare enough for a log


def _duration(s):
    s = int(s)
    return f"{s // 3600}h{s // 60 % 60:02d}m" if s >= 3600 else \
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class Progress:
    """``total`` units of work; ``mode``: ``auto`` (a bar when ``file`` is a terminal, plain
    lines otherwise), ``bar``, ``lines`` or ``off``; ``bar`` keywords go to tqdm."""

    def __init__(self, total, unit, label, file=None, mode="auto", every=EVERY, **bar):
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r} (choose from {', '.join(MODES)})")
        self.file = file if file is not None else sys.stderr
        if mode == "auto":
            mode = "bar" if self.file.isatty() else "lines"
        self.mode, self.total, self.unit, self.label, self.every = (mode, total, unit,
                                                                    label, every)
        self.n = 0
        self.t0 = self.last = time.monotonic()
        self.bar = None
        if mode == "bar":
            self.bar = tqdm(total=total, unit=unit, desc=label, file=self.file,
                            dynamic_ncols=True, **bar)

    def update(self, n=1):
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.mode == "lines":
            now = time.monotonic()
            if now - self.last >= self.every:
                self.last = now
                print(self.line(now), file=self.file, flush=True)

    def line(self, now=None):
        """``label: unit done/total (p%), rate/s, ~time left``."""
        dt = (now if now is not None else time.monotonic()) - self.t0
        rate = self.n / dt if dt > 0 else 0.0
        text = f"{self.label}: {self.unit} {self.n:,}/{self.total:,}"
        if self.total:
            text += f" ({100 * self.n / self.total:.0f}%)"
        text += f", {rate:,.1f}/s"
        if rate > 0 and self.total:
            text += f", ~{_duration(max(0, self.total - self.n) / rate)} left"
        return text

    def close(self):
        if self.bar is not None:
            self.bar.close()
