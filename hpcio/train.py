"""``python -m hpcio.train``: data-parallel training on MPI ranks, measuring every step.

    srun -n 64 python -m hpcio.train --data /lustre/me/imagenet.lmdb --reader coordinated \\
        --model resnet50 --batch 32 --epochs 2 --cache cold

Every rank executes the same sample plan (:mod:`hpcio.plan`) through the chosen reader and
the preprocessing pipeline, trains a real model (DDP; NCCL on GPUs, gloo on CPUs) or the
``emulate`` model (a timed sleep, as DLIO and MLPerf Storage do), and records per step how
long it waited for data and why (:mod:`hpcio.metrics`). Results go to a run directory
(:mod:`hpcio.results`); rank 0 prints a table at the end.

Every option can also come from ``--config FILE.yaml`` (keys are option names, with dashes
or underscores); flags given on the command line override it.

Test hook: ``HPCIO_FAULT=<rank>:<step>`` raises an exception on that rank at the start of
that (0-based, counted over the whole run) step, to check that a failure on one rank ends
the whole job. It is read only by this command and has no other effect.
"""

import argparse
import math
import os
import sys
import time

import numpy as np

from .cli import ArgumentParser, load_config
from .errors import HpcioError, guard
from .hints import parse_hints

__all__ = ["build_parser", "parse_args", "main", "Step", "torch_threads"]

MODEL_NAMES = ("lenet", "cifar-quick", "caffenet", "resnet50", "emulate")
READER_NAMES = ("naive", "coordinated", "memory")
_now = time.perf_counter
# GIL hand-over interval (Python default 5 ms): the training thread must get the GIL
# back promptly after a sleep or a kernel, or loader threads inflate its compute time
SWITCH_INTERVAL = float(os.environ.get("HPCIO_SWITCH_INTERVAL", "0.0005"))


def _int(least):
    def conv(v):
        try:
            i = int(v)
            if isinstance(v, float) and i != v:
                raise ValueError
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{v!r} is not an integer")
        if i < least:
            raise argparse.ArgumentTypeError(f"{v!r} must be >= {least}")
        return i
    conv.__name__ = f"integer >= {least}"
    return conv


def _seconds(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"{v!r} is not a number of seconds")
    if not math.isfinite(f) or f < 0:
        raise argparse.ArgumentTypeError(f"{v!r} must be a finite number >= 0")
    return f


def _positive(v):
    f = _seconds(v)
    if f <= 0:
        raise argparse.ArgumentTypeError(f"{v!r} must be > 0")
    return f


