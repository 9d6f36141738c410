"""The command line of ``python -m hpcio.train`` (also the schema of ``--config`` files).

Every option can come from ``--config FILE.yaml`` (keys are option names, with dashes or
underscores) and from ``--workload`` (a DLIO workload config: :mod:`hpcio.workloads`);
the config file overrides the workload, flags given on the command line override both.
Every error is one line.
"""

import argparse
import os

from ..cli import (ArgumentParser, add_plan_arguments, add_reader_arguments, au_percent,
                   fabric, fraction, integer, load_config, parse_key_values, positive,
                   seconds)
from ..cli import reader_options as parse_reader_options
from ..errors import HpcioError
from ..progress import EVERY
from ..readers import READERS, check_options
from ..workloads import ACCELERATORS, WORKLOADS
from ..workloads import load as load_workload
from .computetime import DISTRIBUTIONS
from .exchange import AUTO_VIA, EXCHANGE_MODELS, TRANSPORTS
from .models import MODELS
from .statecheckpoint import check_options as check_checkpoint_options

__all__ = ["build_parser", "parse_args", "reader_options", "MODEL_NAMES", "READER_NAMES"]

MODEL_NAMES = (*MODELS, "emulate")
READER_NAMES = tuple(READERS)


def build_parser():
    """The command line (also the schema of ``--config`` files)."""
    p = ArgumentParser(
        prog="python -m hpcio.train",
        description="Data-parallel training on MPI ranks with per-step stall accounting: "
                    "how long training waits for data, and why.",
        epilog="Results: a run directory with config.yaml, env.json, rank-<r>.npz/json, "
               "summary.json and summary.txt (see hpcio/measure/rundir.py and "
               "hpcio/measure/steps.py for definitions). SIGTERM or Ctrl-C stops every "
               "rank at the same step, writes everything (cut_short) and exits 128 + the "
               "signal (143, 130); 'python -m "
               "hpcio.results summarize RUNDIR' summarises a run that did not finish.")
    p.add_argument("--config", metavar="FILE.yaml",
                   help="options as a YAML mapping (option names as keys); command-line "
                        "flags override it")
    p.add_argument("--workload", metavar="NAME|FILE.yaml",
                   help="run a DLIO workload config: one shipped with hpcio ("
                        f"{', '.join(WORKLOADS)}; MLPerf Storage's training workloads, from "
                        "DLIO's configs/workload) or a DLIO config file; its batch, epochs, "
                        "compute time per step, shuffle and AU threshold become the "
                        "defaults, what hpcio does not model is listed in one line")
    p.add_argument("--accelerator", metavar="NAME",
                   help="with --workload MODEL: its file for this accelerator ("
                        f"{', '.join(ACCELERATORS)}; --workload unet3d --accelerator b200 "
                        "runs unet3d_b200)")
    _add_data(p.add_argument_group("data"))
    _add_model(p.add_argument_group("model"))
    _add_training(p.add_argument_group("training"))
    _add_pipeline(p.add_argument_group("pipeline"))
    _add_tracing(p.add_argument_group("tracing"))
    _add_run(p.add_argument_group("run"))
    return p


def _add_data(g):
    """The dataset and its reader."""
    g.add_argument("--data", metavar="PATH", help="dataset directory (required)")
    g.add_argument("--reader", default="coordinated", choices=READER_NAMES,
                   help="how batches are read: every rank through the format's library "
                        "(naive), collective prefetched MPI-IO (coordinated), all in RAM "
                        "(memory)")
    g.add_argument("--cache", default="cold", choices=("cold", "warm", "asis"),
                   help="page-cache state of the dataset before each epoch: cold evicts "
                        "its files (fdatasync + fadvise DONTNEED, no root needed), so a "
                        "run measures reads, not the page cache, as MLPerf Storage's rules "
                        "intend; warm reads them in first; asis leaves the cache as it is "
                        "(the summary's first line says how much was in it)")
    g.add_argument("--drop-caches", action="store_true", default=False,
                   help="with --cache cold, also drop the node's whole page cache "
                        "(needs root)")
    g.add_argument("--reader-option", action="append", default=[], metavar="KEY=VALUE",
                   help="any other reader option, repeatable (e.g. shared=false for the "
                        "coordinated reader, see hpcio/readers/coordinated.py; hold=pymem "
                        "for the memory reader: one Python bytes per record)")
    add_reader_arguments(g, "the summary says so beside the figures")
    g.add_argument("--collective", dest="collective", action="store_true", default=None,
                   help="collective MPI-IO reads (coordinated reader)")
    g.add_argument("--independent", dest="collective", action="store_false", default=None,
                   help="independent MPI-IO reads (coordinated reader)")


