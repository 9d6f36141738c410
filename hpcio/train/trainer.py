"""The trainer: set up a run, train epoch after epoch measuring every step, write results.

    srun -n 64 python -m hpcio.train --data /lustre/me/imagenet.lmdb --reader coordinated \\
        --model resnet50 --batch 32 --epochs 2 --cache cold

Every rank executes the same sample plan (:mod:`hpcio.plan`) through the chosen reader and
the preprocessing pipeline, trains a real model (DDP; NCCL on GPUs, gloo on CPUs) or the
``emulate`` model (a timed sleep, then a barrier of every rank, as DLIO and MLPerf Storage
do, and a gradient allreduce only when asked: :mod:`hpcio.train.exchange`), reading the
data cold by default (``--cache``: :mod:`hpcio.cache`), and records per step how long it
waited for its own data, for the other ranks, and why (:mod:`hpcio.measure.steps`).
Results go to a run directory (:mod:`hpcio.measure.rundir`); rank 0 prints a table at
the end.

Nothing measured is lost and no rank waits silently: every rank flushes its step arrays
and counters (marked partial) at each epoch end and every ``--flush-interval`` seconds on a
background thread, and once more when it fails; SIGTERM and Ctrl-C stop every rank at the
same step; a watchdog (:class:`~hpcio.train.stop.Watchdog`) ends the job with one line when
a rank makes no progress for ``--stall-timeout`` seconds.

A run cut short by a signal exits with 128 + the signal's number on every rank (SIGTERM
143, Ctrl-C 130, as a shell reports it), after writing everything with ``cut_short`` and
the signal; a complete run exits 0. The watchdog stays on through ``MPI_Finalize``, and
so do the signal handlers: a signal after the summary is written leaves the run complete,
the signal noted (``signal_after_summary``), and exits 128 + it with one line.

Test hook: ``HPCIO_FAULT=<rank>:<step>`` raises an exception on that rank at the start of
that (0-based, counted over the whole run) step, to check that a failure on one rank ends
the whole job; ``HPCIO_FAULT=<rank>:finalize`` stops that rank (SIGSTOP) after its results
are written, just before ``MPI_Finalize``, as a rank stopped at the end of a job. It is read
only by this command and has no other effect.
"""

import os
import signal
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..explain.summary import run_summary
from ..cache import WARM_AFTER_COLD, cache_state, describe, warm_nodes_line
from ..data.dataset import NO_CRC, open_dataset
from ..errors import HpcioError, report_to
from ..fsutil import jsonable
from ..measure import darshan
from ..measure.probes import counters, delta, os_view, process_age_s, rss_bytes
from ..measure.provenance import provenance
from ..measure.rundir import (Flusher, RunDir, capture_env, check_space, default_name,
                               gather_hosts, results_bytes)
from ..measure.sampler import Sampler
from ..measure.schema import Invalid
from ..measure.steps import STEP_FIELDS, StepLog, rank_summary
from ..measure.trace import TraceWriter
from ..mpiutil import finalize, idle_barrier, least_over_ranks, on_root
from ..plan import make_plan
from ..progress import Progress
from ..readers import READERS, check_dataset, make_reader
from .checkpoint import check_checkpoint_dir, claim_checkpoint_dir, save_checkpoint
from .statecheckpoint import StateCheckpointer, state_bytes, summarize_checkpoints
from .computetime import ComputeTime
from .dist import check_dist, init_world, make_dist, pick_device
from .emulate import SPEC, EmulatedModel, ReadOnly, as_module
from .exchange import NoExchange, check_fits, exchange_plan, make_exchange
from .models import make_model
from ..workloads import FORMATS as FORMATS_OF_WORKLOAD
from .options import parse_args, reader_options
from .stop import StopFlag, StopVote, Watchdog, signal_exit, signal_name

__all__ = ["main", "setup", "train", "write_results", "Training", "Step", "torch_threads",
           "torch_needs"]