class _Help(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except where there is none to show (None, [], flags)."""

    def _get_help_string(self, action):
        if action.default in (None, [], False) or action.option_strings == ["--independent"]:
            return action.help
        return super()._get_help_string(action)


def build_parser():
    """The command line (also the schema of ``--config`` files)."""
    p = ArgumentParser(
        prog="python -m hpcio.train", formatter_class=_Help,
        description="Data-parallel training on MPI ranks with per-step stall accounting: "
                    "how long training waits for data, and why.",
        epilog="Results: a run directory with config.yaml, env.json, rank-<r>.npz/json, "
               "summary.json and summary.txt (see hpcio/results.py and hpcio/metrics.py "
               "for definitions).")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="options as a YAML mapping (option names as keys); command-line "
                        "flags override it")
    g = p.add_argument_group("data")
    g.add_argument("--data", metavar="PATH", help="dataset directory (required)")
    g.add_argument("--reader", default="coordinated", choices=READER_NAMES,
                   help="how batches are read: every rank through the format's library "
                        "(naive), collective prefetched MPI-IO (coordinated), all in RAM "
                        "(memory)")
    g.add_argument("--cache", default="asis", choices=("cold", "warm", "asis"),
                   help="page-cache state of the dataset before each epoch")
    g.add_argument("--drop-caches", action="store_true", default=False,
                   help="with --cache cold, also drop the node's whole page cache "
                        "(needs root)")
    g.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE",
                   help="MPI-IO (ROMIO) hint for the reader, repeatable")
    g.add_argument("--reader-option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other reader option, repeatable (e.g. shared=false for the "
                        "coordinated reader; see hpcio/readers/coordinated.py)")
    g.add_argument("--reader-prefetch", type=_int(0), default=None, metavar="K",
                   help="batches the reader keeps in flight (reader's default if unset)")
    g.add_argument("--collective", dest="collective", action="store_true", default=None,
                   help="collective MPI-IO reads (coordinated reader)")
    g.add_argument("--independent", dest="collective", action="store_false", default=None,
                   help="independent MPI-IO reads (coordinated reader)")
    g = p.add_argument_group("model")
    g.add_argument("--model", default="lenet", choices=MODEL_NAMES,
                   help="network to train; 'emulate' sleeps --compute-time per step")
    g.add_argument("--compute-time", type=_seconds, default=0.01, metavar="S",
                   help="emulate: mean compute time per step (seconds)")
    g.add_argument("--compute-dist", default="fixed",
                   choices=("fixed", "normal", "uniform", "lognormal"),
                   help="emulate: distribution of the compute time")
    g.add_argument("--compute-std", type=_seconds, default=0.0, metavar="S",
                   help="emulate: standard deviation of the compute time")
    g.add_argument("--lr", type=_positive, default=0.01, help="SGD learning rate")
    g.add_argument("--momentum", type=_seconds, default=0.9, help="SGD momentum")
    g = p.add_argument_group("training")
    g.add_argument("--batch", type=_int(1), default=64, help="samples per rank per step")
    g.add_argument("--epochs", type=_int(1), default=1, help="passes over the data")
    g.add_argument("--steps", type=_int(1), default=None, metavar="N",
                   help="at most N steps per epoch (default: the whole epoch)")
    g.add_argument("--shuffle", default="global", choices=("none", "global", "chunk"),
                   help="sample order of each epoch (see hpcio/plan.py)")
    g.add_argument("--seed", type=_int(0), default=0,
                   help="seeds the sample order, augmentation and compute-time draws")
    g.add_argument("--drop-last", action=argparse.BooleanOptionalAction, default=True,
                   help="drop the records that do not fill a last full step")
    g.add_argument("--checkpoint-every", type=_int(0), default=0, metavar="N",
                   help="rank 0 writes model + optimiser state every N steps (0: never)")
    g.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                   help="where checkpoints go (default: RUNDIR/checkpoints)")
    g = p.add_argument_group("pipeline")
    g.add_argument("--threads", type=_int(1), default=2, help="preprocessing threads")
    g.add_argument("--prefetch", type=_int(0), default=2,
                   help="batches the pipeline prepares ahead of training")
    g.add_argument("--offline", action="store_true", default=False,
                   help="data are pre-decoded (raw, model-sized): skip decode/resize/augment")
    g.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                   help="random brightness + clip")
    g.add_argument("--preprocess", default="auto", choices=("auto", "on", "off"),
                   help="run the preprocessing pipeline; 'off' hands the step the batch's "
                        "bytes as read, as DLIO and MLPerf Storage do (only for emulate); "
                        "auto: off for emulate, on for real models")
    g = p.add_argument_group("run")
    g.add_argument("--out", metavar="RUNDIR", default=None,
                   help="results directory (default: runs/<time>-<reader>-<model>-n<ranks>)")
    g.add_argument("--dist", default="torch", choices=("torch", "horovod", "none"),
                   help="gradient exchange: torch.distributed DDP, Horovod, or none")
    g.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="auto: cuda:<local rank mod GPUs> when there are GPUs, else CPU")
    g.add_argument("--torch-threads", type=_int(0), default=0, metavar="N",
                   help="torch intra-op threads per rank (0: the node's cores / its ranks)")
    g.add_argument("--sample-interval", type=_positive, default=0.5, metavar="S",
                   help="seconds between CPU/memory/disk/GPU samples")
    g.add_argument("--progress", default="auto", choices=("auto", "on", "off"),
                   help="progress bar on rank 0 (auto: when its stdout is a terminal; under "
                        "mpiexec or srun it is a pipe, so say on)")
    return p


def _apply_config(parser, path):
    """Make the config file's values the parser's defaults, checked like flags."""
    cfg = load_config(path)
    actions = {a.dest: a for a in parser._actions}
    bad = sorted(k for k in cfg if k not in actions or k in ("help", "config"))
    if bad:
        raise HpcioError(f"config {path}: unknown option(s): {', '.join(bad)}",
                         everywhere=True)
    out = {}
    for k, v in cfg.items():
        a = actions[k]
        if k == "hint":
            if isinstance(v, dict):
                v = [f"{hk}={hv}" for hk, hv in v.items()]
            elif isinstance(v, str):
                v = [v]
        elif isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                            argparse.BooleanOptionalAction)) or k == "collective":
            if not isinstance(v, bool):
                raise HpcioError(f"config {path}: {k} must be true or false, not {v!r}",
                                 everywhere=True)
        elif v is not None and a.type is not None:
            try:
                v = a.type(v)
            except argparse.ArgumentTypeError as e:
                raise HpcioError(f"config {path}: {k}: {e}", everywhere=True)
        if a.choices is not None and v is not None and v not in a.choices:
            raise HpcioError(f"config {path}: {k}: {v!r} is not one of "
                             f"{', '.join(map(str, a.choices))}", everywhere=True)
        out[k] = v
    parser.set_defaults(**out)


def parse_args(argv=None):
    """Flags (over ``--config``), checked; every error is one line on every rank."""
    parser = build_parser()
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, _ = pre.parse_known_args(argv)
    if known.config:
        _apply_config(parser, known.config)
    args = parser.parse_args(argv)
    if not args.data:
        raise HpcioError("--data PATH is required (a dataset directory; make one with "
                         "'python -m hpcio.datagen')", everywhere=True)
    if args.compute_std > 0 and args.compute_dist == "fixed":
        raise HpcioError("--compute-std needs --compute-dist normal, uniform or lognormal",
                         everywhere=True)
    if args.preprocess == "auto":
        args.preprocess = "off" if args.model == "emulate" else "on"
    if args.preprocess == "off" and args.model != "emulate":
        raise HpcioError(f"--preprocess off: model {args.model} needs tensors; only "
                         "emulate runs on the bytes as read", everywhere=True)
    args.hints = parse_hints(args.hint)
    return args


def torch_threads(world, want=0):
    """Intra-op threads per rank: ``want``, else this rank's CPUs (its affinity mask when
    the launcher bound it, else the node's cores shared among the node's ranks)."""
    if want:
        return want
    try:
        mine = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        mine = os.cpu_count() or 1
    total = os.cpu_count() or mine
    if mine < total:
        return max(1, mine)
    return max(1, total // max(1, world.local_size))


class Step:
    """One training step of a real model: forward, loss, backward (DDP allreduces the
    gradients during it), optimiser step; synchronised on GPU so its time is the
    device's, not the launch's."""

    def __init__(self, model, optimizer, device):
        import torch
        self.torch = torch
        self.model, self.optimizer, self.device = model, optimizer, device
        self.cuda = device.type == "cuda"
        self.loss_fn = torch.nn.CrossEntropyLoss()
        model.train()

    def __call__(self, x, y):
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        self.optimizer.step()
        if self.cuda:
            self.torch.cuda.synchronize(self.device)
        return loss.detach()


class EmulatedStep:
    """The emulate model's step: sleep for the next drawn compute time."""

    def __init__(self, model):
        self.model = model

    def __call__(self, x, y):
        self.model.step()
        return None