def _add_model(g):
    """The network, or the emulated step and its gradient exchange."""
    g.add_argument("--model", default="lenet", choices=MODEL_NAMES,
                   help="network to train; 'emulate' sleeps --compute-time per step")
    g.add_argument("--compute-time", type=seconds, default=0.01, metavar="S",
                   help="emulate: mean compute time per step (seconds)")
    g.add_argument("--compute-dist", default="fixed",
                   choices=tuple(DISTRIBUTIONS),
                   help="emulate: distribution of the compute time")
    g.add_argument("--compute-std", type=seconds, default=0.0, metavar="S",
                   help="emulate: standard deviation of the compute time")
    g.add_argument("--exchange-model", default=None, choices=EXCHANGE_MODELS,
                   help="emulate: after the step's barrier, allreduce this model's "
                        "gradients (float32 x its parameters) every step; 'none': no "
                        "barrier either, ranks step independently. Default: no gradients, "
                        "the barrier only (DLIO's step: its compute time already holds "
                        "the real step's overlapped allreduce)")
    g.add_argument("--exchange-bytes", type=integer(0), default=None, metavar="N",
                   help="emulate: allreduce N bytes every step instead (0: the barrier "
                        "only)")
    g.add_argument("--exchange-fabric", type=fabric, default=None,
                   metavar="BANDWIDTH[,LATENCY]",
                   help="emulate, with --exchange-model or --exchange-bytes: the "
                        "allreduce is a sleep for its time on this fabric, a ring's "
                        "2(P-1)/P x bytes / bandwidth + 2(P-1) x latency, after the "
                        "barrier (e.g. 25GB/s,2us or 100Gbit/s; B bytes, b bits, k M G "
                        "powers of 1000, Ki Mi Gi of 1024; plain numbers: bytes/s and "
                        "seconds). Without it a size is allreduced for real over "
                        "--exchange-via and measured: the option asks for an allreduce and "
                        "gets one, as it always did, on the job's own network (on one node: "
                        "loopback through memory, as the summary says)")
    g.add_argument("--exchange-via", default=AUTO_VIA, choices=(AUTO_VIA, *TRANSPORTS),
                   help="emulate: the transport of the step's barrier and of a measured "
                        "allreduce: tcp (a dissemination barrier on plain sockets, no "
                        "torch; barrier only), torch.distributed gloo, both without MPI's "
                        "lock (MPI-IO readers cannot delay them), or MPI; auto (default): "
                        "tcp when no bytes move, gloo for a measured allreduce")
    g.add_argument("--au-threshold", type=au_percent, default=None, metavar="PERCENT",
                   help="the AU in percent (90 for 90%%) the run must keep to pass, as "
                        "MLPerf Storage judges a run: the summary says pass or fail "
                        "(default: the workload's, else no pass line)")
    g.add_argument("--lr", type=positive, default=0.01, help="SGD learning rate")
    g.add_argument("--momentum", type=fraction, default=0.9, metavar="M",
                   help="SGD momentum, 0 to 1")