_now = time.perf_counter
# GIL hand-over interval (Python default 5 ms): the training thread must get the GIL
# back promptly after a sleep or a kernel, or loader threads inflate its compute time
SWITCH_INTERVAL = float(os.environ.get("HPCIO_SWITCH_INTERVAL", "0.0005"))


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
    gradients during it), optimiser step (Horovod's waits for its allreduces there);
    synchronised on GPU so its time is the device's, not the launch's."""

    def __init__(self, model, optimizer, device):
        import torch  # torch: seconds; a real model's run
        self.torch = torch
        self.model, self.optimizer, self.device = model, optimizer, device
        self.cuda = device.type == "cuda"
        self.loss_fn = torch.nn.CrossEntropyLoss()
        model.train()

    def __call__(self, x, y):
        # set_to_none is the default (torch >= 2.0); Horovod's optimiser takes no argument
        self.optimizer.zero_grad()
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


FAULT_FINALIZE = "finalize"


def torch_needs(args, exchange):
    """What this run asks of torch, as words for config.yaml: empty for an emulated run
    that hands its bytes to no device, keeps no checkpoint, preprocesses nothing into
    tensors and ends its steps without gloo. Such a run never imports torch: its ranks
    start in about a second and hold tens of MB, not ~5 s and ~230 MB each, which is what
    lets one node emulate many accelerators (``benchmarks/bench_client.py``)."""
    needs = []
    if args.model != "emulate":
        needs.append(f"model {args.model}")
    if args.preprocess == "on":
        needs.append("preprocessing into tensors")
    if args.device == "cuda":
        needs.append("--device cuda (each batch copied to the GPU)")
    if args.checkpoint_every:
        needs.append("checkpoints")
    if exchange.get("mode") in ("barrier", "fabric", "measured") and exchange.get("via") == "gloo":
        needs.append("the step's exchange over gloo")
    return needs


def _fault():
    """(rank, step or "finalize") of the HPCIO_FAULT test hook, or None."""
    v = os.environ.get("HPCIO_FAULT")
    if not v:
        return None
    try:
        r, s = v.split(":")
        return int(r), (s if s == FAULT_FINALIZE else int(s))
    except ValueError:
        raise HpcioError(f"HPCIO_FAULT={v!r}: expected <rank>:<step> or <rank>:finalize",
                         everywhere=True)


def _input_shape(args, ds, spec):
    if spec.input_shape is not None:
        return tuple(spec.input_shape)
    if len(ds.shape) == 3:
        h, w, c = ds.shape
        return (c, h, w)
    if args.preprocess == "off":  # bytes only: any record shape will do
        return tuple(ds.shape)
    raise HpcioError(f"{ds.root}: records of shape {list(ds.shape)} are not pictures "
                     f"(H x W x C); preprocessing needs pictures (--preprocess off reads "
                     f"bytes only)", everywhere=True)


def _build_model(args, ds, world):
    """(module, spec, step class) for ``--model``, with the data's class count."""
    if args.model == "emulate":
        ct = ComputeTime(args.compute_time, args.compute_std, args.compute_dist,
                         seed=args.seed, rank=world.rank)
        return EmulatedModel(ct), SPEC
    classes = ds.classes
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int)
                                or classes < 1):
        raise HpcioError(f"{ds.root}: manifest has an invalid class count {classes!r}",
                         everywhere=True)
    return make_model(args.model, num_classes=classes)


def _trace_into(run_dir, ds, world):
    """A run traced by Darshan (``--darshan``, or a launcher's LD_PRELOAD): its log goes to
    RUNDIR/darshan/<run>.darshan (rank 0 writes it at MPI_Finalize), and rank 0 says in one
    line when the log would miss the dataset's reads. Returns the library, or None."""
    lib = darshan.preloaded_library()
    if lib is None:
        return None
    if world.rank == 0:
        darshan.set_logfile(darshan.log_path(run_dir, os.path.basename(run_dir)))
        why = darshan.incomplete(len(ds.index.files))
        if why:
            print(f"hpcio.train: warning: the Darshan log will be incomplete: {why}",
                  file=sys.stderr, flush=True)
    return lib


def _open_trace(args, world, out):
    """Every rank claims its trace file (on the training thread: its id is the events'
    tid); one that cannot ends the job with one line, the lowest rank's (collective)."""
    trace, err = None, None
    try:
        trace = TraceWriter.open(out.trace_file(world.rank, args.trace_dir, args.trace_gzip),
                                 gz=args.trace_gzip)
    except HpcioError as e:
        err = str(e)
    errs = world.comm.allgather(err) if world.comm is not None else [err]
    first = next((e for e in errs if e), None)
    if first:
        raise HpcioError(first, everywhere=True)
    return trace


def _check_space(args, world, model, out, steps_per_epoch):
    """Rank 0, before anything is written: room for the results and the checkpoints."""
    steps = args.epochs * steps_per_epoch
    need = results_bytes(world.size, steps, len(STEP_FIELDS) + 1)
    ckpt = 0
    if args.checkpoint_every and args.checkpoint_workload:  # the layout, all ranks
        ckpt = steps // args.checkpoint_every * (state_bytes(args, world) + (1 << 20))
    elif args.checkpoint_every:  # model and optimiser state (momentum: as large again)
        state = sum(p.numel() * p.element_size() for p in model.parameters())
        ckpt = steps // args.checkpoint_every * (2 * state + (64 << 10))
    if args.checkpoint_dir:
        check_space(args.checkpoint_dir, ckpt, "--checkpoint-dir")
        ckpt = 0
    check_space(out, need + ckpt, "--out")


def _progress(args, world, total):
    """On rank 0's stdout: stderr carries the one-line errors that sweeps collect."""
    if world.rank != 0 or args.progress == "off":
        return None
    mode = {"on": "bar"}.get(args.progress, args.progress)
    return Progress(total, "step", "training", file=sys.stdout, mode=mode,
                    every=args.progress_interval, leave=False)


def _jsonable(v):
    """``v`` for config.yaml and the rank and env JSON: what JSON cannot hold as its text."""
    return jsonable(v, other=str)


@dataclass
class Training:
    """What one training run has set up: the job, the data, the model and where results go.
    ``torch``: whether the run uses torch (:func:`torch_needs`); batches are tensors then."""

    args: object
    world: object
    device: object
    ds: object
    model: object
    optimizer: object
    dist: object
    step_fn: object
    pipe: object
    out: RunDir
    reader_options: dict
    reopen: bool
    steps_per_epoch: int
    threads: int
    ckpt_dir: str
    fault: object = None
    t_begin: float = 0.0
    watchdog: Watchdog = None
    env: dict = None  # rank 0's env.json, rewritten once the cache state is known per node
    exchange: object = field(default_factory=NoExchange)
    exchange_info: dict = field(default_factory=dict)
    trace: TraceWriter = None  # --trace: this rank's DFTracer trace
    torch: bool = True
    state_ckpt: StateCheckpointer = None  # --checkpoint-workload: the layout's checkpoints


