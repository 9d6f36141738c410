"""Page-cache control and evidence: make a dataset cold or warm, and prove it.

* ``cold``: the dataset's files are dropped from the page cache — ``fdatasync`` +
  ``posix_fadvise(DONTNEED)`` of every file (any user), split between the ranks of each
  node, plus ``echo 1 > /proc/sys/vm/drop_caches`` when asked for and allowed (root).
  Neither evicts pages that a *live* process still has mapped: open memory-mapped readers
  (LMDB) after evicting. On a VM the host may still cache the disk, so "cold" figures are
  upper bounds. What it cleared and what it could not is part of its record
  (:func:`cold_scope`): on a network file system the servers' caches are out of a client's
  reach, and a run that says "cold" there may have read from the servers' memory.
* ``warm``: a full sequential read of every file first (split between each node's ranks).
* ``asis``: nothing is done (the cache is whatever it is; the resident fraction says).

:func:`resident_fraction` measures with ``mincore`` how much of the files is in the page
cache, so a test or a benchmark can show that cold was cold and warm was warm;
:func:`resident_bytes` gives it in bytes (what a reader's epoch brought into the cache).
"""

import ctypes
import ctypes.util
import mmap
import os
import socket
import time

import numpy as np

from .errors import HpcioError, lookup
from .fsutil import aligned_empty, fs_type
from .fsutil import evict as evict_file
from .mpiutil import node_comm

__all__ = ["CACHE_MODES", "cache_state", "evict", "warm", "resident_fraction",
           "resident_bytes", "drop_caches", "read_file", "cold_scope", "describe", "per_node",
           "warm_nodes_line", "WARM_AFTER_COLD"]

PIECE = 8 << 20
# file systems whose data lives on servers (a FUSE mount, "fuse.*", counts as one too)
NETWORK_FS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "ceph", "cifs", "smb3", "9p",
              "orangefs", "pvfs2", "glusterfs", "wekafs", "panfs", "afs", "virtiofs"}
# the single-machine GlusterFS testbed (scripts/pfs-local.sh) records its mount here
TESTBED_STATE = "/run/hpcio-pfs/state"


def _node(comm):
    """(local rank, local size, node communicator or None) of this rank's node."""
    if comm is None or comm.Get_size() == 1:
        return 0, 1, None
    node = node_comm(comm)
    return node.Get_rank(), node.Get_size(), node


def _mine(paths, lrank, lsize):
    return [p for k, p in enumerate(paths) if k % lsize == lrank]


