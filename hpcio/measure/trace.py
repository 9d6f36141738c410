"""Each rank's steps as a DFTracer trace (``--trace``), for Perfetto, DFAnalyzer and WisIO.

The format is DFTracer's (docs/trace_format.rst of github.com/LLNL/dftracer): a line
``[``, then one JSON object per line, no commas, ``]`` at the end (a trace cut short
lacks it; its readers accept that). Complete events ``{"id", "name", "cat", "pid",
"tid", "ts", "dur", "ph": "X", "args"}`` with ``ts`` and ``dur`` in integer microseconds
(``ts`` since the Unix epoch, this node's clock); metadata events ``"ph": "M"``: ``HH``
(host name and its hash, the ``hhash`` of every event's args), ``PR`` (rank, ranks, run
directory, clock offset to rank 0), Chrome's ``process_name`` / ``thread_name``.
Gzip-compressed by default (``rank-<r>.pfw.gz``): DFTracer 2's reader
(``dftracer.utils.TraceViewer``) reads only gzip, and Perfetto and DFAnalyzer 1 read
both; each write is one gzip member, so what was flushed stays readable after a crash.

Event names are pydftracer's ``ai`` vocabulary (``dftracer.python.ai``: category, then
name), with the layer names DFAnalyzer's AI views select on (``fetch.iter``, pipeline
``epoch*``), one event per step component that lasted at least a microsecond:

==========================  ==================================================  ===========
cat / name                  span                                                steps.py
==========================  ==================================================  ===========
pipeline / train            the run's steps, first to last                      sum of wall
pipeline / epoch.block      one epoch's steps (as ``ai.pipeline.epoch.iter``)   its wall
pipeline / step             one step, t0 to t7 (hpcio's; DFTracer has none)     wall
dataloader / fetch.iter     the wait for the batch, t0 to t1 (DLIO's name)      stall
dataloader / fetch          inside it, the overlap with the reader's call       fetch
data / preprocess           inside it, the overlap with preprocessing           prep
device / transfer           host-to-device copy                                 h2d
compute / compute           forward, backward, optimiser (emulate: the sleep)   compute
comm / barrier              waiting for the slowest rank (a barrier)            straggler_wait
comm / all_reduce           the gradient allreduce                              exchange
checkpoint / capture        a checkpoint written                                ckpt
==========================  ==================================================  ===========

``stall_other`` (hand-over) is the rest of ``fetch.iter``, ``other`` (bookkeeping) the rest
of ``step``. Every event's args carry ``epoch`` and ``step`` (0-based, the step within its
epoch, as in rank-<r>.npz); ``step`` also ``records`` and ``nbytes``.

The events are made from the rank's step log (:class:`hpcio.measure.steps.StepLog`), the
same ``perf_counter`` stamps as rank-<r>.npz, on the flusher's thread at each epoch end
and every ``--flush-interval``: nothing is added to a step. Every boundary is rounded to
the microsecond once, so events nest exactly and each duration is within 1 us of its
component.
"""

import gzip
import json
import os
import threading
import zlib

import numpy as np

from ..errors import HpcioError

__all__ = ["TraceWriter", "read_trace", "EVENTS"]

# component (or span) -> (cat, name): pydftracer's ai.<cat>.<name>
EVENTS = {
    "train": ("pipeline", "train"),
    "epoch": ("pipeline", "epoch.block"),
    "step": ("pipeline", "step"),
    "stall": ("dataloader", "fetch.iter"),
    "fetch": ("dataloader", "fetch"),
    "prep": ("data", "preprocess"),
    "h2d": ("device", "transfer"),
    "compute": ("compute", "compute"),
    "straggler_wait": ("comm", "barrier"),
    "exchange": ("comm", "all_reduce"),
    "ckpt": ("checkpoint", "capture"),
}
# the components between t1 and t7 in stamp order (hpcio.measure.steps)
_AFTER_WAIT = ("h2d", "compute", "straggler_wait", "exchange", "ckpt")


def host_hash(host):
    """A host's ``hhash``: stable across ranks and runs (DFTracer hashes the name too)."""
    return zlib.crc32(host.encode()) & 0x7FFFFFFF