@dataclass
class Trained:
    """What training measured on this rank."""

    log: StepLog
    losses: np.ndarray
    sampler: Sampler
    stop: StopFlag
    epochs: list = field(default_factory=list)
    checkpoints: list = field(default_factory=list)
    read_totals: dict = field(default_factory=dict)
    reader_stats: dict = field(default_factory=dict)
    cut: bool = False
    t_train: float = 0.0
    origin_unix: float = 0.0
    flusher: Flusher = None
    flushed: tuple = ()  # (steps, epochs, checkpoints) in the last flush
    startup: dict = field(default_factory=dict)  # the rank's cost before its first read
    ckpt_final_wait_s: float = None  # async: the last write waited for after the last step


def _steps_per_epoch(args, plan, records, world):
    """An epoch's steps: the plan's, or fewer with ``--steps``; a ``--steps`` above what
    an epoch holds is said (rank 0), not silently cut."""
    if args.steps and args.steps > plan.steps and world.rank == 0:
        print(f"hpcio.train: note: --steps {args.steps}: an epoch of {records:,} records at "
              f"batch {args.batch} on {world.size} rank(s) holds {plan.steps} steps; "
              f"running {plan.steps}", file=sys.stderr, flush=True)
    return min(plan.steps, args.steps or plan.steps)


def setup(args):
    """Check everything before anything heavy (flags, data, model against data, batch
    against records), then build the model, its gradient exchange and the run directory;
    rank 0 writes config.yaml and env.json. Collective."""
    t_begin = _now()
    world = init_world()
    wd = Watchdog(args.stall_timeout, world.rank, "hpcio.train",
                  waiting="the run's set-up (device, dataset checks: collectives)")
    wd.start()
    threads = torch_threads(world, args.torch_threads)
    sys.setswitchinterval(SWITCH_INTERVAL)
    dist_name = "none" if args.model == "emulate" else args.dist
    check_dist(dist_name, world)
    exchange_info = _exchange_plan(args, world, dist_name)
    needs = torch_needs(args, exchange_info)
    device = _device(args, world, needs, threads)
    ds = open_dataset(args.data, world.comm)
    check_dataset(args.reader, ds, reader_options(args))
    _check_workload(args.workload_info, ds, world.rank)
    if world.rank == 0 and ds.index.crc is None and \
            reader_options(args)["verify"] == "records":
        print(NO_CRC.format(root=ds.root), file=sys.stderr, flush=True)
    wd.mark("the model's construction")
    model, spec = _build_model(args, ds, world)
    if needs and args.model == "emulate":
        model = as_module(model)  # optimiser, DDP wrap and checkpoints work unchanged
    input_shape = _input_shape(args, ds, spec)
    plan0 = make_plan(ds.records, world.size, world.rank, args.batch, epoch=0,
                      seed=args.seed, shuffle=args.shuffle, drop_last=args.drop_last,
                      block=args.block, window=args.window)
    steps_per_epoch = _steps_per_epoch(args, plan0, ds.records, world)
    classes = ds.classes if ds.classes is not None else getattr(spec, "classes", None)
    pipe = _loader(args, ds, input_shape, world, device, classes, needs)
    wd.mark("the run directory's claim (a collective)")
    out_path = args.out or os.path.join("runs", default_name(args.reader, args.model,
                                                           world.size))
    ckpt_dir = os.path.abspath(args.checkpoint_dir) if args.checkpoint_dir else None
    if args.checkpoint_every and ckpt_dir:  # a refusal leaves nothing made
        on_root(world.comm, lambda: check_checkpoint_dir(ckpt_dir, out_path, args.force))
    on_root(world.comm, lambda: _check_space(args, world, model, out_path,
                                             steps_per_epoch))
    out = RunDir.create(out_path, world.comm)
    report_to(out.path)  # tracebacks of unexpected errors go into the run directory
    traced = _trace_into(out.path, ds, world)
    trace = _open_trace(args, world, out) if args.trace else None
    ckpt_dir = ckpt_dir or out.file(RunDir.CHECKPOINTS)
    if args.checkpoint_every:
        on_root(world.comm, lambda: claim_checkpoint_dir(ckpt_dir, out.path, args.force))
    ropts = reader_options(args)
    # a cold epoch re-opens a reader that maps the files after evicting: pages a live
    # process has mapped (LMDB's mmap) stay in the page cache whatever fadvise or
    # drop_caches say; the others keep their buffers and threads across epochs
    reopen = args.cache == "cold" and READERS[args.reader].maps_files

    wd.mark("the gradient exchange's set-up (collectives)")
    dist = make_dist(dist_name, world, device)
    exchange = make_exchange(exchange_info, world, said=out.file(RunDir.LOST_PEER_SAID))
    model, optimizer = _optimised(args, model, device, dist, wd) if needs else (model, None)
    step_fn = EmulatedStep(model) if args.model == "emulate" else Step(model, optimizer,
                                                                      device)
    state_ckpt = None
    if args.checkpoint_every and args.checkpoint_workload:
        wd.mark("the checkpoint state's set-up (writer, state, CRC-32C: collectives)")
        state_ckpt = StateCheckpointer(args, world, ckpt_dir, args.seed)
    wd.mark("the environment's capture (a collective)")
    gathered = gather_hosts(world)
    env = capture_env(world, ds.root, args.cache, ropts, device, gathered=gathered)
    if world.rank == 0 and traced:
        env["darshan"] = dict(darshan.info(traced), log=os.environ["DARSHAN_LOGFILE"])
    config = {k: v for k, v in vars(args).items() if k not in ("hint", "workload_info")}
    if args.workload_info:
        config["workload_unmodelled"] = list(args.workload_info.unmodelled)
    config.update({
        "ranks": world.size, "nodes": world.nodes, "run_dir": out.path,
        "dataset": dict({k: ds.manifest.get(k) for k in ("format", "encoding", "shape",
                                                         "dtype", "classes", "records")},
                        shards=len(ds.index.files),
                        record_bytes={"min": int(ds.index.length.min()),
                                      "max": int(ds.index.length.max())}),
        "dataset_bytes": ds.nbytes(),
        "steps_per_epoch": steps_per_epoch, "plan_steps_per_epoch": plan0.steps,
        "input_shape": list(input_shape), "num_classes": classes,
        "dist_backend": getattr(dist, "backend", dist_name), "dist_used": dist_name,
        "device_rank0": str(device), "torch_threads": threads,
        "checkpoint_dir": ckpt_dir, "reader_options": ropts, "exchange": exchange_info,
        "torch": needs or "not imported: an emulated run that asks for no torch feature",
    })
    if world.rank == 0:
        config = _jsonable(config)
        out.write_config(config)
        out.write_env(env)
        out.write_provenance(provenance(env, config, gathered))
    return Training(args, world, device, ds, model, optimizer, dist, step_fn, pipe, out, ropts,
               reopen, steps_per_epoch, threads, ckpt_dir, _fault(), t_begin, wd, env,
               exchange, exchange_info, trace, bool(needs), state_ckpt)