def _fault():
    """(rank, step) of the HPCIO_FAULT test hook, or None."""
    v = os.environ.get("HPCIO_FAULT")
    if not v:
        return None
    try:
        r, s = v.split(":")
        return int(r), int(s)
    except ValueError:
        raise HpcioError(f"HPCIO_FAULT={v!r}: expected <rank>:<step>", everywhere=True)


def _reader_options(args):
    opts = dict(parse_hints(args.reader_option))
    if args.hints:
        opts["hints"] = args.hints
    if args.reader_prefetch is not None:
        opts["prefetch"] = args.reader_prefetch
    if args.collective is not None:
        opts["collective"] = args.collective
    return opts


def _input_shape(args, ds, spec):
    if spec.input_shape is not None:
        return tuple(spec.input_shape)
    h, w, c = ds.shape
    return (c, h, w)


def _build_model(args, ds, world):
    """(module, spec, step class) for ``--model``, with the data's class count."""
    if args.model == "emulate":
        from .emulate import SPEC, ComputeTime, EmulatedModel
        ct = ComputeTime(args.compute_time, args.compute_std, args.compute_dist,
                         seed=args.seed, rank=world.rank)
        return EmulatedModel(ct), SPEC
    from .models import make_model
    classes = ds.classes
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int)
                                or classes < 1):
        raise HpcioError(f"{ds.root}: manifest has an invalid class count {classes!r}",
                         everywhere=True)
    return make_model(args.model, num_classes=classes)