class TraceWriter:
    """One rank's trace file, appended to as steps accumulate. :meth:`open` claims the
    file exclusively: a trace directory shared by runs never mixes two of them."""

    def __init__(self, f, path, gz, pid, tid, hhash):
        self.f, self.path, self.gz = f, path, gz
        self.pid, self.tid, self.hhash = pid, tid, hhash
        self.origin_us = 0
        self.id = 0
        self.rows = 0            # step rows written
        self.spans = {}          # epoch -> [first t0, last end], seconds from origin
        self.epochs_written = 0
        self.closed = False
        self.lock = threading.Lock()
        self.head = []

    @classmethod
    def open(cls, path, gz=True):
        """Create ``path`` (and its directory); one-line HpcioError if it cannot be. Call
        on the training thread: its id is the events' ``tid``."""
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            f = open(path, "xb")
        except FileExistsError:
            raise HpcioError(f"trace {path}: exists (traces are never overwritten; give "
                             f"a new --trace-dir)")
        except OSError as e:
            raise HpcioError(f"trace {path}: {e.strerror}")
        return cls(f, path, gz, os.getpid(), threading.get_native_id(), 0)

    def start(self, origin_unix, host, rank, size, **meta):
        """The metadata that opens the trace; ``origin_unix`` is the moment step ``t0`` s
        count from (time.time() at the step log's origin)."""
        self.origin_us = round(origin_unix * 1e6)
        self.hhash = host_hash(host)
        meta = dict(rank=rank, ranks=size, hostname=host, **meta)
        lines = ["[",
                 self._meta("HH", {"name": host, "value": self.hhash}),
                 self._meta("CM", {"name": "time_metric", "value": "US"}),
                 self._meta("process_name", {"name": f"rank {rank} ({host})"}),
                 self._meta("thread_name", {"name": "training"})]
        lines += [self._meta("PR", {"name": k, "value": v}) for k, v in meta.items()]
        self.head = lines

    def _meta(self, name, args):
        self.id += 1
        return json.dumps({"id": self.id, "name": name, "cat": "dftracer", "pid": self.pid,
                           "tid": self.tid, "ph": "M", "args": args},
                          separators=(",", ":"), default=str)

    def _event(self, what, ts, dur, args):
        self.id += 1
        cat, name = EVENTS[what]
        return (f'{{"id":{self.id},"name":"{name}","cat":"{cat}","pid":{self.pid},'
                f'"tid":{self.tid},"ts":{ts},"dur":{dur},"ph":"X","args":{{'
                f'"hhash":{self.hhash},{args}}}}}')

    def _us(self, seconds):
        """Seconds from the origin -> integer microseconds since the Unix epoch."""
        return np.rint(np.asarray(seconds) * 1e6).astype(np.int64) + self.origin_us

    def _steps(self, log, lo, hi):
        """Event lines of step rows [lo, hi)."""
        c = {f: log.column(f)[lo:hi] for f in ("epoch", "step", "t0", "wall", "fetch",
                                                "prep", "stall_other", "records", "nbytes")
             + _AFTER_WAIT}
        t0 = c["t0"]
        t1 = t0 + c["fetch"] + c["prep"] + c["stall_other"]
        bounds = {"t0": t0, "t1": t1, "t7": t0 + c["wall"]}
        bounds["fetch0"] = t0 + log.lead[lo:hi]
        bounds["fetch1"] = bounds["fetch0"] + c["fetch"]
        bounds["prep1"] = bounds["fetch1"] + c["prep"]
        spans = {"step": ("t0", "t7"), "stall": ("t0", "t1"), "fetch": ("fetch0", "fetch1"),
                 "prep": ("fetch1", "prep1")}
        at, prev = t1, "t1"
        for comp in _AFTER_WAIT:
            at = at + c[comp]
            bounds[comp] = at
            spans[comp] = (prev, comp)
            prev = comp
        us = {k: self._us(v) for k, v in bounds.items()}
        lines = []
        for i in range(hi - lo):
            e, s = int(c["epoch"][i]), int(c["step"][i])
            args = f'"epoch":{e},"step":{s}'
            for what, (a, b) in spans.items():
                ts, dur = int(us[a][i]), int(us[b][i] - us[a][i])
                if what == "step":
                    lines.append(self._event(what, ts, dur, args + f',"records":'
                                             f'{int(c["records"][i])},"nbytes":'
                                             f'{int(c["nbytes"][i])}'))
                elif dur > 0:
                    lines.append(self._event(what, ts, dur, args))
            span = self.spans.setdefault(e, [t0[i], bounds["t7"][i]])
            span[1] = bounds["t7"][i]
        return lines

    def _epochs(self, upto):
        """Event lines of the epochs below ``upto`` not written yet."""
        lines = []
        for e in sorted(k for k in self.spans if self.epochs_written <= k < upto):
            a, b = self._us(self.spans[e])
            lines.append(self._event("epoch", int(a), int(b - a), f'"epoch":{e}'))
            self.epochs_written = e + 1
        return lines

    def _append(self, lines):
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        try:
            self.f.write(gzip.compress(data, compresslevel=6, mtime=0) if self.gz else data)
            self.f.flush()
        except OSError as e:
            raise HpcioError(f"trace {self.path}: {e.strerror}")

    def _new(self, log, epochs_done):
        """Lines not written yet: the head, the new steps, the finished epochs."""
        n = log.n
        lines, self.head = self.head, []
        lines += self._steps(log, self.rows, n)
        self.rows = n
        if epochs_done is None:  # the end: every epoch seen is over
            epochs_done = max(self.spans) + 1 if self.spans else 0
        return lines + self._epochs(epochs_done)

    def write(self, log, epochs_done):
        """Append the steps recorded since the last write, and the spans of the epochs
        below ``epochs_done`` (finished: all their steps are in the log). Safe beside the
        training thread: ``epochs_done`` is read before the log's count."""
        with self.lock:
            if not self.closed:
                self._append(self._new(log, epochs_done))

    def close(self, log):
        """The last steps, every epoch's span, the run's span, and ``]``."""
        with self.lock:
            if self.closed:
                return
            lines = self._new(log, None)
            if self.spans:
                a = self._us(min(v[0] for v in self.spans.values()))
                b = self._us(max(v[1] for v in self.spans.values()))
                lines.append(self._event("train", int(a), int(b - a),
                                         f'"epochs":{len(self.spans)}'))
            self._append(lines + ["]"])
            self.closed = True
            self.f.close()


def read_trace(path):
    """The events of a DFTracer trace (``.pfw`` or ``.pfw.gz``), as the format's readers
    take it: every line but ``[`` and ``]`` one JSON object. Returns (complete events,
    metadata events)."""
    opener = gzip.open if path.endswith(".gz") else open
    events, meta = [], []
    with opener(path, "rt") as f:
        for line in f:
            line = line.strip()
            if not line or line in ("[", "]"):
                continue
            ev = json.loads(line)
            (meta if ev.get("ph") == "M" else events).append(ev)
    return events, meta