def _device(args, world, needs, threads):
    """The run's device, and torch's threads and seed when the run uses torch at all (its
    import costs seconds and ~200 MB: only for runs that ask for it)."""
    if not needs:
        return pick_device(world, "host")
    import torch  # torch: seconds and ~200 MB; only for runs that ask for it
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    return pick_device(world, args.device)


def _loader(args, ds, input_shape, world, device, classes, needs):
    """What turns the reader's batches into the step's input: the preprocessing pipeline
    (tensors), or the emulated step's read-only loader (bytes; tensors when torch is used)."""
    if args.preprocess != "on":
        return ReadOnly(args.prefetch, tensors=bool(needs))
    from .pipeline import Pipeline  # torch: only runs that make tensors
    return Pipeline(ds.manifest, input_shape, threads=args.threads, prefetch=args.prefetch,
                    augment=args.augment, offline=args.offline,
                    seed=args.seed * 1_000_003 + world.rank,
                    pin_memory=device.type == "cuda", classes=classes)


def _optimised(args, model, device, dist, wd):
    """The model on its device with its optimiser, wrapped for the gradient exchange."""
    import torch  # torch: imported already by _device for such runs
    model = model.to(device)
    wd.mark("the optimiser's set-up (its first use imports torch's compiler, seconds)")
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    wd.mark("the model's broadcast to every rank (a collective)")
    return dist.wrap(model, optimizer)


def _exchange_plan(args, world, dist_name):
    """The gradient exchange, for config and summary: emulate's step end
    (:func:`~hpcio.train.exchange.exchange_plan`; a measured buffer checked to fit), or a
    real model's, DDP's or Horovod's, inside its compute (hpcio.measure.steps says why).
    Collective."""
    if args.model != "emulate":
        what = ("none (--dist none)" if dist_name == "none" or world.size == 1 else
                f"{dist_name}: inside compute (the allreduce overlaps backward; straggler "
                f"wait and exchange are not measured apart)")
        return {"mode": "inside compute" if dist_name != "none" and world.size > 1
                else "none", "bytes": None, "via": dist_name, "fabric": None, "what": what}
    plan = exchange_plan(args.exchange_model, args.exchange_bytes, args.exchange_via,
                         args.exchange_fabric, world.size, world.nodes)
    check_fits(plan["bytes"] if plan["mode"] == "measured" else None, world)
    return plan


# what a rank waits for, as the watchdog says it
WAIT_VOTE = "the stop vote (a collective of every rank)"
WAIT_EPOCH = "the reader's epoch set-up (cache state, reader open: collectives)"
WAIT_BATCH = "a batch (reader and preprocessing)"
WAIT_STEP = "the step's compute (forward, backward, gradient allreduce)"
WAIT_EXCHANGE = "the gradient exchange (a collective of every rank)"
WAIT_CKPT = "a checkpoint write"
WAIT_WRITE = "this rank's result files"
WAIT_GATHER = "the end-of-run gather of the ranks' summaries (a collective)"
WAIT_SUMMARY = "the summary write and the end of the run"