def _progress(args, world, total):
    if world.rank != 0:
        return None
    on = args.progress == "on" or (args.progress == "auto" and sys.stdout.isatty())
    if not on:
        return None
    from tqdm import tqdm
    return tqdm(total=total, unit="step", file=sys.stdout, dynamic_ncols=True,
                leave=False)


def _truncate(plan, steps):
    """The plan cut to its first ``steps`` steps (so readers never read past them)."""
    if steps is None or steps >= plan.steps:
        return plan
    from .plan import Plan
    return Plan(plan.ids[:steps * plan.batch], plan.batch, plan.rank, plan.ranks,
                plan.epoch)


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def main(argv=None):
    args = parse_args(argv)
    fault = _fault()

    from mpi4py import MPI  # noqa: F401  (initialises MPI)
    import torch

    from . import metrics
    from .dataset import open_dataset
    from .dist import init_world, make_dist, pick_device
    from .pipeline import Pipeline
    from .plan import make_plan
    from .results import RunDir, StopFlag, StopVote, capture_env, default_name

    t_begin = _now()
    stop = StopFlag()
    world = init_world()
    comm = world.comm
    threads = torch_threads(world, args.torch_threads)
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    sys.setswitchinterval(SWITCH_INTERVAL)

    # ---- checks before anything heavy: flags, data, model vs data, batch vs records ----
    device = pick_device(world, args.device)
    ds = open_dataset(args.data, comm)
    model, spec = _build_model(args, ds, world)
    input_shape = _input_shape(args, ds, spec)
    plan0 = make_plan(ds.records, world.size, world.rank, args.batch, epoch=0,
                      seed=args.seed, shuffle=args.shuffle, drop_last=args.drop_last)
    steps_per_epoch = min(plan0.steps, args.steps or plan0.steps)
    classes = ds.classes if ds.classes is not None else getattr(spec, "classes", None)
    if args.preprocess == "on":
        pipe = Pipeline(ds.manifest, input_shape, threads=args.threads,
                        prefetch=args.prefetch, augment=args.augment, offline=args.offline,
                        seed=args.seed * 1_000_003 + world.rank,
                        pin_memory=device.type == "cuda", classes=classes)
    else:
        from .emulate import ReadOnly
        pipe = ReadOnly(args.prefetch)
    from .readers import make_reader
    from .cache import cache_state
    run = RunDir.create(args.out or os.path.join(
        "runs", default_name(args.reader, args.model, world.size)), comm)
    ckpt_dir = args.checkpoint_dir or os.path.join(run.path, "checkpoints")
    ropts = _reader_options(args)
    # a cold epoch re-opens the reader after evicting: pages a live process has mapped
    # (LMDB's mmap) stay in the page cache whatever fadvise or drop_caches say
    reopen = args.cache == "cold" and args.reader != "memory"

    dist_name = "none" if args.model == "emulate" else args.dist
    dist = make_dist(dist_name, world, device)
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model, optimizer = dist.wrap(model, optimizer)
    step_fn = EmulatedStep(model) if args.model == "emulate" else Step(model, optimizer,
                                                                      device)

    env = capture_env(world, ds.root, args.cache, ropts, device)
    config = {k: v for k, v in vars(args).items() if k not in ("hint",)}
    config.update({
        "ranks": world.size, "nodes": world.nodes, "run_dir": run.path,
        "dataset": {k: ds.manifest.get(k) for k in ("format", "encoding", "shape",
                                                    "classes", "records")},
        "dataset_bytes": ds.nbytes(),
        "steps_per_epoch": steps_per_epoch, "plan_steps_per_epoch": plan0.steps,
        "input_shape": list(input_shape), "num_classes": classes,
        "dist_backend": getattr(dist, "backend", dist_name), "dist_used": dist_name,
        "device_rank0": str(device), "torch_threads": threads,
        "checkpoint_dir": ckpt_dir, "reader_options": ropts,
    })
    if world.rank == 0:
        run.yaml("config.yaml", _jsonable(config))
        run.json("env.json", env)

    # ---- training --------------------------------------------------------------------
    origin, origin_unix = _now(), time.time()  # step t0s are relative to this moment
    log = metrics.StepLog(args.epochs * steps_per_epoch, origin=origin)
    losses = np.full(args.epochs * steps_per_epoch, np.nan)
    sampler = metrics.Sampler(args.sample_interval, ds.root, device, origin=origin)
    sampler.start()
    vote = StopVote(comm)
    bar = _progress(args, world, args.epochs * steps_per_epoch)
    epochs, checkpoints = [], []
    cuda = device.type == "cuda"
    every = args.checkpoint_every
    gstep, cut = 0, False
    reader, read_totals = None, {}
    try:
        for epoch in range(args.epochs):
            if vote.settle(bool(stop)):
                cut = True
                break
            ts = _now()
            if reader is not None and reopen:
                reader.close()
                reader = None
            cache = cache_state(args.cache, ds, comm, drop=args.drop_caches)
            if reader is None:
                reader = make_reader(args.reader, ds, comm, **ropts)
            plan = _truncate(make_plan(ds.records, world.size, world.rank, args.batch,
                                       epoch=epoch, seed=args.seed, shuffle=args.shuffle,
                                       drop_last=args.drop_last), args.steps)
            before = metrics.counters(reader)
            it = pipe.run(reader.epoch(plan), epoch=epoch)
            t_start = _now()
            t0 = t_start
            done = 0
            try:
                for s in range(plan.steps):
                    if fault is not None and fault == (world.rank, gstep):
                        raise RuntimeError(f"HPCIO_FAULT test hook: injected failure at "
                                           f"step {gstep}")
                    b = next(it)
                    t1 = _now()
                    x = b.x.to(device, non_blocking=True)
                    y = b.y.to(device, non_blocking=True)
                    if cuda:
                        torch.cuda.synchronize(device)
                    t2 = _now()
                    loss = step_fn(x, y)
                    t3 = _now()
                    if every and (gstep + 1) % every == 0 and world.rank == 0:
                        checkpoints.append(_checkpoint(ckpt_dir, model, optimizer, epoch,
                                                       s, gstep))
                        t4 = _now()
                    else:
                        t4 = t3
                    if loss is not None:
                        losses[log.n] = float(loss)
                    gstep += 1
                    done += 1
                    if bar is not None:
                        bar.update(1)
                    want_stop = vote.poll(bool(stop))
                    t5 = _now()
                    log.add(epoch, s, t0, t1, t2, t3, t4, t5, b.t_fetch0, b.t_fetch1,
                            b.t_prep1, b.records, b.nbytes, b.fetch_s, b.prep_s)
                    t0 = t5
                    if want_stop:
                        cut = True
                        break
            finally:
                t_end = _now()
                it.close()
            after = metrics.counters(reader)
            d = metrics.delta(before, after)
            for k, v in d.get("reader", {}).items():
                read_totals[k] = read_totals.get(k, 0) + v
            epochs.append({"epoch": epoch, "steps": done, "setup_s": t_start - ts,
                           "elapsed_s": t_end - t_start, "cache": _jsonable(cache),
                           "counters": d})
            if cut:
                break
    finally:
        if bar is not None:
            bar.close()
    vote.close()
    sampler.stop()
    t_train = _now() - origin

    # ---- results: every rank its own files, then one gather of small summaries ----------
    arrays = log.arrays()
    arrays["loss"] = losses[:log.n]
    rsum = metrics.rank_summary(arrays)
    run.npz(f"rank-{world.rank}.npz", arrays)
    run.json(f"rank-{world.rank}.json", {
        "rank": world.rank, "host": world.hostname, "local_rank": world.local_rank,
        "node": world.node, "device": str(device), "torch_threads": threads,
        "origin_unix": origin_unix, "train_s": t_train, "epochs": epochs,
        "checkpoints": checkpoints,
        "reader_stats": _jsonable(dict(
            {k: v for k, v in (reader.stats.as_dict().items() if reader else ())
             if k not in read_totals}, **read_totals)),
        "reader_reopened_each_epoch": reopen, "summary": rsum,
        "samples": sampler.as_dict()})
    gathered = comm.gather((rsum, checkpoints, sampler.disk_read_end -
                            sampler.disk_read_start, world.local_rank, stop.signum),
                           root=0)
    if reader is not None:
        reader.close()
    pipe.close()
    dist.close()
    if world.rank == 0:
        _write_summary(run, args, world, gathered, cut, stop, steps_per_epoch, t_train,
                       _now() - t_begin, epochs)
    stop.restore()
    return 0


