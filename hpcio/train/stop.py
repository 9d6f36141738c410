"""How a run ends: a signal becomes a flag, the ranks vote to stop at the same step, and a
rank that sees no progress ends the job.

A Slurm time limit sends SIGTERM to every task (then SIGKILL after KillWait, 30 s by
default); ``mpiexec`` forwards SIGTERM to its ranks too, and Ctrl-C as SIGINT.
:class:`StopFlag` turns either signal into a flag; :class:`StopVote` makes every rank stop
at the *same* step even when the signal reaches them at different times, without a
blocking collective per step, so no rank is left waiting in a collective the others never
enter. :class:`Watchdog` ends the job with one line when a rank waits too long (a rank
stopped or hung, a node gone): without it the others wait in their next collective for
ever.
"""

import signal
import threading
import time

import numpy as np

from ..errors import abort

__all__ = ["StopFlag", "StopVote", "Watchdog", "STALL_EXIT", "signal_exit", "signal_name"]

STALL_EXIT = 3  # exit code of a job the watchdog ended


def signal_exit(signum):
    """The exit code of a run cut short by ``signum``: 128 + the signal number, as a shell
    reports a command a signal ended (SIGINT 130, SIGTERM 143), so a job script, Slurm's
    accounting and a sweep can tell a cut-short run from a complete one; 0 without one."""
    return 128 + int(signum) if signum else 0


def signal_name(signum):
    """``SIGTERM`` for 15; None for None."""
    if not signum:
        return None
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class StopFlag:
    """Set by SIGTERM (a Slurm time limit, or ``kill``) or SIGINT (Ctrl-C): the step loop
    checks it, and the run stops, flushes and says ``cut_short``. The handler only sets a
    flag, so it is safe whatever the main thread was doing. A second SIGINT interrupts at
    once (KeyboardInterrupt), for a run that does not reach its next step."""

    def __init__(self, signals=(signal.SIGTERM, signal.SIGINT)):
        self.signum = None
        self._old = {}
        for s in signals:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread
                pass

    def _handle(self, signum, frame):
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def __bool__(self):
        return self.signum is not None

    def restore(self):
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old = {}


class StopVote:
    """Agree on stopping at the same step on every rank, without blocking every step.

    Every ``every`` steps each rank posts a nonblocking MAX-allreduce of its flag (raised
    at any step since the last post) and completes the one it posted ``every`` steps
    earlier; every rank thus acts on the same vote at the same step, at most
    ``2 * every`` steps after the signal. Ranks may drift apart by up to ``every`` steps
    before a fast one waits in the vote: the vote does not couple ranks that training
    itself does not couple (the emulated model with ``--exchange-model none``; its gradient
    exchange and DDP couple them every step anyway). One vote is in flight at a time: MPICH 5.0.2 was seen to corrupt its heap
    with eight nonblocking allreduces outstanding on one communicator. The vote uses its
    own duplicate of the communicator, so it never mixes with the readers' collectives.
    :meth:`settle` completes the vote in flight and takes one more (at an epoch's end)."""

    def __init__(self, comm, every=4):
        self.comm = comm.Dup() if comm is not None and comm.size > 1 else None
        self.every = max(1, int(every))
        self.count = 0
        self.local = False
        self.pending = None

    def _finish(self):
        if self.pending is None:
            return False
        req, _, r = self.pending
        req.Wait()
        self.pending = None
        return bool(r[0])

    def poll(self, local):
        """Count a step with this rank's flag; True when the ranks have agreed to stop."""
        self.local = self.local or bool(local)
        if self.comm is None:
            return self.local
        self.count += 1
        if self.count % self.every:
            return False
        from mpi4py import MPI  # mpi4py: importing it starts MPI
        stop = self._finish()
        send = np.array([1 if self.local else 0], dtype=np.int32)
        recv = np.zeros(1, dtype=np.int32)
        self.pending = (self.comm.Iallreduce(send, recv, op=MPI.MAX), send, recv)
        return stop

    def settle(self, local):
        """Complete the vote in flight and take one more with ``local``: True if any rank
        asked to stop (collective; the same answer on every rank)."""
        self.local = self.local or bool(local)
        if self.comm is None:
            return self.local
        from mpi4py import MPI  # mpi4py: importing it starts MPI
        stop = self._finish()
        return bool(self.comm.allreduce(1 if (self.local or stop) else 0, op=MPI.MAX))

    def close(self):
        if self.comm is not None:
            self._finish()
            self.comm.Free()
            self.comm = None


class Watchdog(threading.Thread):
    """Ends the job when this rank makes no progress for ``timeout`` seconds.

    The training thread says what it is about to wait for with :meth:`mark` (two plain
    attribute stores: no lock, no system call); this daemon thread wakes a few times per
    timeout and, when ``beat`` has not moved for ``timeout`` seconds, prints one line
    naming the rank and what it waits for, and aborts the MPI job
    (exit :data:`STALL_EXIT`). A wake-up far later than asked means this process itself
    was stopped (SIGSTOP, a suspended job): the clock restarts instead of blaming the
    wait. ``timeout`` 0: never started, the stores cost nothing.

    It stays on through ``MPI_Finalize`` (:func:`hpcio.mpiutil.finalize` releases the GIL
    there): :meth:`finalizing` says so, and a finalize that hangs (a rank stopped after its
    last write) ends this process with the line, without an MPI abort."""

    def __init__(self, timeout, rank, prog, waiting="the run's set-up"):
        super().__init__(name="hpcio-watchdog", daemon=True)
        self.timeout = float(timeout)
        self.rank, self.prog = rank, prog
        self.waiting = waiting
        self.beat = 0
        self.in_finalize = False
        self._halt = threading.Event()

    def mark(self, waiting):
        """Progress: the caller is about to wait for ``waiting`` (words for the line)."""
        self.waiting = waiting
        self.beat += 1

    def finalizing(self):
        """Progress: the caller is about to enter ``MPI_Finalize``."""
        self.in_finalize = True
        self.mark("MPI_Finalize (every rank ends together)")

    def start(self):
        if self.timeout > 0:
            super().start()

    def run(self):
        period = min(1.0, self.timeout / 4)
        last, since = self.beat, time.monotonic()
        prev = since
        while not self._halt.wait(period):
            now, beat = time.monotonic(), self.beat
            if beat != last or now - prev > period + max(2.0, period):
                last, since = beat, now
            elif now - since >= self.timeout:
                abort(f"{self.prog}: rank {self.rank}: no progress for {self.timeout:g} s, "
                      f"waiting for {self.waiting}; ending the job (--stall-timeout)",
                      STALL_EXIT, mpi=not self.in_finalize)
            prev = now

    def stop(self):
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