def train(run):
    """Every epoch: set the cache state, (re)open the reader, run the steps; stop early
    when the ranks vote to (a signal). Returns what this rank measured; if it fails, what
    it measured until then is flushed first."""
    args, world, wd = run.args, run.world, run.watchdog
    startup = {"process_age_s": process_age_s(), "rss_bytes": rss_bytes(),
               "torch_imported": "torch" in sys.modules,
               "at": "set-up done, before the first read (the process's age: its launch, "
                     "imports, MPI start and set-up)"}
    origin, origin_unix = _now(), time.time()  # step t0s are relative to this moment
    total = args.epochs * run.steps_per_epoch
    t = Trained(StepLog(total, origin=origin), np.full(total, np.nan),
                Sampler(args.sample_interval, run.ds.root, run.device, origin=origin),
                StopFlag(), origin_unix=origin_unix, startup=startup)
    t.flusher = Flusher(lambda: _flush(run, t), args.flush_interval,
                        label=f"hpcio.train: rank {world.rank}")
    if run.trace is not None:
        run.trace.start(origin_unix, world.hostname, world.rank, world.size,
                        run_dir=run.out.path, clock_offset_s=world.clock_offset_s)
    t.sampler.start()
    t.flusher.start()
    vote = StopVote(world.comm)
    bar = _progress(args, world, total)
    reader = None

    def plan_of(epoch):
        return make_plan(run.ds.records, world.size, world.rank, args.batch, epoch=epoch,
                         seed=args.seed, shuffle=args.shuffle, drop_last=args.drop_last,
                         block=args.block, window=args.window).head(args.steps)
    try:
        for epoch in range(args.epochs):
            wd.mark(WAIT_VOTE)
            if vote.settle(bool(t.stop)):
                t.cut = True
                break
            wd.mark(WAIT_EPOCH)
            ts = _now()
            if reader is not None and run.reopen:
                reader.close()
                reader = None
            cache = cache_state(args.cache, run.ds, world.comm, drop=args.drop_caches)
            if epoch == 0 and world.rank == 0:
                _record_cache(run, cache)
            if reader is None:
                reader = make_reader(args.reader, run.ds, world.comm, **run.reader_options)
            plan = plan_of(epoch)
            if args.cache != "cold" and epoch + 1 < args.epochs:  # the files stay as they are
                reader.preload(plan_of(epoch + 1))
            reader.mark_cache()  # page-cache residency before and after: cache_gained_bytes
            if world.size > 1 and reader.stats.extra.get("cache_measured"):
                idle_barrier(world.comm)  # measured before any rank of the node reads
            before = counters(reader)
            done, t_start, t_end = _epoch(run, t, reader, plan, epoch, vote, bar)
            reader.mark_cache(end=True)
            d = delta(before, counters(reader))
            d["os"] = os_view(d, t_end - t_start)
            for k, v in d.get("reader", {}).items():
                t.read_totals[k] = t.read_totals.get(k, 0) + v
            t.epochs.append({"epoch": epoch, "steps": done, "setup_s": t_start - ts,
                             "elapsed_s": t_end - t_start, "cache": _jsonable(cache),
                             "counters": d, "rss_bytes": rss_bytes()})
            t.flusher.kick()
            if t.cut:
                break
        wd.mark(WAIT_VOTE)
        vote.close()
        if run.state_ckpt is not None:
            wd.mark(WAIT_CKPT)
            t.ckpt_final_wait_s = run.state_ckpt.finish()
    except BaseException:
        t.flusher.stop()
        t.flusher.flush()
        raise
    finally:
        if bar is not None:
            bar.close()
    t.flusher.stop()
    t.sampler.stop()
    t.t_train = _now() - origin
    if reader is not None:
        t.reader_stats = reader.stats.as_dict()
        reader.close()
    return t


def _epoch(run, t, reader, plan, epoch, vote, bar):
    """One epoch's steps, each stamped t0..t7 back to back (see
    :mod:`hpcio.measure.steps`); returns (steps done, start, end)."""
    world, device, step_fn, log, wd, exchange = (run.world, run.device, run.step_fn, t.log,
                                                 run.watchdog, run.exchange)
    cuda, tensors = device.type == "cuda", run.torch
    sync = sys.modules["torch"].cuda.synchronize if cuda else None
    every = run.args.checkpoint_every
    gstep = log.n
    it = run.pipe.run(reader.epoch(plan), epoch=epoch, lease=reader.lease)
    t_start = _now()
    t0, t_end = t_start, None
    done = 0
    try:
        for s in range(plan.steps):
            if run.fault is not None and run.fault == (world.rank, gstep):
                raise RuntimeError(f"HPCIO_FAULT test hook: injected failure at step "
                                   f"{gstep}")
            wd.mark(WAIT_BATCH)
            b = next(it)
            t1 = _now()
            wd.mark(WAIT_STEP)
            if tensors:
                x = b.x.to(device, non_blocking=True)
                y = b.y.to(device, non_blocking=True)
                if cuda:
                    sync(device)
            else:  # an emulated step without torch: the bytes stay where they are
                x, y = b.x, b.y
            t2 = _now()
            loss = step_fn(x, y)
            t3 = _now()
            wd.mark(WAIT_EXCHANGE)
            t4, t5 = exchange(t3)
            if every and (gstep + 1) % every == 0 and run.state_ckpt is not None:
                wd.mark(WAIT_CKPT)
                t.checkpoints.append(run.state_ckpt.checkpoint(gstep))
                t6 = _now()
            elif every and (gstep + 1) % every == 0 and world.rank == 0:
                wd.mark(WAIT_CKPT)
                t.checkpoints.append(_checkpoint(run.ckpt_dir, run.model, run.optimizer,
                                                 epoch, s, gstep))
                t6 = _now()
            else:
                t6 = t5
            if loss is not None:
                t.losses[log.n] = float(loss)
            gstep += 1
            done += 1
            if bar is not None:
                bar.update(1)
            wd.mark(WAIT_VOTE)
            want_stop = vote.poll(bool(t.stop))
            t7 = _now()
            log.add(epoch, s, t0, t1, t2, t3, t4, t5, t6, t7, b.t_fetch0, b.t_fetch1,
                    b.t_prep1, b.records, b.nbytes, b.fetch_s, b.prep_s,
                    run.dist.first_bucket_wait())
            t0 = t7
            if want_stop:
                t.cut = True
                break
        t_end = t0  # the epoch's clock is its steps' walls, end to end
    finally:
        if t_end is None:
            t_end = _now()
        it.close()
    return done, t_start, t_end


