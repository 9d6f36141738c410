"""Per-step accounting, counters, a sampler thread, and the summary figures (AU & co).

Step accounting (per rank, per step; ``time.perf_counter`` stamps taken back to back, so
the components add up to the step's wall time exactly)::

    t0 step start ─ wait for the next prepared batch ─ t1 ─ host-to-device copy ─ t2
       ─ forward + backward + gradient allreduce + optimiser step (device-synchronised;
         for ``emulate`` the sleep) ─ t3 ─ checkpoint, if due ─ t4 ─ bookkeeping ─ t5
    and t5 is the next step's t0.

=============  ==============================================================================
component      definition
=============  ==============================================================================
stall          t1 - t0: training blocked waiting for its batch; split into
fetch          the part of [t0, t1] that overlaps the batch's reader call [t_fetch0, t_fetch1]
prep           the part of [t0, t1] that overlaps its preprocessing [t_fetch1, t_prep1]
stall_other    stall - fetch - prep: hand-over, queueing, exchange between ranks
h2d            t2 - t1: host-to-device copy (synchronised on GPU; ~0 on CPU)
compute        t3 - t2: what an accelerator would be busy with
ckpt           t4 - t3: checkpoint written in this step (0 in most steps, and on ranks > 0)
other          t5 - t4: harness bookkeeping (records, stop vote, progress bar)
wall           t5 - t0 = fetch + prep + stall_other + h2d + compute + ckpt + other
=============  ==============================================================================

Summary figures (:func:`summarize`), computed at the end from small per-rank summaries:

* **AU** (accelerator utilisation, %) = compute / wall, as DLIO and MLPerf Storage define it.
  Like MLPerf Storage (DLIO's ``metric_exclude_start_steps = 1``) the **first step of every
  epoch is excluded** from AU and the throughput figures: it carries pipeline start-up (the
  first read cannot overlap any compute). Per rank AU_r = sum(compute) / sum(wall) over the
  included steps; the run's AU is the mean over ranks (DLIO averages ranks the same way).
  If no step is left after the exclusion (1-step epochs), all steps are used and the
  summary says so (``au_excludes_first_step: false``).
* **samples/s** = sum over ranks of records_r / wall_r over the included steps (DLIO's
  throughput: each rank's rate, summed).
* **MiB/s** = the same with record bytes delivered to the trainer (measured per batch,
  not records x a nominal size), / 2**20.
* **stall %** = sum of stall / sum of wall over all ranks' included steps, with its
  fetch / prep / stall_other split; likewise h2d %, compute %, ckpt %, other %.
* **slowest vs fastest rank**: each rank's epoch time (sum of its step walls, all steps,
  all epochs); max / min over ranks and which ranks.
"""

import dataclasses
import os
import resource
import threading
import time

import numpy as np

__all__ = ["STEP_FIELDS", "COMPONENTS", "StepLog", "split_stall", "proc_io", "rusage",
           "counters", "delta", "block_device", "Sampler", "rank_summary", "summarize",
           "format_table"]

STEP_FIELDS = ("epoch", "step", "t0", "wall", "fetch", "prep", "stall_other", "h2d",
               "compute", "ckpt", "other", "records", "nbytes", "fetch_s", "prep_s")
COMPONENTS = ("fetch", "prep", "stall_other", "h2d", "compute", "ckpt", "other")
_COL = {f: i for i, f in enumerate(STEP_FIELDS)}


def split_stall(t0, t1, f0, f1, p1):
    """(fetch, prep, other) parts of the wait [t0, t1]: its overlap with the batch's reader
    call [f0, f1] and with its preprocessing [f1, p1]; the rest is hand-over/queueing."""
    fetch = max(0.0, min(t1, f1) - max(t0, f0))
    prep = max(0.0, min(t1, p1) - max(t0, f1))
    return fetch, prep, (t1 - t0) - fetch - prep


class StepLog:
    """This rank's step records in one preallocated float64 array (one row per step):
    recording a step is one row assignment, no growing Python lists on the hot path.
    ``t0`` is relative to ``origin`` (the run's start on this rank)."""

    def __init__(self, capacity, origin=None):
        self.rows = np.zeros((max(int(capacity), 1), len(STEP_FIELDS)), dtype=np.float64)
        self.n = 0
        self.origin = time.perf_counter() if origin is None else origin

    def add(self, epoch, step, t0, t1, t2, t3, t4, t5, f0, f1, p1, records, nbytes,
            fetch_s=0.0, prep_s=0.0):
        """Record one step from its time stamps (see the module docstring)."""
        if self.n == len(self.rows):  # only if the plan was longer than announced
            self.rows = np.concatenate([self.rows, np.zeros_like(self.rows)])
        fetch, prep, other = split_stall(t0, t1, f0, f1, p1)
        self.rows[self.n] = (epoch, step, t0 - self.origin, t5 - t0, fetch, prep, other,
                             t2 - t1, t3 - t2, t4 - t3, t5 - t4, records, nbytes,
                             fetch_s, prep_s)
        self.n += 1

    def column(self, name):
        return self.rows[:self.n, _COL[name]]

    def arrays(self):
        """Named columns (ints where the field is a count), for ``np.savez``."""
        out = {}
        for f in STEP_FIELDS:
            col = self.column(f)
            out[f] = col.astype(np.int64) if f in ("epoch", "step", "records",
                                                     "nbytes") else col.copy()
        return out