def _add_training(g):
    """The sample plan, epochs and checkpoints."""
    add_plan_arguments(g, "global", seed_help="seeds the sample order, augmentation and "
                                              "compute-time draws")
    g.add_argument("--epochs", type=integer(1), default=1, help="passes over the data")
    g.add_argument("--steps", type=integer(1), default=None, metavar="N",
                   help="at most N steps per epoch (default: the whole epoch)")
    g.add_argument("--drop-last", action=argparse.BooleanOptionalAction, default=True,
                   help="drop the records that do not fill a last full step")
    g.add_argument("--checkpoint-every", type=integer(0), default=0, metavar="N",
                   help="rank 0 writes model + optimiser state every N steps (0: never)")
    g.add_argument("--checkpoint-dir", metavar="DIR", default=None,
                   help="where checkpoints go (default: RUNDIR/checkpoints); one holding "
                        "another run's checkpoint is refused")
    g.add_argument("--force", action="store_true",
                   help="replace the checkpoint another run left in --checkpoint-dir")
    g.add_argument("--checkpoint-workload", metavar="MODEL", default=None,
                   help="checkpoint an MLPerf Storage llama3 layout's per-rank state instead "
                        "of the model's (llama3_8b, llama3_70b, llama3_405b, llama3_1t, or "
                        "a DLIO .yaml): every rank writes its shard through "
                        "--checkpoint-writer (see docs/checkpoints.md)")
    g.add_argument("--checkpoint-scale", type=float, default=None, metavar="F",
                   help="with --checkpoint-workload: every tensor's elements times F "
                        "(default 0.001: llama3_8b 105 MiB per checkpoint)")
    g.add_argument("--checkpoint-writer", default=None, metavar="NAME",
                   help="with --checkpoint-workload: coordinated (default), dcp or "
                        "torch_save (hpcio.checkpoint's writers)")
    g.add_argument("--checkpoint-mode", default=None, metavar="MODE",
                   help="with --checkpoint-workload: sync (default: the step waits for the "
                        "write, fsync included) or async (the step copies the state to a "
                        "host buffer; a thread writes it while training goes on)")


def _add_pipeline(g):
    """Preprocessing between the reader and the step."""
    g.add_argument("--threads", type=integer(1), default=2, help="preprocessing threads")
    g.add_argument("--prefetch", type=integer(0), default=2,
                   help="batches the pipeline prepares ahead of training")
    g.add_argument("--offline", action="store_true", default=False,
                   help="data are pre-decoded (raw, model-sized): skip decode/resize/augment")
    g.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True,
                   help="random brightness + clip")
    g.add_argument("--preprocess", default="auto", choices=("auto", "on", "off"),
                   help="run the preprocessing pipeline; 'off' hands the step the batch's "
                        "bytes as read, as DLIO and MLPerf Storage do (only for emulate); "
                        "auto: off for emulate, on for real models")


def _add_tracing(g):
    """Darshan and DFTracer traces of the run."""
    g.add_argument("--darshan", metavar="LIB", default=None,
                   help="trace the run with this Darshan runtime (libdarshan.so, built "
                        "against mpi4py's MPI: scripts/darshan-local.sh build): every rank "
                        "re-executes itself with it preloaded, with per-rank records and "
                        "the project's config; the log goes to RUNDIR/darshan/")
    g.add_argument("--darshan-dxt", action=argparse.BooleanOptionalAction, default=False,
                   help="with --darshan, also trace every read and write (DXT)")
    g.add_argument("--trace", action="store_true", default=False,
                   help="every rank writes its steps (wait, fetch, prep, compute, exchange, "
                        "checkpoint; epochs) as a DFTracer trace, RUNDIR/trace/"
                        "rank-<r>.pfw.gz, for Perfetto, DFAnalyzer and WisIO (see "
                        "hpcio/measure/trace.py)")
    g.add_argument("--trace-dir", metavar="DIR", default=None,
                   help="with --trace, write the traces to DIR instead (a node-local disk)")
    g.add_argument("--trace-gzip", action=argparse.BooleanOptionalAction, default=True,
                   help="with --trace, gzip the traces (.pfw.gz: DFTracer 2's reader "
                        "needs it; Perfetto and DFAnalyzer 1 read both)")


def _add_run(g):
    """Where results go, the device, sampling, flushing and progress."""
    g.add_argument("--out", metavar="RUNDIR", default=None,
                   help="results directory (default: runs/<time>-<reader>-<model>-n<ranks>)")
    g.add_argument("--dist", default="torch", choices=("torch", "horovod", "none"),
                   help="gradient exchange: torch.distributed DDP, Horovod, or none")
    g.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="auto: cuda:<local rank mod GPUs> when there are GPUs, else CPU")
    g.add_argument("--torch-threads", type=integer(0), default=0, metavar="N",
                   help="torch intra-op threads per rank (0: the node's cores / its ranks)")
    g.add_argument("--sample-interval", type=positive, default=0.5, metavar="S",
                   help="seconds between CPU/memory/disk/GPU samples")
    g.add_argument("--flush-interval", type=positive, default=10.0, metavar="S",
                   help="every rank rewrites its rank-<r>.npz/json (marked partial) at each "
                        "epoch end and at least every S seconds, on a background thread: "
                        "a crash or a killed rank loses at most that much")
    g.add_argument("--stall-timeout", type=seconds, default=600.0, metavar="S",
                   help="a rank that makes no progress for S seconds (waiting for a batch, "
                        "the stop vote, a collective) names what it waits for and ends the "
                        "job with exit code 3 (0: never)")
    g.add_argument("--progress", default="auto", choices=("auto", "on", "lines", "off"),
                   help="progress on rank 0's stdout: on, a bar; lines, a plain line every "
                        "--progress-interval seconds; auto, a bar on a terminal, else lines "
                        "(under mpiexec or srun stdout is a pipe)")
    g.add_argument("--progress-interval", type=seconds, default=EVERY, metavar="S",
                   help="seconds between progress lines")


