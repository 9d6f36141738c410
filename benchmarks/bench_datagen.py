"""Dataset generation throughput per format, against a plain sequential write of the same
bytes on the same file system, in the same run.

    python benchmarks/bench_datagen.py [--dir /scratch/me] [--preset imagenet]
        [--records 400] [--encoding jpeg] [--repeats 3] [--formats packed lmdb hdf5 images]

Three figures per format, all in MB/s (10^6 bytes per second) of *record bytes* (the sum
of the index's lengths: what a reader later delivers, not the format's overhead):

gen MB/s    ``hpcio.datagen.write.generate`` end to end: rendering the pictures, encoding them,
            writing the format, fsync/syncfs, finding the record offsets, checksums, and
            writing the manifest and index; record bytes / wall seconds of the call.
write MB/s  the same ``write_dataset`` call on records rendered and encoded beforehand (kept
            in memory), so only the format's writing, syncing, indexing and checksumming
            is timed: what the format costs beyond producing the bytes.
seq MB/s    a plain sequential write of the same number of bytes into one file, 8 MiB
            writes from a page-aligned buffer, then fsync — the file system's ceiling
            (like ``dd bs=8M conv=fsync``).

Each repeat times every format as (seq, write, gen) back to back, so every ratio compares
runs taken seconds apart (the machine's absolute speed drifts by tens of per cent). The
ratios write/seq and gen/seq are computed per repeat; the table gives their median with
the min-max spread, and the load average before and after each repeat.
"""

import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.datagen.write import Synthetic, block_records, generate, write_dataset  # noqa: E402
from hpcio.errors import guard  # noqa: E402
from hpcio.formats import FORMATS  # noqa: E402
from hpcio.formats.base import Block  # noqa: E402
from hpcio.fsutil import aligned_empty, fs_type  # noqa: E402
from hpcio.data.presets import get_preset  # noqa: E402

CHUNK = 8 << 20


class Encoded:
    """A source whose records were rendered and encoded once, up front."""

    def __init__(self, synthetic, encoding, quality):
        self.records, self.shape, self.classes = (synthetic.records, synthetic.shape,
                                                  synthetic.classes)
        per = block_records(int(np.prod(self.shape)))
        parts = [synthetic.block(a, min(a + per, self.records), encoding, quality)
                 for a in range(0, self.records, per)]
        self.labels = np.concatenate([p.labels for p in parts])
        self.lengths = np.concatenate([p.lengths for p in parts])
        self.data = np.concatenate([p.data for p in parts])
        self.offsets = np.zeros(self.records + 1, np.int64)
        np.cumsum(self.lengths, out=self.offsets[1:])

    def block(self, lo, hi, encoding, quality):
        return Block(lo, hi, self.labels[lo:hi],
                     self.data[self.offsets[lo]:self.offsets[hi]], self.lengths[lo:hi])


def seq_write(path, nbytes):
    """Seconds to write ``nbytes`` sequentially (8 MiB writes) and fsync."""
    buf = aligned_empty(CHUNK)
    buf[:] = 0x5A
    view = memoryview(buf)
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, view[:min(left, CHUNK)])
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def main():
    ap = ArgumentParser(prog="bench_datagen.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="file system to write to (default: the "
                                                "system temporary directory)")
    ap.add_argument("--preset", default="imagenet")
    ap.add_argument("--records", type=int, default=400)
    ap.add_argument("--encoding", default=None, help="default: the preset's")
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=list(FORMATS))
    a = ap.parse_args()
    p = get_preset(a.preset)
    enc = a.encoding or p.encoding
    base = tempfile.mkdtemp(prefix="hpcio-bench-datagen-", dir=a.dir)
    try:
        src = Encoded(Synthetic(p, 0, a.records), enc, p.quality)
        nbytes = int(src.lengths.sum())
        print(f"{a.preset} {enc}: {a.records} records, {nbytes / 1e6:.1f} MB of records "
              f"(mean {nbytes / a.records:.0f} B), {a.shards} shards, {a.repeats} repeats; "
              f"{base} on {fs_type(base)}", flush=True)
        res = {f: {"seq": [], "write": [], "gen": [], "file": 0} for f in a.formats}
        for r in range(a.repeats):
            l0 = loadavg()
            for f in a.formats:
                d = os.path.join(base, f"{f}-{r}")
                s = seq_write(os.path.join(base, "seq.bin"), nbytes)
                os.unlink(os.path.join(base, "seq.bin"))
                t = time.perf_counter()
                ds = write_dataset(d + "-w", src, f, enc, a.shards, quality=p.quality)
                w = time.perf_counter() - t
                assert ds.nbytes() == nbytes
                res[f]["file"] = int(ds.index.file_bytes.sum())
                shutil.rmtree(d + "-w")
                t = time.perf_counter()
                ds = generate(d + "-g", a.preset, a.records, f, enc, a.shards, quality=p.quality)
                g = time.perf_counter() - t
                assert ds.nbytes() == nbytes
                shutil.rmtree(d + "-g")
                for k, v in (("seq", s), ("write", w), ("gen", g)):
                    res[f][k].append(nbytes / v / 1e6)
            print(f"  repeat {r + 1}: load average {l0:.2f} -> {loadavg():.2f}", flush=True)
        med = statistics.median
        print(f"{'format':8} {'gen MB/s':>9} {'write MB/s':>11} {'seq MB/s':>9} "
              f"{'write/seq':>18} {'gen/seq':>18} {'file/record bytes':>18}")
        for f in a.formats:
            x = res[f]
            wr = [w / s for w, s in zip(x["write"], x["seq"])]
            gr = [g / s for g, s in zip(x["gen"], x["seq"])]
            print(f"{f:8} {med(x['gen']):9.1f} {med(x['write']):11.1f} {med(x['seq']):9.1f} "
                  f"{med(wr):7.3f} ({min(wr):.3f}-{max(wr):.3f}) "
                  f"{med(gr):7.3f} ({min(gr):.3f}-{max(gr):.3f}) "
                  f"{x['file'] / nbytes:18.3f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_datagen"))
