"""File-system helpers: atomic writes, page-aligned buffers, page-cache control; and
:func:`jsonable`, the one way hpcio makes its values fit JSON (and YAML)."""

import json
import math
import mmap
import os

import numpy as np

__all__ = ["atomic_write", "atomic_json", "jsonable", "aligned_empty", "evict", "fs_type",
           "free_bytes"]


def atomic_write(path, write):
    """Call ``write(fileobj)`` on a temporary file beside ``path``, fsync it and rename it
    over ``path``: readers see the old file or the new one, never half of one. The file
    gets the user's umask (``tempfile.mkstemp`` would make it 0600)."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = _create_temp(d)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _create_temp(d):
    """A new file ``d/.tmp-<random>`` (O_EXCL), mode 0666 less the umask: (fd, path)."""
    while True:
        tmp = os.path.join(d, f".tmp-{os.urandom(6).hex()}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                           0o666), tmp
        except FileExistsError:
            continue


def atomic_json(path, obj, compact=False):
    """``compact``: one line, through json's C encoder (``indent`` makes json use its
    Python encoder, several times slower: too slow for frequent flushes of long runs)."""
    if compact:
        data = json.dumps(obj, separators=(",", ":"), default=jsonable).encode()
    else:
        data = (json.dumps(obj, indent=2, sort_keys=False, default=jsonable) + "\n").encode()
    atomic_write(path, lambda f: f.write(data))


def _refuse(o):
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def jsonable(x, finite=False, other=_refuse):
    """``x`` with only what JSON holds: dicts (their keys as strings), lists (tuples too),
    str, int, float, bool, None; numpy scalars as Python numbers, numpy arrays as lists.
    ``finite``: NaN and infinities as None (strict JSON, a CSV cell left empty), else kept.
    ``other(v)`` stands for any other value: by default a TypeError, ``str`` to keep its
    text. Also ``json.dumps``'s ``default`` hook (:func:`atomic_json`: json's C encoder
    walks the containers, this converts what it meets that it cannot hold)."""
    if isinstance(x, dict):
        return {str(k): jsonable(v, finite, other) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v, finite, other) for v in x]
    if isinstance(x, np.ndarray):
        x = x.tolist()
        return jsonable(x, finite, other) if finite else x
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        return None if finite and not math.isfinite(x) else x
    if x is None or isinstance(x, (bool, int, str)):
        return x
    return other(x)


HUGE = 4 << 20


def aligned_empty(nbytes):
    """A page-aligned uint8 buffer (a private anonymous mmap): copies from the page cache
    into it run several times faster than into ``np.empty``'s 16-byte-offset memory.
    Private, not shared (Python's default): private pages fault in cheaper and, from
    ``HUGE`` bytes on, are asked for as transparent huge pages (a 2 MiB page is one fault
    where 4 KiB pages are 512)."""
    n = max(int(nbytes), 1)
    m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if n >= HUGE and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE)
        except OSError:  # a kernel without transparent huge pages
            pass
    return np.frombuffer(m, dtype=np.uint8, count=int(nbytes))


def evict(path):
    """Drop ``path``'s pages from the page cache (any user): fdatasync, then
    POSIX_FADV_DONTNEED. Pages that a live process has mapped stay."""
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            os.fdatasync(fd)
        except OSError:
            pass
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def free_bytes(path):
    """Bytes an unprivileged user may still write on the file system of ``path`` (or of
    its nearest existing parent); None when unknown."""
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        p = os.path.dirname(p)
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def fs_type(path):
    """The file-system type of ``path`` from /proc/self/mounts (longest mount prefix)."""
    path = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        with open("/proc/self/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                    best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind
