"""``python -m hpcio.checkpoint``: its command line (imports nothing heavy: ``--help`` and
``hpcio --help`` must not start MPI or torch)."""

import os
import time

from ..cli import ArgumentParser, ExamplesFormatter, integer, number

__all__ = ["build_parser", "WRITER_NAMES", "PHASES"]

WRITER_NAMES = ("coordinated", "dcp", "torch_save")  # hpcio.checkpoint.writers.WRITERS
PHASES = ("both", "write", "read")

EXAMPLES = """\
examples:
  python -m hpcio.checkpoint sizes
  mpiexec -n 4 python -m hpcio.checkpoint run --model llama3_8b --scale 0.01 \\
      --writer coordinated --dir /scratch/me/ckpt --out runs/ckpt-coord-n4
  mpiexec -n 4 python -m hpcio.checkpoint run --model llama3_8b --scale 0.01 \\
      --writer dcp --dir /scratch/me/ckpt-dcp --checkpoints 10
  # restore only, by other ranks than wrote each shard (one node's worth shifted):
  mpiexec -n 8 python -m hpcio.checkpoint run --phase read --rank-shift ... --dir /scratch/me/ckpt
"""


def build_parser():
    p = ArgumentParser(
        prog="python -m hpcio.checkpoint", formatter_class=ExamplesFormatter,
        description="MLPerf Storage's llama3 checkpoint workloads (DLIO's layout: TP x PP x "
                    "DP, ZeRO, fp16 model, fp32 optimizer), written and restored naively "
                    "(torch.distributed.checkpoint, torch.save per rank) or coordinated "
                    "(shared files, MPI-IO at offsets of one layout); write and read GiB/s "
                    "per checkpoint, and their mean as MLPerf Storage publishes it.",
        epilog=EXAMPLES)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser("sizes", help="the shipped layouts: parameters, ranks, files, bytes "
                                     "per checkpoint (no MPI)")
    s.add_argument("--model", action="append", help="a shipped model or a DLIO config file "
                   "(repeatable; default: all shipped)")
    s.add_argument("--ranks", type=integer(1), help="world size (default: MLPerf's, "
                   "8 / 64 / 512 / 1024 for 8b / 70b / 405b / 1t)")
    s.add_argument("--scale", type=number(0, 1, above=True), default=1.0,
                   help="tensor-size factor (see run --scale)")

    r = sub.add_parser("run", help="write N checkpoints, clear caches, read them back "
                                   "(under mpiexec/srun)", formatter_class=ExamplesFormatter,
                       epilog=EXAMPLES)
    r.add_argument("--model", default="llama3_8b",
                   help="llama3_8b, llama3_70b, llama3_405b, llama3_1t (mlcommons/storage "
                        "v3.0's configs), or a DLIO transformer config file")
    r.add_argument("--scale", type=number(0, 1, above=True), default=1.0,
                   help="multiplies every tensor's element count: same ranks, files and "
                        "tensors as DLIO's layout, smaller (0.01: llama3_8b is 1.05 GiB)")
    r.add_argument("--writer", default="coordinated", choices=WRITER_NAMES,
                   help="coordinated: shared files, MPI-IO; dcp: torch.distributed."
                        "checkpoint, file per rank; torch_save: DLIO's pt_save")
    r.add_argument("--dir", required=True,
                   help="checkpoint directory: global_epoch1_step<k>/ per checkpoint")
    r.add_argument("--out", help="run directory for the results (default "
                                 "runs/<time>-ckpt-<writer>-<model>-n<ranks>)")
    r.add_argument("--phase", default="both", choices=PHASES,
                   help="write then read (MLPerf's sequence), or only one: read restores "
                        "the complete checkpoints found in --dir")
    r.add_argument("--checkpoints", type=integer(1, 10000), default=10,
                   help="checkpoints written (and read); MLPerf Storage: 10")
    r.add_argument("--force", action="store_true",
                   help="write over the checkpoints already in --dir")
    r.add_argument("--rank-shift", action="store_true",
                   help="restore: rank r reads the shard of rank r + ranks-per-node, so no "
                        "rank reads what its node wrote (DLIO's checkpoint_recovery_rank_"
                        "shift; no shift on one node)")
    r.add_argument("--cache", default="cold", choices=("cold", "asis"),
                   help="before the reads: cold = fdatasync + POSIX_FADV_DONTNEED of every "
                        "file of the checkpoints (and drop_caches with --drop-caches)")
    r.add_argument("--drop-caches", action="store_true",
                   help="also echo 1 > /proc/sys/vm/drop_caches (root only; said if refused)")
    r.add_argument("--seed", type=integer(0), default=0, help="seeds the tensors' bytes")
    r.add_argument("--darshan", metavar="LIB", default=None,
                   help="trace the run with this Darshan runtime (libdarshan.so, built "
                        "against mpi4py's MPI: scripts/darshan-local.sh build): every rank "
                        "re-executes itself with it preloaded and the project's config; the "
                        "log goes to OUT/darshan/, where hpcio.analyze finds it")
    r.add_argument("--darshan-dxt", action="store_true",
                   help="with --darshan, also trace every read and write (DXT)")
    c = r.add_argument_group("coordinated writer")
    c.add_argument("--mpiio", default="collective", choices=("collective", "independent"),
                   help="MPI_File_write_at_all / read_at_all, or the independent calls")
    c.add_argument("--files", type=integer(1), default=1,
                   help="shared files per checkpoint (ranks in blocks of consecutive ranks)")
    c.add_argument("--align", type=integer(1), default=None,
                   help="each rank's region starts at a multiple of this (bytes; default: "
                        "--hint striping_unit if given, else st_blksize of --dir: Lustre's "
                        "stripe size, GPFS's block size)")
    c.add_argument("--hint", action="append", default=[], metavar="KEY=VALUE",
                   help="ROMIO hint for the shared files (repeatable): romio_cb_write, "
                        "cb_nodes, cb_config_list, cb_buffer_size, striping_unit, ...")
    c.add_argument("--round-mib", type=integer(1, 1024), default=256,
                   help="MiB per rank per MPI-IO call")
    return p


def default_out(writer, model, ranks):
    return os.path.join("runs", f"{time.strftime('%Y%m%d-%H%M%S')}-ckpt-{writer}-"
                                f"{os.path.splitext(os.path.basename(model))[0]}-n{ranks}")