def _flush(run, t):
    """The flusher's write: this rank's files as they stand, marked partial, and the
    trace's new events; nothing if nothing was added since the last one."""
    now = (t.log.n, len(t.epochs), len(t.checkpoints))
    if now != t.flushed:
        _write_rank(run, t, partial=True)
        t.flushed = now
    if run.trace is not None:
        run.trace.write(t.log, len(t.epochs))


def _write_rank(run, t, partial):
    """rank-R.npz and rank-R.json from a snapshot of what this rank measured (safe beside
    the training thread: lists and dicts are copied, the step log is read up to the
    count of complete rows). Returns the rank's summary."""
    world = run.world
    arrays = t.log.arrays()
    n = len(arrays["wall"])
    arrays["loss"] = t.losses[:n].copy()
    rsum = rank_summary(arrays)
    # this rank's process CPU over its epochs (getrusage user + system, as counted)
    rsum["cpu_s"] = sum(e["counters"]["rusage"].get("utime", 0.0)
                        + e["counters"]["rusage"].get("stime", 0.0) for e in t.epochs)
    totals = dict(t.read_totals)
    stats = {k: v for k, v in t.reader_stats.items() if k not in totals}
    run.out.write_rank(world.rank, arrays, {
        "rank": world.rank, "partial": partial, "steps_flushed": n,
        "host": world.hostname, "local_rank": world.local_rank,
        "node": world.node, "device": str(run.device), "torch_threads": run.threads,
        "origin_unix": t.origin_unix, "mpi_init_unix": world.mpi_init_unix,
        "clock": {"offset_s": world.clock_offset_s, "rtt_s": world.clock_rtt_s,
                  "of": "this node's clock minus rank 0's"},
        "train_s": t.t_train, "startup": t.startup, "epochs": list(t.epochs),
        "checkpoints": [dict(c) for c in t.checkpoints],
        "checkpoint_final_wait_s": t.ckpt_final_wait_s,
        "reader_stats": _jsonable(dict(stats, **totals)),
        "reader_reopened_each_epoch": run.reopen, "summary": rsum,
        "cut_short": bool(t.cut), "signal": t.stop.signum,
        "signal_name": signal_name(t.stop.signum),
        "samples": t.sampler.as_dict()}, compact=partial)
    return rsum


def write_results(run, t):
    """Every rank its own files, then one gather of small summaries; rank 0 writes the
    summary and prints the table. Returns the exit code, the same on every rank: 0, or
    128 + the signal that cut the run short (the first signalled rank's)."""
    world, wd = run.world, run.watchdog
    wd.mark(WAIT_WRITE)
    rsum = _write_rank(run, t, partial=False)
    if run.trace is not None:
        run.trace.close(t.log)
    wd.mark(WAIT_GATHER)
    barrier = barrier_per_step(world.comm, t.log.arrays()) if world.size > 1 else None
    gathered = world.comm.gather((rsum, t.checkpoints, t.sampler.disk_read_end -
                                  t.sampler.disk_read_start, world.local_rank,
                                  t.stop.signum, t.ckpt_final_wait_s), root=0)
    wd.mark(WAIT_SUMMARY)
    run.pipe.close()
    if run.state_ckpt is not None:
        run.state_ckpt.close()
    run.exchange.close()
    run.dist.close()
    if world.rank == 0:
        verify = run.reader_options["verify"]
        if verify == "records" and run.ds.index.crc is None:
            verify = "size"  # an index without CRCs
        signum = _write_summary(run.out, run.args, world, gathered, t.cut, t.stop,
                                run.steps_per_epoch, t.t_train, _now() - run.t_begin,
                                t.epochs, run.exchange_info, verify, barrier,
                                t.reader_stats.get("odirect"))
    else:
        signum = None
    wd.mark(WAIT_SUMMARY)
    signum = world.comm.bcast(signum, root=0) if world.size > 1 else signum
    return signal_exit(signum) if t.cut else 0


