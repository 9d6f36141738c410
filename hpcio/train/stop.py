"""Stopping a run together: a signal becomes a flag, and the ranks vote to stop at the same
step.

A Slurm time limit sends SIGTERM to every task (then SIGKILL after KillWait, 30 s by
default); ``mpiexec`` forwards SIGTERM to its ranks too. :class:`StopFlag` turns the signal
into a flag; :class:`StopVote` makes every rank stop at the *same* step even when the
signal reaches them at different times, without a blocking collective per step, so no rank
is left waiting in a collective the others never enter.
"""

import signal

import numpy as np

__all__ = ["StopFlag", "StopVote"]


class StopFlag:
    """Set by SIGTERM (a Slurm time limit, or ``kill``): the step loop checks it. The
    handler only sets a flag, so it is safe whatever the main thread was doing."""

    def __init__(self, signals=(signal.SIGTERM,)):
        self.signum = None
        self._old = {}
        for s in signals:
            try:
                self._old[s] = signal.signal(s, self._handle)
            except ValueError:  # not the main thread
                pass

    def _handle(self, signum, frame):
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
    itself does not couple (the emulated model has no allreduce; DDP couples them every
    step anyway). One vote is in flight at a time: MPICH 5.0.2 was seen to corrupt its heap
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
        from mpi4py import MPI
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
        from mpi4py import MPI
        stop = self._finish()
        return bool(self.comm.allreduce(1 if (self.local or stop) else 0, op=MPI.MAX))

    def close(self):
        if self.comm is not None:
            self._finish()
            self.comm.Free()
            self.comm = None