def proc_io():
    """/proc/self/io as a dict (rchar, wchar, syscr, syscw, read_bytes, write_bytes, ...):
    ``read_bytes`` is what this process caused to be fetched from storage; memory-mapped
    reads are not in it (see page faults)."""
    out = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except (OSError, ValueError):
        pass
    return out


def rusage():
    """getrusage(RUSAGE_SELF): CPU seconds, page faults (major ones are mmap reads that
    went to storage), block I/O operations, context switches, peak RSS."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return {"utime": r.ru_utime, "stime": r.ru_stime, "minflt": r.ru_minflt,
            "majflt": r.ru_majflt, "inblock": r.ru_inblock, "oublock": r.ru_oublock,
            "nvcsw": r.ru_nvcsw, "nivcsw": r.ru_nivcsw, "maxrss_kib": r.ru_maxrss}


def counters(reader=None):
    """A snapshot of every counter: reader stats, /proc/self/io, getrusage."""
    snap = {"io": proc_io(), "rusage": rusage()}
    st = getattr(reader, "stats", None)
    if st is not None:  # the counters only, not the reader's settings kept in ``extra``
        snap["reader"] = {f.name: getattr(st, f.name) for f in dataclasses.fields(st)
                          if isinstance(getattr(st, f.name), (int, float))
                          and not isinstance(getattr(st, f.name), bool)}
    return snap


def delta(a, b):
    """``b - a`` for every numeric leaf of two :func:`counters` snapshots (peak RSS is
    not a counter: its end value is kept)."""
    out = {}
    for k, vb in b.items():
        va = a.get(k)
        if isinstance(vb, dict):
            out[k] = delta(va or {}, vb)
        elif k == "maxrss_kib":
            out[k] = vb
        elif isinstance(vb, (int, float)) and isinstance(va, (int, float)):
            out[k] = vb - va
    return out


def block_device(path):
    """The whole-disk block device name (e.g. ``sda``) holding ``path``, or None (tmpfs,
    overlay, network file systems)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    link = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    try:
        real = os.path.realpath(link)
    except OSError:
        return None
    if not os.path.exists(real):
        return None
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


def _whole_disks():
    try:
        return [d for d in os.listdir("/sys/block")
                if not d.startswith(("loop", "ram", "zram"))]
    except OSError:
        return []


def _sectors_read(devices):
    total = 0
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if len(p) > 5 and p[2] in devices:
                    total += int(p[5])
    except OSError:
        pass
    return total