def _finalize(run):
    """MPI_Finalize under the watchdog: a rank stopped after its last write must not hold
    the others there for ever."""
    if run.fault == (run.world.rank, FAULT_FINALIZE):
        os.kill(os.getpid(), signal.SIGSTOP)
    run.watchdog.finalizing()
    finalize()
    run.watchdog.stop()


def main(argv=None):
    args = parse_args(argv)
    if args.darshan:  # before MPI starts: the preload must be there when the process starts
        darshan.reexec_traced(args.darshan, darshan.shared_config(
            darshan.dataset_files(args.data)), dxt=args.darshan_dxt)
    run = setup(args)
    t = train(run)
    code = write_results(run, t)
    _finalize(run)  # signals stay handled (a flag) until MPI_Finalize returns
    t.stop.restore()
    return code or _signal_after_summary(run, t.stop.signum)


def _signal_after_summary(run, signum):
    """A signal that came once the run was complete (its summary written, not cut short):
    the run stays done, with the signal noted in its summary (rank 0's), and this rank
    exits 128 + the signal, as it would for any signal; rank 0 says so in one line."""
    if signum is None:
        return 0
    code = signal_exit(signum)
    if run.world.rank == 0:
        try:
            summary, _ = run.out.summary()
            summary["signal_after_summary"] = signal_name(signum)
            run.out.json(run.out.SUMMARY, summary)
        except (OSError, Invalid):
            pass  # the summary as written stands
        print(f"hpcio.train: {signal_name(signum)} after the run was complete and its "
              f"results written (exit {code}); {run.out.path} holds them", file=sys.stderr,
              flush=True)
    return code


def _check_workload(workload, ds, rank):
    """The data are the workload's format (one line naming the command that makes them),
    and rank 0 says in one line what of the workload hpcio does not model."""
    if workload is None:
        return
    fmt = FORMATS_OF_WORKLOAD[workload.format][0]
    if ds.format != fmt:
        raise HpcioError(f"workload {workload.name} reads {fmt} data; {ds.root} is "
                         f"{ds.format} (make its data with 'python -m hpcio.datagen generate "
                         f"DIR --workload {workload.name}')", everywhere=True)
    line = workload.unmodelled_line("hpcio.train")
    if rank == 0 and line:
        print(line, file=sys.stderr, flush=True)


def _record_cache(run, cache):
    """Rank 0: env.json gets the first epoch's cache state per node (host, resident after);
    a cold start that left a node warm is said at once, in one line."""
    per = {k: cache[k] for k in ("mode", "nodes", "warm_nodes") if k in cache}
    if "warm_nodes" in per:
        per["cold_everywhere"] = not per["warm_nodes"]
    run.env["cache"] = _jsonable(per)
    run.out.write_env(run.env)
    line = warm_nodes_line(cache)
    if line:
        print(f"hpcio.train: {line}", file=sys.stderr, flush=True)


def _checkpoint(ckpt_dir, model, optimizer, epoch, step, gstep):
    rec = save_checkpoint(ckpt_dir, model, optimizer, epoch, step)
    rec["global_step"] = gstep
    return rec


def _checkpoints_summary(args, ckpts, gathered):
    """summary.json's ``checkpoints``: the model's (rank 0's torch.save), or the layout's
    per checkpoint (:func:`~hpcio.train.statecheckpoint.summarize_checkpoints`)."""
    if args.checkpoint_workload:
        out = summarize_checkpoints(ckpts, len(gathered))
        waits = [g[5] for g in gathered if g[5] is not None]
        out.update(workload=args.checkpoint_workload, scale=args.checkpoint_scale,
                   final_wait_s=max(waits) if waits else None)
        return out
    return {"count": len(ckpts), "seconds": sum(c["seconds"] for c in ckpts),
            "bytes": sum(c["bytes"] for c in ckpts),
            "mib_per_s_mean": (float(np.mean([c["mib_per_s"] for c in ckpts
                                              if c["mib_per_s"]])) if ckpts else None)}


def _checkpoints_text(c):
    """The console's checkpoint lines."""
    if "per_checkpoint" not in c:
        return (f"\n  checkpoints: {c['count']}, {c['seconds']:.3f} s, "
                f"{c['mib_per_s_mean']:.1f} MiB/s mean")

    def f(v, spec):
        return format(v, spec) if v is not None else "-"
    lines = [f"\n  checkpoints: {c['count']} x {c['size_GiB']:.3f} GiB of {c['workload']} "
             f"(scale {c['scale']:g}), writer {c['writer']}, {c['mode']}: stall per step "
             f"{f(c['stall_s_mean'], '.4f')} s mean, write {f(c['write_s_mean'], '.3f')} s "
             f"mean, {f(c['write_GiB_per_s_mean'], '.3f')} GiB/s mean"
             + (f", last write waited {c['final_wait_s']:.3f} s after the last step"
                if c["mode"] == "async" and c.get("final_wait_s") is not None else "")]
    for r in c["per_checkpoint"]:
        lines.append(f"    {r['name']:<24} stall {f(r['stall_s'], '.4f')} s (copy "
                     f"{r['copy_s']:.4f}, wait {r['wait_s']:.4f})  write "
                     f"{f(r['write_s'], '.3f')} s  {f(r['write_GiB_per_s'], '.3f')} GiB/s  "
                     f"commit {r['commit_s']:.4f} s")
    return "\n".join(lines)