def _apply_config(parser, path, cfg=None):
    """Make the config file's values (or ``cfg``, read from ``path``) the parser's
    defaults, checked like flags."""
    cfg = load_config(path) if cfg is None else cfg
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
    pre.add_argument("--workload")
    pre.add_argument("--accelerator")
    known, _ = pre.parse_known_args(argv)
    if known.accelerator and not known.workload:
        raise HpcioError("--accelerator goes with --workload MODEL", everywhere=True)
    workload = load_workload(known.workload, known.accelerator) if known.workload else None
    if workload:
        _apply_config(parser, f"workload {workload.name}", workload.train_options())
    if known.config:
        _apply_config(parser, known.config)
    args = parser.parse_args(argv)
    args.workload_info = workload
    if known.accelerator:
        args.workload = workload.name  # the file the model and accelerator chose
    if not args.data:
        raise HpcioError("--data PATH is required (a dataset directory; make one with "
                         "'python -m hpcio.datagen')", everywhere=True)
    if args.compute_std > 0 and args.compute_dist == "fixed":
        raise HpcioError("--compute-std needs --compute-dist normal, uniform or lognormal",
                         everywhere=True)
    if args.exchange_model is not None and args.exchange_bytes is not None:
        raise HpcioError("give --exchange-model or --exchange-bytes, not both",
                         everywhere=True)
    if args.model != "emulate" and (args.exchange_model or args.exchange_bytes is not None
                                    or args.exchange_fabric is not None):
        raise HpcioError(f"--exchange-model/--exchange-bytes/--exchange-fabric are for "
                         f"emulate: model {args.model} exchanges its own gradients",
                         everywhere=True)
    if args.exchange_fabric is not None and (args.exchange_bytes is None and
                                             args.exchange_model in (None, "none")):
        raise HpcioError("--exchange-fabric needs an exchange size to time: --exchange-bytes "
                         "N or --exchange-model M" + (" (--exchange-model none exchanges "
                         "nothing)" if args.exchange_model == "none" else ""),
                         everywhere=True)
    check_checkpoint_options(args)
    if args.trace_dir is not None and not args.trace:
        raise HpcioError("--trace-dir needs --trace", everywhere=True)
    if args.trace_dir is not None and os.path.lexists(args.trace_dir) and \
            not os.path.isdir(args.trace_dir):
        raise HpcioError(f"--trace-dir {args.trace_dir}: exists and is not a directory",
                         everywhere=True)
    if args.preprocess == "auto":
        args.preprocess = "off" if args.model == "emulate" else "on"
    if args.preprocess == "off" and args.model != "emulate":
        raise HpcioError(f"--preprocess off: model {args.model} needs tensors; only "
                         "emulate runs on the bytes as read", everywhere=True)
    args.hints = parse_key_values(args.hint, "--hint")
    reader_options(args)  # a bad reader option fails here, before any work
    return args


def reader_options(args):
    """The reader's options from ``--reader-option``, ``--hint`` and the prefetch and
    collective flags, checked and converted to their types (:func:`check_options`)."""
    opts = parse_reader_options(args.reader, args.reader_option)
    if args.hints:
        opts["hints"] = {**opts.get("hints", {}), **args.hints}
    if args.reader_prefetch is not None:
        opts["prefetch"] = args.reader_prefetch
    if args.collective is not None:
        opts["collective"] = args.collective
    opts.setdefault("verify", args.verify)
    return check_options(args.reader, opts)
