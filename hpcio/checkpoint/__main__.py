"""``python -m hpcio.checkpoint``: see :mod:`hpcio.checkpoint.run` and
:mod:`hpcio.checkpoint.layout`."""

import signal
import sys

from ..errors import guard, interrupt_on
from ..measure import darshan
from .command import build_parser
from .layout import GIB, MODELS, Layout, Model, load_model
from .run import run


def sizes(args):
    """The ``sizes`` subcommand: no MPI, no torch."""
    default = {"llama3_8b": 8, "llama3_70b": 64, "llama3_405b": 512, "llama3_1t": 1024}
    models = [load_model(n) for n in args.model or MODELS]
    rows = []
    for model in sorted(models, key=Model.num_parameters) if not args.model else models:
        ranks = args.ranks or default.get(model.name, model.mp)
        lay = Layout(model, ranks, args.scale)
        text = lay.describe().split(": ", 1)[1].rsplit(",", 1)[0]
        rows.append(f"{model.name:<12} {text:<36} {model.num_parameters():>17,} "
                    f"{len(lay.files(0)):>11} {lay.total_bytes / GIB:>15.3f} "
                    f"{max(lay.rank_bytes(r) for r in range(ranks)) / GIB:>15.3f}")
    print(f"{'model':<12} {'layout':<36} {'parameters':>17} {'files/rank0':>11} "
          f"{'GiB/checkpoint':>15} {'GiB/rank (max)':>15}")
    print("\n".join(rows))
    return 0


def _trace(args):
    """``--darshan``: re-execute this rank with the runtime preloaded, before MPI starts,
    with room in its record table for every file a rank may open (its files, the
    DCP metadata and the manifest, per checkpoint)."""
    per_ckpt = load_model(args.model).num_layers + 4   # a rank's files at most, +3
    darshan.reexec_traced(args.darshan, darshan.shared_config(per_ckpt * args.checkpoints),
                          dxt=args.darshan_dxt)


def _main():
    args = build_parser().parse_args()
    if args.command == "sizes":
        return sizes(args)
    if args.darshan:
        _trace(args)
    return run(args)


interrupt_on((signal.SIGTERM, signal.SIGINT))
sys.exit(guard(_main, prog="hpcio.checkpoint"))