def drop_caches():
    """``echo 1 > /proc/sys/vm/drop_caches`` (after ``sync``); True if the kernel took it."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
        return True
    except OSError:
        return False


def evict(ds, comm=None, drop=False):
    """Drop the dataset's files from the page cache on every node (see module docstring);
    returns what was done. Collective over ``comm``."""
    lrank, lsize, node = _node(comm)
    t0 = time.perf_counter()
    n, dropped = 0, False
    if node is not None:  # every rank of the node has let go of its maps (pages a live
        node.Barrier()    # mapping holds stay resident whatever fadvise says)
    try:
        for p in _mine(ds.paths, lrank, lsize):
            try:
                evict_file(p)
            except FileNotFoundError:
                raise HpcioError(f"{p}: shard file missing")
            n += 1
        if drop and lrank == 0:
            dropped = drop_caches()
    finally:
        if node is not None:
            n = node.allreduce(n)
            dropped = node.allreduce(int(dropped)) > 0
            node.Free()
    return {"mode": "cold", "files": n, "drop_caches": bool(dropped),
            "seconds": time.perf_counter() - t0,
            **cold_scope(ds.paths[0] if ds.paths else ".", drop, dropped)}


def _testbed_mount():
    """The mount point of the GlusterFS testbed that is up on this machine, or None."""
    try:
        with open(TESTBED_STATE) as f:
            state = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return None
    return state.get("MOUNT") or None


def cold_scope(path, asked=False, dropped=False):
    """Which caches a cold start cleared for the files at ``path`` and which it could not
    (``asked``: drop_caches was asked for; ``dropped``: the kernel took it). Network and
    FUSE file systems keep caches on the servers and in the client daemon, beyond fadvise
    and drop_caches; on the single-machine testbed the bricks share this kernel's page
    cache, so drop_caches clears them too (its client's own caches are off)."""
    kind = fs_type(path)
    mnt = _testbed_mount()
    testbed = (kind.startswith("fuse.gluster") and mnt is not None
               and os.path.realpath(path).startswith(os.path.realpath(mnt).rstrip("/") + "/"))
    network = kind in NETWORK_FS or kind.startswith("fuse")
    cleared = [("client " if network else "") + "page cache of the dataset's files "
               "(fadvise DONTNEED)"]
    not_cleared = []
    if dropped:
        cleared.append("kernel page cache (drop_caches)" + (
            ", where this single-machine testbed's bricks keep their pages" if testbed
            else ""))
    elif asked:
        not_cleared.append("kernel page cache (drop_caches refused: needs root)")
    if kind in ("tmpfs", "ramfs"):
        not_cleared.append(f"the files themselves ({kind} keeps them in memory)")
    elif testbed:
        if not dropped:
            not_cleared.append("the testbed bricks' page cache (--drop-caches as root "
                               "clears it)")
    elif network:
        not_cleared.append(f"servers' caches of {kind} (out of this client's reach)")
        if kind.startswith("fuse"):
            not_cleared.append(f"the FUSE client daemon's own caches ({kind})")
    else:
        not_cleared.append("the disk's own cache (on a VM, the host's cache of its disk)")
    return {"fs_type": kind, "testbed": testbed, "cleared": cleared,
            "not_cleared": not_cleared}


def describe(info):
    """One line on what a cache state did: for ``cold``, what it cleared and what not."""
    if not info or info.get("mode") != "cold" or "cleared" not in info:
        return f"cache {(info or {}).get('mode', '?')}"
    return (f"cache cold on {info['fs_type']}: cleared {'; '.join(info['cleared'])}; "
            f"not cleared: {'; '.join(info['not_cleared']) or 'none'}")


def read_file(path, buf=None, piece=PIECE):
    """Read ``path`` start to end in ``piece``-byte reads into a page-aligned buffer;
    returns the bytes read."""
    if buf is None:
        buf = aligned_empty(piece)
    mv = memoryview(buf)[:piece]
    total = 0
    fd = os.open(path, os.O_RDONLY)
    try:
        while True:
            n = os.readv(fd, [mv])
            if n <= 0:
                break
            total += n
    finally:
        os.close(fd)
    return total


def warm(ds, comm=None):
    """Read every file of the dataset once, so that it is in the page cache (collective)."""
    lrank, lsize, node = _node(comm)
    t0 = time.perf_counter()
    buf = aligned_empty(PIECE)
    nbytes = 0
    try:
        for p in _mine(ds.paths, lrank, lsize):
            try:
                nbytes += read_file(p, buf)
            except FileNotFoundError:
                raise HpcioError(f"{p}: shard file missing")
    finally:
        if node is not None:
            nbytes = node.allreduce(nbytes)
            node.Free()
    return {"mode": "warm", "bytes": nbytes, "seconds": time.perf_counter() - t0}


def _asis(ds, comm=None, **kw):
    return {"mode": "asis"}


CACHE_MODES = {"cold": evict, "warm": warm, "asis": _asis}


def cache_state(mode, ds, comm=None, drop=False, measure=True):
    """Put the dataset's files in cache state ``mode`` (``cold``, ``warm`` or ``asis``) on
    every node; returns a dict of what was done and, with ``measure``, the fraction of the
    files' pages resident afterwards: ``resident`` on rank 0's node (every rank), and on
    rank 0 ``nodes``, one record per node (host, ranks, resident, what it did), and for
    ``cold`` the ``warm_nodes`` that kept more than :data:`WARM_AFTER_COLD` of the pages.
    Collective over ``comm``."""
    fn = lookup(CACHE_MODES, mode, "cache mode")
    info = fn(ds, comm, drop=drop) if mode == "cold" else fn(ds, comm)
    if comm is not None and comm.Get_size() > 1:
        comm.Barrier()
    if measure:
        nodes = per_node(ds, comm, info)
        resident = nodes[0]["resident"] if nodes else None
        if comm is not None and comm.Get_size() > 1:
            resident = comm.bcast(resident, root=0)
        info["resident"] = resident
        if nodes:
            info["nodes"] = nodes
            if mode == "cold":
                info["warm_nodes"] = [n["host"] for n in nodes
                                      if n["resident"] > WARM_AFTER_COLD]
    return info


# a cold start that leaves more of the dataset than this in a node's page cache did not work
# there (pages a live process maps stay; fadvise's leftovers are a few pages)
WARM_AFTER_COLD = 0.05


def per_node(ds, comm, info):
    """One record per node, in node order, on rank 0 (None elsewhere): its hostname, ranks,
    what the cache state did there (files evicted, drop_caches, bytes read) and the fraction
    of the dataset resident in its page cache now (``mincore`` by the node's first rank: on a
    cluster every node has its own cache, and a cold start that missed one reads from
    memory there). Collective over ``comm``; one small gather per call."""
    lrank, lsize, node = _node(comm)
    if node is not None:
        node.Free()
    mine = None
    if lrank == 0:
        mine = {"host": socket.gethostname(), "ranks": lsize,
                "resident": resident_fraction(ds.paths)}
        mine.update({k: info[k] for k in ("files", "drop_caches", "bytes") if k in info})
    if comm is None or comm.Get_size() == 1:
        return [mine]
    nodes = comm.gather(mine, root=0)
    return [n for n in nodes if n is not None] if nodes is not None else None


def warm_nodes_line(info):
    """One line naming the nodes a cold start left warm, or None when every node went
    cold (or nothing per node was measured)."""
    warm = (info or {}).get("warm_nodes")
    if not warm:
        return None
    res = {n["host"]: n["resident"] for n in info["nodes"]}
    hosts = ", ".join(f"{h} {100 * res[h]:.0f}%" for h in warm)
    return (f"cache NOT cold on {len(warm)} of {len(info['nodes'])} node(s): {hosts} of the "
            f"dataset still in the page cache after eviction (a live mapping holds it?)")


# ---- mincore ----------------------------------------------------------------------
_libc = None


def _lib():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                             ctypes.c_int, ctypes.c_long]
        lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        _libc = lib
    return _libc


