"""The forked engines' runner: chunks of cases, each simulated in a forked child pinned to a
core, as many at once as this process may use cores (:func:`jobs`), the next started as
one ends.

The cores are the process's, not a call's: threads that simulate side by side
(:func:`beside`: a prediction's held-out calibration beside its own, its best fits' points
beside the runs that choose its ranges' fits) take them as they free up, so no core waits
for the slowest engine of a phase while work of another is ready. SimGrid runs one engine
per process, and its actors are threads handing the core to one another at every simulated
call: on one core no other core is woken, and as SCHED_BATCH threads (:func:`batch`) a
hand-off is two context switches, not ~5.
"""

import os
import pickle
import selectors
import signal
import sys
import threading
import traceback
from contextlib import ExitStack, contextmanager

from ..errors import HpcioError

__all__ = ["jobs", "run", "beside", "together", "batch", "Stopped"]

POLL_S = 0.5        # how often engines running beside others look whether those failed


class Stopped(HpcioError):
    """This thread's engines were ended because work running beside them failed."""


class _Died(HpcioError):
    """An engine ended without an answer (killed by a signal: once seen, SIGABRT, in ~10
    predictions run with threads side by side; not reproduced in 376 engine runs of three
    threads forking at once)."""


def jobs():
    """How many engines run at once: the CPUs this process may use (``HPCIO_SIM_JOBS``
    overrides)."""
    given = os.environ.get("HPCIO_SIM_JOBS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def batch():
    """This process (and the threads it starts: SimGrid's actors) scheduled as SCHED_BATCH.

    Each simulated call hands the core from the actor's thread to SimGrid's maestro and
    back through semaphores whose release wakes the other thread while holding its mutex:
    a woken thread that preempts the waker at once blocks on that mutex, so a call took
    4.7 context switches (11 us of CPU) where 2 do (7 us, measured on a sleep_for). A batch
    thread does not preempt on wake-up; the hand-off order is SimGrid's, so every result
    is the same."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):    # not Linux, or refused: the default policy
        pass


class _Cores:
    """The process's engine slots (:func:`jobs`, each a core to pin to when there are that
    many, else None), taken by whichever thread's engine starts next, a thread working
    behind others (``behind``: its :func:`beside` said so) only when no other waits; a
    thread waiting for one is woken through its pipe when one may be free."""

    def __init__(self):
        self.lock = threading.Lock()
        self.free, self.busy, self.waiting = [], 0, {}

    def take(self, wake_fd, behind):
        """A free slot, or None (then ``wake_fd`` is written to when one may be)."""
        with self.lock:
            if not self.busy:       # idle: the slots as jobs() and the affinity say now
                n = jobs()
                cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
                    else []
                self.free = [cpus[k % len(cpus)] if len(cpus) >= n else None
                             for k in range(n)]
            ahead = any(b < behind for fd, b in self.waiting.items() if fd != wake_fd)
            if not self.free or ahead:
                self.waiting[wake_fd] = behind
                return None
            self.waiting.pop(wake_fd, None)
            self.busy += 1
            slot = ("slot", self.free.pop(0))
            if self.free:
                self._wake()
            return slot

    def give(self, slot):
        with self.lock:
            self.busy -= 1
            self.free.append(slot[1])
            self._wake()

    def _wake(self):
        for fd in self.waiting:
            try:
                os.write(fd, b"!")
            except OSError:         # full (it has been told already) or closed
                pass

    def forget(self, wake_fd):
        with self.lock:
            if self.waiting.pop(wake_fd, None) is not None and self.free:
                self._wake()


_CORES = _Cores()
#: per thread: .stops, Events (one set when work beside this thread failed); .behind, how
#: many beside(..., behind=True) this thread's work is behind (its engines yield to others')
_local = threading.local()


#: held from a child's pipes to the parent closing their write ends: a child forked by
#: another thread meanwhile would hold them too, and its sibling's EOF (an engine ended,
#: perhaps failed) would not come before it ended
_FORKING = threading.Lock()


def _start(work, chunk, cpu):
    """A forked child running ``work(chunk, tick)``, pinned to ``cpu`` (or not, None):
    (pid, the pipe it answers on, the pipe it ticks a byte on per simulated step)."""
    with _FORKING:
        rfd, wfd = os.pipe()
        tr, tw = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: one SimGrid engine, then gone
            _child(work, chunk, cpu, rfd, wfd, tr, tw)
        os.close(wfd)
        os.close(tw)
    return pid, rfd, tr


def _child(work, chunk, cpu, rfd, wfd, tr, tw):
    os.close(rfd)
    os.close(tr)
    try:
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        batch()
        payload = ("ok", work(chunk, lambda: os.write(tw, b".")))
    except BaseException as e:  # carried to the parent, said there as one line
        payload = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
    with os.fdopen(wfd, "wb") as f:
        pickle.dump(payload, f)
    os._exit(0)


def _answer(pid, data):
    """What the child ``pid`` sent (``data``): its chunk's results, or an error raised here."""
    _, status = os.waitpid(pid, 0)
    if not data:
        raise _Died(f"the SimGrid engine died (wait status {status})")
    payload = pickle.loads(data)
    if payload[0] != "ok":
        if os.environ.get("HPCIO_DEBUG"):
            sys.stderr.write(payload[2])
        raise HpcioError(f"the simulation failed: {payload[1]}")
    return payload[1]