def _cpu_times():
    """(user+nice, system+irq+softirq, iowait, idle, total) jiffies from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            p = f.readline().split()
        v = [int(x) for x in p[1:]]
    except (OSError, ValueError):
        return None
    v += [0] * (8 - len(v))
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + nice, system + irq + softirq, iowait, idle, sum(v[:8])


def _rss_bytes():
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class _Gpu:
    """GPU utilisation and memory through pynvml (nvidia-ml-py), when there is one."""

    def __init__(self, device):
        self.h = None
        try:
            import pynvml
            import torch
            pynvml.nvmlInit()
            self.nvml = pynvml
            props = torch.cuda.get_device_properties(device)
            bus = getattr(props, "pci_bus_id", None)
            if bus is not None:  # CUDA_VISIBLE_DEVICES renumbers; the PCI id does not
                dom = getattr(props, "pci_domain_id", 0)
                devid = getattr(props, "pci_device_id", 0)
                self.h = pynvml.nvmlDeviceGetHandleByPciBusId(
                    f"{dom:08X}:{bus:02X}:{devid:02X}.0".encode())
            else:
                self.h = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no pynvml, no driver: the sample just has no GPU fields
            self.h = None

    def sample(self):
        if self.h is None:
            return float("nan"), float("nan")
        try:
            u = self.nvml.nvmlDeviceGetUtilizationRates(self.h)
            m = self.nvml.nvmlDeviceGetMemoryInfo(self.h)
            return float(u.gpu), float(m.used)
        except Exception:
            return float("nan"), float("nan")


class Sampler(threading.Thread):
    """Samples, every ``interval`` seconds: node CPU user / system / iowait / idle
    fractions over the interval (/proc/stat), this process's RSS, bytes read from the
    data's disk over the interval (/proc/diskstats sectors x 512; all whole disks when the
    data is not on a local block device), and GPU utilisation % and memory bytes
    (pynvml) when ``device`` is a CUDA device. Costs a few file reads per interval."""

    FIELDS = ("t", "cpu_user", "cpu_system", "cpu_iowait", "cpu_idle", "rss_bytes",
              "disk_read_bytes", "gpu_util", "gpu_mem_bytes")

    def __init__(self, interval=0.5, data_path=None, device=None, origin=None):
        super().__init__(name="hpcio-sampler", daemon=True)
        self.interval = float(interval)
        dev = block_device(data_path) if data_path else None
        self.disks = [dev] if dev else _whole_disks()
        self.gpu = _Gpu(device) if device is not None and device.type == "cuda" else None
        self.origin = time.perf_counter() if origin is None else origin
        self.samples = []
        self._halt = threading.Event()
        self.disk_read_start = _sectors_read(self.disks) * 512
        self.disk_read_end = self.disk_read_start

    def _sample(self):
        cpu, sec = _cpu_times(), _sectors_read(self.disks)
        last_cpu, last_sec = self._last
        if cpu and last_cpu:
            d = [c - l for c, l in zip(cpu, last_cpu)]
            tot = d[4] or 1
            fr = (d[0] / tot, d[1] / tot, d[2] / tot, d[3] / tot)
        else:
            fr = (float("nan"),) * 4
        gu, gm = self.gpu.sample() if self.gpu else (float("nan"), float("nan"))
        self.samples.append((time.perf_counter() - self.origin, *fr, _rss_bytes(),
                             (sec - last_sec) * 512, gu, gm))
        self._last = (cpu, sec)

    def run(self):
        while not self._halt.wait(self.interval):
            self._sample()

    def start(self):
        self._last = (_cpu_times(), _sectors_read(self.disks))
        super().start()

    def stop(self):
        """End sampling, with one last sample (so even a short run has one)."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
        if hasattr(self, "_last"):
            self._sample()
        self.disk_read_end = _sectors_read(self.disks) * 512

    def as_dict(self):
        """Samples as columns (JSON-friendly), plus the disks watched and the disk bytes
        read over the sampler's whole life."""
        cols = list(zip(*self.samples)) if self.samples else [()] * len(self.FIELDS)
        out = {f: [None if v != v else v for v in c] for f, c in zip(self.FIELDS, cols)}
        out["interval_s"] = self.interval
        out["disks"] = self.disks
        out["disk_read_bytes_total"] = self.disk_read_end - self.disk_read_start
        return out


def _included(log_epoch, log_step, first_steps_excluded=True):
    """Mask of the steps that count towards AU and throughput: all but each epoch's
    first step (MLPerf Storage's rule)."""
    if not first_steps_excluded:
        return np.ones(len(log_step), dtype=bool)
    return log_step != 0


def rank_summary(arrays, exclude_first=True):
    """This rank's totals from its step arrays (see :meth:`StepLog.arrays`): small,
    so ranks can gather them at the end."""
    step, epoch = arrays["step"], arrays["epoch"]
    mask = _included(epoch, step, exclude_first)
    if exclude_first and not mask.any():
        mask = np.ones(len(step), dtype=bool)
        exclude_first = False
    out = {"steps": int(len(step)), "steps_measured": int(mask.sum()),
           "au_excludes_first_step": bool(exclude_first)}
    for key, m in (("all", np.ones(len(step), dtype=bool)), ("measured", mask)):
        d = {c: float(arrays[c][m].sum()) for c in COMPONENTS + ("wall",)}
        d["records"] = int(arrays["records"][m].sum())
        d["nbytes"] = int(arrays["nbytes"][m].sum())
        out[key] = d
    epochs = []
    for e in np.unique(epoch):
        em = epoch == e
        mm = em & mask
        wall_m = float(arrays["wall"][mm].sum())
        epochs.append({"epoch": int(e), "steps": int(em.sum()),
                       "wall": float(arrays["wall"][em].sum()),
                       "records": int(arrays["records"][em].sum()),
                       "nbytes": int(arrays["nbytes"][em].sum()),
                       "au": float(arrays["compute"][mm].sum() / wall_m) if wall_m else 0.0,
                       "stall": float((arrays["fetch"][em] + arrays["prep"][em] +
                                       arrays["stall_other"][em]).sum())})
    out["epochs"] = epochs
    m = out["measured"]
    out["au"] = m["compute"] / m["wall"] if m["wall"] else 0.0
    out["epoch_time"] = out["all"]["wall"]
    return out