def _residency(path):
    """(resident bytes, bytes, resident pages, pages) of one file, by ``mincore`` on a
    fresh read-only mapping (mapping faults nothing in; the answer is the page cache's,
    shared by all processes). A resident last page counts for the file's bytes in it."""
    size = os.path.getsize(path)
    page = mmap.PAGESIZE
    pages = -(-size // page)
    if not pages:
        return 0, 0, 0, 0
    lib = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
        try:
            vec = (ctypes.c_ubyte * pages)()
            if lib.mincore(addr, size, vec) != 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e), path)
            bits = np.frombuffer(vec, dtype=np.uint8) & 1
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)
    resident = int(np.count_nonzero(bits))
    nbytes = resident * page - (page * pages - size if bits[-1] else 0)
    return nbytes, size, resident, pages


def resident_fraction(paths):
    """Fraction (0..1) of the pages of ``paths`` that are in the page cache now."""
    res = tot = 0
    for p in paths:
        _, _, r, t = _residency(p)
        res += r
        tot += t
    return res / tot if tot else 1.0


def resident_bytes(paths):
    """Bytes of ``paths`` in the page cache now (node-wide: every process's reads count,
    and pages a process has mapped stay); a missing file is an error."""
    total = 0
    for p in paths:
        try:
            total += _residency(p)[0]
        except FileNotFoundError:
            raise HpcioError(f"{p}: shard file missing")
    return total
