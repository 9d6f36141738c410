"""``python -m hpcio.analyze`` on 100 runs x 8 ranks traced with DXT: time and peak memory.

    python benchmarks/bench_analyze.py [--runs 100] [--ranks 8] [--out /tmp/bench-analyze]
        [--source tests/fixtures/hpcio-runs/local-mnist-hdf5-naive-n2]

Synthesises the runs from a real traced 2-rank run (by default the naive HDF5 one: 12,278
DXT segments, one per 784-byte record read): rank r of a copy is rank r % 2 of the source,
its step files copied and its Darshan log rebuilt with every POSIX, MPI-IO, STDIO and DXT
record repeated for the new ranks (the regions decompressed, the records' rank fields
rewritten, recompressed, the header's map and the job's nprocs updated; HEATMAP dropped).
Then runs the command once on the directory of copies, in a child process, and prints its
wall time and peak RSS against the targets (60 s, 2 GB).
"""

import argparse
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "hpcio-runs",
                       "local-mnist-hdf5-naive-n2")
sys.path.insert(0, ROOT)

from hpcio.measure.darshanlog import (  # noqa: E402
    DXT_RECORD_BYTES, HEADER_BYTES, MODULE_IDS, inflate)
from hpcio.measure.rundir import RunDir  # noqa: E402

# fixed-size records (Darshan 3.5.0): base record (id, rank) + counters
FIXED = {"POSIX": 704, "MPI-IO": 560, "STDIO": 248}
DXT = ("DXT_POSIX", "DXT_MPIIO")


def _reranked(raw, size, ranks, old):
    """Every record of a fixed-size module once per new rank r (from rank r % old)."""
    recs = [raw[i:i + size] for i in range(0, len(raw), size)]
    out = []
    for r in range(ranks):
        for rec in recs:
            if struct.unpack_from("<q", rec, 8)[0] == r % old:
                out.append(rec[:8] + struct.pack("<q", r) + rec[16:])
    return b"".join(out)


def _reranked_dxt(raw, ranks, old):
    recs, pos = [], 0
    while pos + DXT_RECORD_BYTES <= len(raw):
        wc, rc = struct.unpack_from("<qq", raw, pos + 88)
        end = pos + DXT_RECORD_BYTES + 32 * (wc + rc)
        recs.append(raw[pos:end])
        pos = end
    return _reranked_list(recs, ranks, old)


def _reranked_list(recs, ranks, old):
    return b"".join(rec[:8] + struct.pack("<q", r) + rec[16:]
                    for r in range(ranks) for rec in recs
                    if struct.unpack_from("<q", rec, 8)[0] == r % old)


def widen_log(src, dest, ranks):
    """``src`` (a little-endian zlib Darshan 3.41 log) as a log of ``ranks`` ranks."""
    with open(src, "rb") as f:
        data = f.read()
    name_off, name_len = struct.unpack_from("<QQ", data, 32)
    maps = [struct.unpack_from("<QQ", data, 48 + 16 * i) for i in range(64)]
    job = bytearray(inflate(data[HEADER_BYTES:name_off], 0, src))
    old = struct.unpack_from("<q", job, 40)[0]
    struct.pack_into("<q", job, 40, ranks)
    body = [zlib.compress(bytes(job)), data[name_off:name_off + name_len]]
    new_maps = [(0, 0)] * 64
    pos = HEADER_BYTES + len(body[0]) + len(body[1])
    for i, (off, n) in enumerate(maps):
        mod = MODULE_IDS[i] if i < len(MODULE_IDS) else None
        if not n or (mod not in FIXED and mod not in DXT):
            continue
        raw = inflate(data[off:off + n], 0, src)
        raw = _reranked(raw, FIXED[mod], ranks, old) if mod in FIXED \
            else _reranked_dxt(raw, ranks, old)
        blob = zlib.compress(raw)
        new_maps[i] = (pos, len(blob))
        body.append(blob)
        pos += len(blob)
    head = bytearray(data[:HEADER_BYTES])
    struct.pack_into("<QQ", head, 32, HEADER_BYTES + len(body[0]), name_len)
    for i, (off, n) in enumerate(new_maps):
        struct.pack_into("<QQ", head, 48 + 16 * i, off, n)
    with open(dest, "wb") as f:
        f.write(bytes(head) + b"".join(body))


def widen_run(src, dest, ranks):
    """A copy of run ``src`` with ``ranks`` ranks (see the module docstring)."""
    src, dest = RunDir(src), RunDir(dest)
    os.makedirs(dest.darshan_dir)
    old = 0
    while os.path.exists(src.rank_steps_file(old)):
        old += 1
    for r in range(ranks):
        shutil.copy(src.rank_steps_file(r % old), dest.rank_steps_file(r))
        shutil.copy(src.rank_info_file(r % old), dest.rank_info_file(r))
    shutil.copy(src.env_file, dest.env_file)
    shutil.copy(src.summary_file, dest.summary_file)
    with open(src.config_file) as f:
        text = f.read()
    with open(dest.config_file, "w") as f:
        f.write(text.replace(f"\nranks: {old}\n", f"\nranks: {ranks}\n"))
    log = os.path.basename(src.darshan_logs()[0])
    widen_log(os.path.join(src.darshan_dir, log), os.path.join(dest.darshan_dir, log), ranks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--source", default=FIXTURE)
    ap.add_argument("--out", default="/tmp/bench-analyze")
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    runs = os.path.join(a.out, "runs")
    first = os.path.join(runs, "run-000")
    widen_run(a.source, first, a.ranks)
    for k in range(1, a.runs):
        shutil.copytree(first, os.path.join(runs, f"run-{k:03d}"))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hpcio.analyze", runs, "-o",
                        os.path.join(a.out, "report"), "--no-drishti"],
                       capture_output=True, text=True, env=env)
    wall = time.monotonic() - t
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2 ** 20  # KiB -> GiB
    if p.returncode:
        sys.exit(f"bench_analyze: hpcio.analyze exited {p.returncode}: {p.stderr.strip()}")
    with open(os.path.join(a.out, "report", "summary.json")) as f:
        doc = json.load(f)
    rows = doc["tables"]["table-b"]
    segs = sum(r.get("reads", 0) for r in rows)
    print(f"{a.runs} runs x {a.ranks} ranks, {len(rows)} logs, {segs:,.0f} POSIX reads "
          f"traced, counters read with {rows[0]['counter_reader']}: {wall:.1f} s "
          f"(target 60 s), peak RSS {rss:.2f} GiB (target 2)")
    return 0 if wall < 60 and rss < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