class _Run:
    """One call's chunks in flight: its children, what they sent, the slots they hold."""

    def __init__(self, work, chunks, progress):
        self.work, self.chunks, self.progress = work, chunks, progress
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, None)
        self.todo = list(range(len(chunks)))[::-1]
        self.live, self.results, self.failed = {}, [None] * len(chunks), []
        self.retried = set()

    def fill(self):
        """Start chunks while slots are free (none after a failure)."""
        while self.todo and not self.failed:
            slot = _CORES.take(self.wake_w, getattr(_local, "behind", 0))
            if slot is None:
                return
            k = self.todo.pop()
            try:
                pid, rfd, tr = _start(self.work, self.chunks[k], slot[1])
            except BaseException:
                _CORES.give(slot)
                raise
            self.live[k] = {"pid": pid, "data": bytearray(), "open": 2, "slot": slot}
            self.sel.register(rfd, selectors.EVENT_READ, (k, False))
            self.sel.register(tr, selectors.EVENT_READ, (k, True))

    def read(self, key):
        """Take what one of the children's pipes has; a child whose pipes are both closed
        is reaped, its slot given back."""
        if key.data is None:
            os.read(key.fd, 1 << 10)        # a slot freed: fill() takes it
            return
        k, is_tick = key.data
        chunk = os.read(key.fd, 1 << 20)
        if chunk:
            if not is_tick:
                self.live[k]["data"] += chunk
            elif self.progress is not None:
                self.progress.update(len(chunk))
            return
        self.sel.unregister(key.fd)
        os.close(key.fd)
        child = self.live[k]
        child["open"] -= 1
        if child["open"]:
            return
        del self.live[k]
        _CORES.give(child["slot"])
        try:
            self.results[k] = _answer(child["pid"], bytes(child["data"]))
        except _Died as e:
            if k in self.retried:
                self.failed.append(e)
            else:   # once more: deterministic, so the same results if it lives
                self.retried.add(k)
                self.todo.append(k)
                sys.stderr.write(f"hpcio.simulate: {e}; running its cases again\n")
        except HpcioError as e:
            self.failed.append(e)

    def kill(self):
        """End and reap every child still running (work beside this failed)."""
        for child in self.live.values():
            try:
                os.kill(child["pid"], signal.SIGKILL)
                os.waitpid(child["pid"], 0)
            except OSError:
                pass
            _CORES.give(child["slot"])
        self.live.clear()

    def close(self):
        _CORES.forget(self.wake_w)
        for key in list(self.sel.get_map().values()):
            os.close(key.fd)
        os.close(self.wake_w)
        self.sel.close()


def run(work, chunks, progress=None, order=None):
    """``work(chunk, tick)`` for every chunk of ``chunks``, each in a forked engine on a
    slot of this process's (:func:`jobs`), started in ``order`` (indices; the largest
    first is best) as slots free up; every answer read as it comes (a child never blocks on
    a full pipe) and every child reaped, also past a failed one (no chunk is started after
    a failure). Their results, in the chunks' order."""
    r = _Run(work, chunks, progress)
    if order is not None:
        r.todo = list(order)[::-1]
    stops = getattr(_local, "stops", ())
    try:
        while True:
            r.fill()
            if not r.live and (not r.todo or r.failed):
                break
            if any(s.is_set() for s in stops):
                raise Stopped("stopped: the work beside it failed")
            for key, _ in r.sel.select(POLL_S if stops else None):
                r.read(key)
    finally:
        r.kill()
        r.close()
    if r.failed:
        raise r.failed[0]
    return r.results


class _Beside:
    """The thread of :func:`beside`: ``result()`` waits for it, its error raised there."""

    def __init__(self, fn, args, stops, behind):
        self.box, self.group = {}, stops[-1]
        self.thread = threading.Thread(target=self._main, args=(fn, args, stops, behind),
                                       daemon=True)
        self.thread.start()

    def _main(self, fn, args, stops, behind):
        _local.stops, _local.behind = stops, behind
        try:
            self.box["value"] = fn(*args)
        except BaseException as e:
            self.box["error"] = e
            self.group.set()

    def result(self):
        self.thread.join()
        if "error" in self.box:
            raise self.box["error"]
        return self.box["value"]


@contextmanager
def beside(fn, *args, behind=False):
    """``fn(*args)`` in a thread while the block runs, their engines sharing this process's
    slots (``behind``: its engines take a core only when no engine of the block waits for
    one); yields the handle whose ``result()`` waits for it (its error raised there, or
    as the block ends). An error on either side ends the other's engines (within
    :data:`POLL_S`, as it does those of work beside an enclosing block) and is raised, the
    one that was not a :class:`Stopped`."""
    before = getattr(_local, "stops", ())
    stops = before + (threading.Event(),)
    _local.stops = stops
    job = _Beside(fn, args, stops, getattr(_local, "behind", 0) + bool(behind))
    try:
        yield job
    except BaseException:
        stops[-1].set()
        job.thread.join()
        error = job.box.get("error")
        if error is not None and not isinstance(error, Stopped):
            raise error
        raise
    finally:
        _local.stops = before
    job.result()


def together(calls):
    """``[fn(*args) for fn, args in calls]``, each in a thread of its own (the first in
    this one), their engines sharing the slots alike; as :func:`beside` on an error."""
    calls = list(calls)
    if len(calls) < 2:
        return [fn(*args) for fn, args in calls]
    with ExitStack() as stack:
        jobs_ = [stack.enter_context(beside(fn, *args)) for fn, args in calls[1:]]
        first = calls[0][0](*calls[0][1])
        return [first] + [j.result() for j in jobs_]
