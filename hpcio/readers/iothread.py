"""The coordinated reader's I/O thread: it reads the requests of the epochs it is given, in
order, each into a free slot of the ring, so it runs ahead of the consumer by as many
requests as the ring holds, across the end of an epoch when the next epoch's job is queued.
Blocking reads release the GIL (MPI is initialised with ``MPI_THREAD_MULTIPLE``).
"""

import queue
import threading

__all__ = ["IOThread", "Job", "DONE"]

DONE = object()  # a job's last item: every request it was to read was read


class Job:
    """One epoch's requests for the I/O thread, handed over on ``ready`` in order, then
    :data:`DONE` (or the exception that stopped it)."""

    __slots__ = ("plan", "reqs", "touched", "ready", "stop")

    def __init__(self, plan, reqs, touched):
        self.plan, self.reqs, self.touched = plan, reqs, touched
        self.ready = queue.Queue()
        self.stop = len(reqs)  # requests from this one on are not read


class IOThread:
    """Reads with ``read(request, files)`` and advises the kernel with ``advise(request)``
    (the next request's ranges, after the current one is handed over) into ``slots``
    ring slots."""

    def __init__(self, read, advise, slots):
        self.slots = slots
        # the slot freed last is read into first: its buffer is resident and large
        # enough already, and a slot never needed at once with the others is never
        # grown (first in, first out touched a new slot each epoch until all were: a
        # ring's worth of RSS growth that looked like a per-epoch leak)
        self.free, self.jobs = queue.LifoQueue(), queue.Queue()
        for k in reversed(range(slots)):
            self.free.put(k)
        self.thread = threading.Thread(target=self._run, args=(read, advise),
                                       name="hpcio-io", daemon=True)
        self.thread.start()

    def _run(self, read, advise):
        err = None
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                if err is not None:
                    raise err
                reqs = job.reqs
                advise(reqs[0] if reqs else None)
                for r in reqs:
                    slot = self.free.get()
                    if r.g >= job.stop:
                        self.free.put(slot)
                        break
                    r.slot = slot
                    read(r, job.touched[r.g])
                    job.ready.put(r)
                    if r.g + 1 < min(job.stop, len(reqs)):  # after the hand-over
                        advise(reqs[r.g + 1])
                job.ready.put(DONE)
            except BaseException as e:  # handed to the consumer, raised there
                err = e
                job.ready.put(e)

    def finish(self, job, held=(), last=-1):
        """Stop ``job`` early: the consumer took requests up to ``last`` and holds the
        slots ``held``. The thread can have read at most the requests the other slots
        hold beyond ``last``, so it reads exactly those, on every rank alike (every rank
        stops at the same batch and all leave the collectives together); their slots come
        back to the ring."""
        job.stop = min(job.stop, last + 1 + self.slots - len(held))
        for slot in held:
            self.free.put(slot)
        while True:
            item = job.ready.get()
            if item is DONE or isinstance(item, BaseException):
                return
            self.free.put(item.slot)

    def close(self):
        self.jobs.put(None)
        self.thread.join()
