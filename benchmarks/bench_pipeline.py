"""Throughput of the preprocessing pipeline alone, per dataset and worker-thread count.

    python benchmarks/bench_pipeline.py [--repeats 3] [--threads 1 2] [--workloads ...]

The batches are built in memory beforehand from synthetic pictures (:mod:`hpcio.data.pictures`,
which compress like the real datasets), so no I/O is involved: what is timed is the
pipeline's copy, decode, resize, brightness, clip and normalise, on ``threads`` workers.

records/s  records delivered by ``Pipeline.run`` divided by the wall time from ``run()``
           to its ``StopIteration``, with a consumer that does nothing else;
MiB/s in   encoded record bytes consumed per second (what a reader must deliver to keep
           up); MiB/s out: float32 tensor bytes produced per second.
cpu us/rec CPU time of the whole process (all threads, ``time.process_time``) per record:
           the cost of preprocessing, less sensitive than wall time to other load on a
           shared machine.

Workloads are timed interleaved (every workload and thread count once, then again), and
each figure is the median over ``--repeats`` with the min-max spread beside it.
"""

import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from hpcio.cli import ArgumentParser  # noqa: E402
from hpcio.errors import guard  # noqa: E402
from hpcio.data.pictures import encode, render  # noqa: E402
from hpcio.train.pipeline import Pipeline  # noqa: E402
from hpcio.data.presets import PRESETS  # noqa: E402
from hpcio.readers.base import Batch  # noqa: E402

# name: (preset, encoding, stored shape or None for the preset's, model input (C, H, W),
#        batch size, records per timing, distinct pictures, offline)
WORKLOADS = {
    "mnist-raw": ("mnist", "raw", None, (1, 28, 28), 64, 60_000, 2048, False),
    "cifar-png": ("cifar10", "png", None, (3, 32, 32), 100, 10_000, 1000, False),
    "imagenet-jpeg-227": ("imagenet", "jpeg", None, (3, 227, 227), 32, 384, 96, False),
    "imagenet-jpeg-224": ("imagenet", "jpeg", None, (3, 224, 224), 32, 384, 96, False),
    "imagenet-raw-227": ("imagenet", "raw", None, (3, 227, 227), 32, 1024, 96, False),
    "imagenet-offline-227": ("imagenet", "raw", (227, 227, 3), (3, 227, 227), 32, 2048,
                             96, True),
}


def make_batches(name):
    """The workload's batches (Batch objects over pre-encoded records) and its manifest."""
    preset, enc, shape, _, bs, records, distinct, _ = WORKLOADS[name]
    p = PRESETS[preset]
    shape = tuple(shape or p.shape)
    ids = np.arange(distinct)
    pixels, labels = render(p.style, 0, ids, p.shape, p.classes)
    if shape != tuple(p.shape):  # pre-decoded ("offline") data: resized beforehand
        import torch
        import torch.nn.functional as F
        t = torch.from_numpy(pixels).permute(0, 3, 1, 2).float()
        t = F.interpolate(t, size=shape[:2], mode="bilinear", antialias=True)
        pixels = t.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    data, lengths = encode(pixels, enc, quality=p.quality)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    batches = []
    for s in range(records // bs):
        pick = (np.arange(bs) + s * bs) % distinct
        parts = [data[starts[i]:starts[i + 1]] for i in pick]
        offsets = np.concatenate([[0], np.cumsum(lengths[pick])]).astype(np.int64)
        batches.append(Batch(s, pick.astype(np.int64), np.concatenate(parts), offsets,
                             labels[pick]))
    manifest = {"encoding": enc, "shape": list(shape), "classes": p.classes}
    return manifest, batches


def time_once(manifest, batches, model_shape, threads, offline, prefetch):
    """(wall seconds, CPU seconds, records) of one pass of the pipeline over ``batches``."""
    with Pipeline(manifest, model_shape, threads=threads, prefetch=prefetch,
                  offline=offline) as pipe:
        c, t = time.process_time(), time.perf_counter()
        n = 0
        for out in pipe.run(batches):
            n += out.records
        return time.perf_counter() - t, time.process_time() - c, n


def main(argv=None):
    ap = ArgumentParser(prog="bench_pipeline", description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's own)")
    args = ap.parse_args(argv)
    import torch
    if args.torch_threads:
        torch.set_num_threads(args.torch_threads)
    data = {}
    for name in args.workloads:
        manifest, batches = make_batches(name)
        enc_bytes = sum(b.nbytes for b in batches) / sum(len(b) for b in batches)
        data[name] = (manifest, batches, enc_bytes)
    times = {(w, t): [] for w in args.workloads for t in args.threads}
    cpu = {k: [] for k in times}
    for _ in range(args.repeats):
        for name in args.workloads:
            manifest, batches, _ = data[name]
            model_shape, offline = WORKLOADS[name][3], WORKLOADS[name][7]
            for th in args.threads:
                dt, dc, n = time_once(manifest, batches, model_shape, th, offline,
                                      args.prefetch)
                times[name, th].append(n / dt)
                cpu[name, th].append(dc / n * 1e6)
    print(f"# cpus {os.cpu_count()}, torch threads {torch.get_num_threads()}, "
          f"prefetch {args.prefetch}, repeats {args.repeats}; median (min-max); "
          f"load {os.getloadavg()[0]:.2f} at the end")
    print(f"{'workload':22} {'thr':>3} {'B/record':>9} {'records/s':>22} {'MiB/s in':>9} "
          f"{'MiB/s out':>9} {'cpu us/rec':>10}")
    for name in args.workloads:
        _, batches, enc_bytes = data[name]
        c, h, w = WORKLOADS[name][3]
        for th in args.threads:
            v = times[name, th]
            med = statistics.median(v)
            print(f"{name:22} {th:>3} {enc_bytes:>9.0f} "
                  f"{med:>10.0f} ({min(v):.0f}-{max(v):.0f})".ljust(60)
                  + f"{med * enc_bytes / 2**20:>9.1f} {med * c * h * w * 4 / 2**20:>9.1f}"
                  f" {statistics.median(cpu[name, th]):>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="bench_pipeline"))