def _cache_words(mode, epochs):
    """The summary title's cache state: ``cache cold``, and where the data stayed in the
    page cache anyway (a cold start that failed on a node, or ``warm``/``asis`` asked for)
    how much of it was there when the run began, so that no figure read from memory passes
    for one read from storage."""
    info = (epochs[0]["cache"] or {}) if epochs else {}
    if mode == "cold":
        stayed = info.get("warm_nodes")
        return (f"cache cold [NOT COLD on {len(stayed)} of {len(info['nodes'])} node(s): "
                f"the data stayed in the page cache]" if stayed else "cache cold")
    resident = info.get("resident")
    if resident is None:
        return f"cache {mode}"
    if resident > WARM_AFTER_COLD:
        return (f"cache {mode} [DATA IN THE PAGE CACHE: {100 * resident:.0f}% at the start, "
                f"reads came from memory]")
    return (f"cache {mode} ({100 * resident:.0f}% of the data in the page cache at the start"
            + ("; later epochs read what earlier ones cached" if len(epochs) > 1 else "")
            + ")")


def barrier_per_step(comm, arrays):
    """The step barrier's own cost, on rank 0 (None elsewhere, and where no step waited
    at one): per step the least straggler wait over ranks (the rank arriving last waits
    only for the barrier itself), the median over steps, each epoch's first left out. A
    collective: every rank calls it, with the steps it logged (the least count taken)."""
    least = least_over_ranks(comm, arrays["straggler_wait"])
    if comm.rank != 0:
        return None
    n = len(least)
    keep = np.asarray(arrays["step"][:n]) > 0
    if not n or not keep.any() or not np.asarray(arrays["straggler_wait"]).any():
        return None
    return float(np.median(least[keep]))


def _write_summary(run, args, world, gathered, cut, stop, steps_per_epoch, t_train,
                   t_total, epochs, exchange, verify, barrier=None, odirect=None):
    per_rank = [g[0] for g in gathered]
    signum = next((g[4] for g in gathered if g[4]), None)
    ckpts = [c for g in gathered for c in g[1]]
    # node-wide disk counters: count one rank per node (local rank 0)
    disk = sum(g[2] for g in gathered if g[3] == 0)
    head = {
        "cut_short": bool(cut),
        "verify": verify,
        "signal": signum,
        "signal_name": signal_name(signum),
        "signalled_ranks": [r for r, g in enumerate(gathered) if g[4]],
        "reader": args.reader, "model": args.model, "ranks": world.size,
        "nodes": world.nodes, "batch": args.batch, "epochs_requested": args.epochs,
        "epochs_run": len(epochs), "steps_per_epoch": steps_per_epoch,
        "train_s": t_train, "total_s": t_total,
        "au_definition": "AU = compute / wall per rank (mean over ranks), as DLIO and "
                         "MLPerf Storage: au_percent leaves each epoch's first step out "
                         "as MLPerf Storage does, au_percent_all_steps counts every step; "
                         "samples/s and MiB/s count every step",
        "exchange": exchange,
        "workload": args.workload,
        "au_threshold_percent": args.au_threshold,
    }
    tail = {
        "cache": epochs[0]["cache"] if epochs else None,
        "disk_read_bytes": disk,
        "reader_odirect": odirect,
        "checkpoints": _checkpoints_summary(args, ckpts, gathered),
    }
    title = (f"hpcio.train: {args.model} on {world.size} rank(s), reader {args.reader}, "
             f"{_cache_words(args.cache, epochs)}, batch {args.batch}, {len(epochs)} of "
             f"{args.epochs} epoch(s) x {steps_per_epoch} steps, verify {verify}"
             + ("  [UNVERIFIED: bytes delivered not checked]" if verify == "off" else "")
             + (f"  [CUT SHORT by {signal_name(signum) or 'signal'}]" if cut else ""))
    summary, text = run_summary(
        head, None if any(r["steps"] == 0 for r in per_rank) else per_rank, title, tail,
        more={"barrier_s_per_step": barrier})
    if args.cache == "cold" and epochs:
        text += f"\n  {describe(epochs[0]['cache'])}"
        warm = warm_nodes_line(epochs[0]["cache"])
        if warm:
            text += f"\n  {warm}"
    text += f"\n  gradient exchange: {exchange['what']}"
    if odirect:  # the coordinated reader's O_DIRECT choice, and why
        text += f"\n  O_DIRECT: {odirect}"
    if ckpts:
        text += _checkpoints_text(summary["checkpoints"])
    if args.trace:
        text += (f"\n  trace: {os.path.abspath(args.trace_dir or run.file(RunDir.TRACE))}"
                 f"/rank-<r>.pfw{'.gz' if args.trace_gzip else ''} (DFTracer's format)")
    text += f"\n  results: {run.path}\n"
    run.write_summary(summary, text)
    print(text, end="", flush=True)
    if cut:  # on stderr, where a sweep reads why a run ended
        print(f"hpcio.train: cut short by {signal_name(signum) or 'a signal'} after "
              f"{len(epochs)} of {args.epochs} epoch(s); what it measured is in {run.path} "
              f"(exit {signal_exit(signum) or 0})", file=sys.stderr, flush=True)
    return signum