def summarize(per_rank):
    """The run's figures from every rank's :func:`rank_summary` (see module docstring)."""
    ranks = len(per_rank)
    meas = [r["measured"] for r in per_rank]
    wall = sum(m["wall"] for m in meas)
    pct = (lambda x: 100.0 * x / wall) if wall else (lambda x: 0.0)
    au = np.array([r["au"] for r in per_rank])
    et = np.array([r["epoch_time"] for r in per_rank])
    stall = sum(m["fetch"] + m["prep"] + m["stall_other"] for m in meas)
    s = {
        "ranks": ranks,
        "steps_per_rank": per_rank[0]["steps"],
        "steps_measured_per_rank": per_rank[0]["steps_measured"],
        "au_excludes_first_step": all(r["au_excludes_first_step"] for r in per_rank),
        "au_percent": 100.0 * float(au.mean()),
        "au_percent_min": 100.0 * float(au.min()),
        "au_percent_max": 100.0 * float(au.max()),
        "samples_per_s": sum(m["records"] / m["wall"] for m in meas if m["wall"]),
        "mib_per_s": sum(m["nbytes"] / m["wall"] for m in meas if m["wall"]) / 2 ** 20,
        "stall_percent": pct(stall),
        "fetch_percent": pct(sum(m["fetch"] for m in meas)),
        "prep_percent": pct(sum(m["prep"] for m in meas)),
        "stall_other_percent": pct(sum(m["stall_other"] for m in meas)),
        "h2d_percent": pct(sum(m["h2d"] for m in meas)),
        "compute_percent": pct(sum(m["compute"] for m in meas)),
        "ckpt_percent": pct(sum(m["ckpt"] for m in meas)),
        "other_percent": pct(sum(m["other"] for m in meas)),
        "records": sum(r["all"]["records"] for r in per_rank),
        "bytes": sum(r["all"]["nbytes"] for r in per_rank),
        "epoch_time_s_slowest": float(et.max()),
        "epoch_time_s_fastest": float(et.min()),
        "slowest_rank": int(et.argmax()),
        "fastest_rank": int(et.argmin()),
        "slowest_over_fastest": float(et.max() / et.min()) if et.min() > 0 else None,
        "epoch_time_s_per_rank": et.tolist(),
        "au_percent_per_rank": (100.0 * au).tolist(),
    }
    nep = max(len(r["epochs"]) for r in per_rank)
    s["per_epoch"] = [{
        "epoch": per_rank[0]["epochs"][e]["epoch"],
        "au_percent": 100.0 * float(np.mean([r["epochs"][e]["au"] for r in per_rank])),
        "wall_s_slowest": max(r["epochs"][e]["wall"] for r in per_rank),
        "wall_s_fastest": min(r["epochs"][e]["wall"] for r in per_rank),
        "records": sum(r["epochs"][e]["records"] for r in per_rank),
    } for e in range(nep) if all(len(r["epochs"]) > e for r in per_rank)]
    return s


def format_table(s, title=""):
    """The end-of-run table rank 0 prints (and saves as summary.txt)."""
    first = ("first step of each epoch excluded" if s["au_excludes_first_step"]
             else "all steps (epochs of one step)")
    ratio = s["slowest_over_fastest"]
    lines = [title] if title else []
    rows = [
        ("samples/s", f"{s['samples_per_s']:.1f}"),
        ("MiB/s", f"{s['mib_per_s']:.2f}"),
        ("AU %", f"{s['au_percent']:.1f}  (ranks {s['au_percent_min']:.1f}"
                 f"-{s['au_percent_max']:.1f})"),
        ("stall %", f"{s['stall_percent']:.1f}  (fetch {s['fetch_percent']:.1f} / prep "
                    f"{s['prep_percent']:.1f} / other {s['stall_other_percent']:.1f})"),
        ("h2d / compute / ckpt / other %",
         f"{s['h2d_percent']:.1f} / {s['compute_percent']:.1f} / {s['ckpt_percent']:.1f}"
         f" / {s['other_percent']:.1f}"),
        ("epoch time slowest/fastest", f"{s['epoch_time_s_slowest']:.3f} s (rank "
         f"{s['slowest_rank']}) / {s['epoch_time_s_fastest']:.3f} s (rank "
         f"{s['fastest_rank']})" + (f" = {ratio:.2f}x" if ratio else "")),
        ("steps/rank measured", f"{s['steps_measured_per_rank']} of "
                                f"{s['steps_per_rank']} ({first})"),
    ]
    w = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{w}}  {v}" for k, v in rows]
    return "\n".join(lines)