def _checkpoint(ckpt_dir, model, optimizer, epoch, step, gstep):
    from .checkpoint import save_checkpoint
    rec = save_checkpoint(ckpt_dir, model, optimizer, epoch, step)
    rec["global_step"] = gstep
    return rec


def _write_summary(run, args, world, gathered, cut, stop, steps_per_epoch, t_train,
                   t_total, epochs):
    from . import metrics
    per_rank = [g[0] for g in gathered]
    ckpts = [c for g in gathered for c in g[1]]
    # node-wide disk counters: count one rank per node (local rank 0)
    disk = sum(g[2] for g in gathered if g[3] == 0)
    if any(r["steps"] == 0 for r in per_rank):
        figures = None
    else:
        figures = metrics.summarize(per_rank)
    summary = {
        "cut_short": bool(cut),
        "signal": next((g[4] for g in gathered if g[4]), None),
        "signalled_ranks": [r for r, g in enumerate(gathered) if g[4]],
        "reader": args.reader, "model": args.model, "ranks": world.size,
        "nodes": world.nodes, "batch": args.batch, "epochs_requested": args.epochs,
        "epochs_run": len(epochs), "steps_per_epoch": steps_per_epoch,
        "train_s": t_train, "total_s": t_total,
        "au_definition": "AU = compute / wall per rank (mean over ranks), as DLIO and "
                         "MLPerf Storage; the first step of each epoch is excluded from "
                         "AU, samples/s and MiB/s as MLPerf Storage does",
        "metrics": figures,
        "disk_read_bytes": disk,
        "checkpoints": {"count": len(ckpts),
                        "seconds": sum(c["seconds"] for c in ckpts),
                        "bytes": sum(c["bytes"] for c in ckpts),
                        "mib_per_s_mean": (float(np.mean([c["mib_per_s"] for c in ckpts
                                                          if c["mib_per_s"]]))
                                           if ckpts else None)},
    }
    title = (f"hpcio.train: {args.model} on {world.size} rank(s), reader {args.reader}, "
             f"cache {args.cache}, batch {args.batch}, {len(epochs)} of {args.epochs} "
             f"epoch(s) x {steps_per_epoch} steps" + ("  [CUT SHORT by signal]" if cut
                                                       else ""))
    if figures is None:
        text = title + "\n  no step completed"
    else:
        text = metrics.format_table(figures, title)
    if ckpts:
        text += (f"\n  checkpoints: {len(ckpts)}, {summary['checkpoints']['seconds']:.3f} s, "
                 f"{summary['checkpoints']['mib_per_s_mean']:.1f} MiB/s mean")
    text += f"\n  results: {run.path}\n"
    run.json("summary.json", summary)
    run.text("summary.txt", text)
    print(text, end="", flush=True)


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.train"))
