"""The memory reader's two ways of holding a dataset, Lim et al. 2016's "cppmem" and
"pymem": one buffer (``hold=buffer``, batches gathered with numpy) against one Python
``bytes`` per record in a list (``hold=pymem``, batches copied record by record).

    python benchmarks/bench_memory.py [--dir /tmp/x] [--repeats 3] [--epochs 3]
        [--imagenet-records 2000]

Raw (uint8) packed datasets of MNIST-, CIFAR-10- and ImageNet-sized records (784, 3072 and
196,608 bytes) are made once in ``--dir``. Every measurement runs in a fresh process (so
one mode's freed memory, which the allocator may keep, is not counted against the next):
it loads the dataset, reads ``--epochs`` globally shuffled epochs on one rank in the batch
size of the paper's Caffe model (LeNet 64, CIFAR-quick 100, CaffeNet 256), with a consumer
that does nothing else, and reports:

samples/s   records delivered / wall seconds of the epochs (load excluded);
cpu ns/rec  CPU time of the process over the epochs per record (``time.process_time``:
            less sensitive than wall time to other work on a shared machine);
load s      the reader's ``load_s`` (the files read into RAM; pymem: and split into
            objects);
RSS B/rec   the process's resident memory after the load minus before it, per record,
            less the record's own bytes: what holding a record costs beyond its bytes
            (buffer: the files' other bytes, none for packed data; pymem: the ``bytes``
            object's header, the list's pointer and the allocator's rounding);
held B/rec  the reader's ``held_bytes`` per record less its bytes (``sys.getsizeof``:
            before the allocator's rounding).

Runs are interleaved (every dataset and mode once, then again); each figure is the median
over ``--repeats`` with the min-max spread; ``pymem/buffer`` is the ratio of samples/s
(and of CPU per record) taken per repeat, pymem's run right after buffer's, as a median
with its spread.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.errors import guard  # noqa: E402

# name: (preset, records (None: the preset's), batch of the paper's Caffe model)
SETS = {"mnist": ("mnist", None, 64), "cifar10": ("cifar10", None, 100),
        "imagenet": ("imagenet", 2000, 256)}
MODES = ("buffer", "pymem")


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child(root, mode, batch, epochs):
    """One measurement (in its own process): a JSON line on stdout."""
    from hpcio.data.dataset import open_dataset
    from hpcio.plan import make_plan
    from hpcio.readers import make_reader
    ds = open_dataset(root)
    plans = [make_plan(ds.records, 1, 0, batch, epoch=e, seed=1, shuffle="global")
             for e in range(epochs)]
    rss0 = rss_bytes()
    with make_reader("memory", ds, hold=mode) as r:
        rss1 = rss_bytes()
        c, t = time.process_time(), time.perf_counter()
        n = 0
        for plan in plans:
            for b in r.epoch(plan):
                n += len(b)
        dt, dc = time.perf_counter() - t, time.process_time() - c
        rec = int(ds.index.length.sum())
        print(json.dumps({"rate": n / dt, "cpu": dc / n * 1e9, "load_s": r.stats.load_s,
                          "rss_over": (rss1 - rss0 - rec) / ds.records,
                          "held_over": (r.stats.extra["held_bytes"] - rec) / ds.records,
                          "record": rec / ds.records}), flush=True)


def make_sets(top, names, imagenet_records):
    from hpcio.data.dataset import is_dataset
    from hpcio.datagen.write import generate
    roots = {}
    for name in names:
        preset, records, _ = SETS[name]
        if name == "imagenet":
            records = imagenet_records
        root = os.path.join(top, f"{name}-packed-raw-{records or 'all'}")
        if not is_dataset(root):
            generate(root, preset, records, "packed", "raw", force=True)
        roots[name] = root
    return roots


def fmt(v, f="{:.0f}"):
    return f"{f.format(statistics.median(v))} ({f.format(min(v))}-{f.format(max(v))})"


def main(argv=None):
    ap = ArgumentParser(prog="bench_memory", description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="where the datasets are made (kept; "
                                                "default: a temporary folder)")
    ap.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--imagenet-records", type=int, default=2000)
    ap.add_argument("--child", nargs=4, metavar=("ROOT", "MODE", "BATCH", "EPOCHS"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]), int(a.child[3]))
        return 0
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        roots = make_sets(a.dir or tmp, a.sets, a.imagenet_records)
        res = {(s, m): [] for s in a.sets for m in MODES}
        load = [os.getloadavg()[0]]
        for _ in range(a.repeats):
            for s in a.sets:
                for m in MODES:
                    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                        roots[s], m, str(SETS[s][2]), str(a.epochs)],
                                       capture_output=True, text=True, check=True)
                    res[s, m].append(json.loads(p.stdout.strip().splitlines()[-1]))
            load.append(os.getloadavg()[0])
    print(f"# cpus {os.cpu_count()}, 1 rank, {a.epochs} global-shuffle epochs per run, "
          f"repeats {a.repeats}; median (min-max); 1-min load "
          f"{min(load):.2f}-{max(load):.2f}")
    print(f"{'records':9} {'B/rec':>7} {'batch':>5} {'mode':7} {'samples/s':>26} "
          f"{'cpu ns/rec':>20} {'load s':>18} {'RSS B/rec':>16} {'held B/rec':>10}")
    for s in a.sets:
        for m in MODES:
            rs = res[s, m]
            print(f"{s:9} {rs[0]['record']:>7.0f} {SETS[s][2]:>5} {m:7} "
                  f"{fmt([r['rate'] for r in rs]):>26} {fmt([r['cpu'] for r in rs]):>20} "
                  f"{fmt([r['load_s'] for r in rs], '{:.2f}'):>18} "
                  f"{fmt([r['rss_over'] for r in rs]):>16} "
                  f"{statistics.median(r['held_over'] for r in rs):>10.0f}")
    print("pymem/buffer per repeat, median (min-max):")
    for s in a.sets:
        pairs = list(zip(res[s, "buffer"], res[s, "pymem"]))
        rate = [p["rate"] / b["rate"] for b, p in pairs]
        cpu = [p["cpu"] / b["cpu"] for b, p in pairs]
        print(f"  {s:9} samples/s {fmt(rate, '{:.2f}')}   cpu/rec {fmt(cpu, '{:.2f}')}")
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_memory"))
