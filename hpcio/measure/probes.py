"""What the operating system says about the machine and this process, read in one place:
``/proc/stat`` (CPU), ``/proc/diskstats`` (bytes read by a disk), the whole disk behind a
path, its read-ahead, ``/proc/self/io``, ``getrusage``, the load average.

Disk figures are per *whole disk* (``vda``, not ``vda1``): a partition's reads are a
subset of its disk's, and a disk is what read-ahead and the device queue act on. They are
node-wide: every process's reads of that disk count, the page cache's read-ahead included.
"""

import dataclasses
import os
import resource
import time

__all__ = ["block_device", "whole_disks", "data_disks", "disk_read_bytes",
           "read_ahead_kb", "cpu_jiffies", "machine_busy", "proc_io", "rusage",
           "rss_bytes", "process_age_s", "meminfo", "mem_available", "loadavg", "os_view", "wait_quiet",
           "counters", "delta"]

SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's block size


def _sysfs_block(path):
    """The ``/sys/dev/block/<major>:<minor>`` directory (resolved) of the device holding
    ``path``, or None (tmpfs, overlay, FUSE, NFS)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    real = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    return real if os.path.exists(real) else None


def block_device(path):
    """The whole-disk block device name (e.g. ``vda`` for a file on ``vda1``) holding
    ``path``, or None when it is not on a local block device."""
    real = _sysfs_block(path)
    if real is None:
        return None
    if os.path.exists(os.path.join(real, "partition")):
        real = os.path.dirname(real)
    return os.path.basename(real)


def whole_disks():
    """Every whole disk of the machine (no loop, RAM or zram devices)."""
    try:
        return sorted(d for d in os.listdir("/sys/block")
                      if not d.startswith(("loop", "ram", "zram")))
    except OSError:
        return []


def data_disks(path):
    """The disks whose reads count for data at ``path``: its whole disk, or every whole
    disk when it is not on a local block device (a network or FUSE file system)."""
    dev = block_device(path) if path else None
    return [dev] if dev else whole_disks()


def disk_read_bytes(disks):
    """Bytes read since boot by the named disks (``/proc/diskstats``); None when none of
    them is listed there."""
    want, total, seen = set(disks), 0, False
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if len(p) > 5 and p[2] in want:
                    total += int(p[5])
                    seen = True
    except (OSError, ValueError):
        return None
    return total * SECTOR if seen else None


def read_ahead_kb(path):
    """The kernel read-ahead (KiB) for reads of ``path``: its file system's backing-device
    info (``/sys/class/bdi/<major>:<minor>``; FUSE and NFS mounts have one too), else its
    whole disk's queue setting; None when unknown."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    cands = [f"/sys/class/bdi/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/read_ahead_kb"]
    dev = block_device(path)
    if dev:
        cands.append(f"/sys/block/{dev}/queue/read_ahead_kb")
    for p in cands:
        try:
            with open(p) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def cpu_jiffies():
    """Node CPU time since boot from ``/proc/stat`` in jiffies: (user + nice,
    system + irq + softirq, iowait, idle, total of the first eight fields); None if
    unreadable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    v += [0] * (8 - len(v))
    user, nice, system, idle, iowait, irq, softirq, _steal = v
    return user + nice, system + irq + softirq, iowait, idle, sum(v)


def machine_busy():
    """(busy jiffies, all jiffies, bytes read by all whole disks) of the machine now;
    busy = all - idle - iowait."""
    cpu = cpu_jiffies() or (0, 0, 0, 0, 0)
    return cpu[4] - cpu[3] - cpu[2], cpu[4], disk_read_bytes(whole_disks()) or 0


def wait_quiet(max_wait, cpu=0.15, disk_mib_s=5.0):
    """Wait (up to ``max_wait`` s) for one second in which the machine's CPUs are less
    than ``cpu`` busy (fraction of all cores) and its disks read less than ``disk_mib_s``:
    other jobs' CPU or I/O would be measured as ours. Checks once a second for 20 s, then
    every 20 s. Returns the last second's ``cpu`` and ``disk_mib_s``, ``quiet`` (whether
    it was) and ``waited_s``."""
    t, k = time.monotonic(), 0
    while True:
        b0, a0, s0 = machine_busy()
        time.sleep(1.0)
        b1, a1, s1 = machine_busy()
        c, d = (b1 - b0) / max(1, a1 - a0), (s1 - s0) / 2 ** 20
        waited = time.monotonic() - t
        quiet = c < cpu and d < disk_mib_s
        if quiet or waited > max_wait:
            return {"cpu": round(c, 3), "disk_mib_s": round(d, 1), "quiet": bool(quiet),
                    "waited_s": round(waited, 1)}
        k += 1
        if k >= 20:
            time.sleep(19.0)


def proc_io():
    """``/proc/self/io`` as a dict (rchar, wchar, syscr, syscw, read_bytes, ...):
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


def rss_bytes():
    """This process's resident memory now (``/proc/self/statm``: resident pages, anonymous
    and file-backed, mapped data files' cached pages included); None where it cannot be
    read (not Linux), never a made-up 0."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def process_age_s():
    """Seconds since this process started (``/proc/self/stat``'s start time against the
    boot clock, 1/CLK_TCK resolution): what a launch cost it before now, the interpreter's
    start and every import included; None where it cannot be read (not Linux)."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - start)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def meminfo(field):
    """Bytes ``/proc/meminfo`` gives for ``field`` (``MemTotal``, ``MemAvailable``...), or
    None where it cannot be read (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def mem_available():
    """Bytes of memory the kernel says are available for new work (``MemAvailable``), or
    None."""
    return meminfo("MemAvailable")


def loadavg():
    """The 1-minute load average, or None."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def os_view(d, wall):
    """The operating system's view of one epoch on one rank, as LMDBIO measured it, from a
    :func:`delta` of two :func:`counters` snapshots and the epoch's wall seconds: CPU user
    and system seconds, sleep = wall - user - system (time not on a CPU: waiting for I/O,
    locks, peers, or a sleeping step; negative when the process's threads ran on several
    CPUs at once), context switches
    (voluntary: the process waited; involuntary: the scheduler took the CPU), page faults,
    and /proc/self/io's rchar and read_bytes."""
    ru, io = d.get("rusage", {}), d.get("io", {})
    user, system = ru.get("utime", 0.0), ru.get("stime", 0.0)
    return {"wall_s": wall, "user_s": user, "system_s": system,
            "sleep_s": wall - user - system,
            "voluntary_switches": ru.get("nvcsw", 0),
            "involuntary_switches": ru.get("nivcsw", 0),
            "minor_faults": ru.get("minflt", 0), "major_faults": ru.get("majflt", 0),
            "rchar": io.get("rchar", 0), "read_bytes": io.get("read_bytes", 0)}


def counters(reader=None):
    """A snapshot of every per-process counter: reader stats, /proc/self/io, getrusage."""
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
