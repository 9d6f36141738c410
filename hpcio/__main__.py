"""``hpcio COMMAND [ARGS...]`` (or ``python -m hpcio COMMAND``): every command behind one name.

Each command is also ``python -m MODULE`` as before (``python -m hpcio.train``); this runs
that module as ``__main__``, exactly as ``-m`` does, and imports nothing else: a command's
modules (torch for ``train``) load only when it runs. The table is
:data:`hpcio.cli.COMMANDS`.
"""

import runpy
import sys
import textwrap

from .cli import COMMANDS, rank0

__all__ = ["main", "usage"]


def usage():
    """``hpcio --help``: the commands, one line each."""
    w = max(map(len, COMMANDS))
    lines = ["usage: hpcio COMMAND [ARGS...]   (or: python -m hpcio COMMAND [ARGS...])", "",
             "MPI-parallel I/O benchmark for deep-learning training.", "", "commands:"]
    lines += [f"  {name:<{w}}  {line}" for name, (_, _, line) in COMMANDS.items()]
    lines += [""] + textwrap.wrap(
        "hpcio COMMAND --help (or hpcio help COMMAND): the command's options. Each command is "
        "also python -m MODULE: " + ", ".join(m for m, _, _ in COMMANDS.values()) + ".", 88)
    return "\n".join(lines) + "\n"


def _say(text, file):
    if rank0():  # under mpiexec: once, not once per rank
        file.write(text)
        file.flush()


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        _say(usage(), sys.stderr)
        return 2
    if argv[0] in ("-h", "--help") or argv == ["help"]:
        _say(usage(), sys.stdout)
        return 0
    if argv[0] == "help":
        argv = [argv[1], "--help"]
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _say(f"hpcio: unknown command {name!r} (choose from {', '.join(COMMANDS)}; "
             f"hpcio --help says what each does)\n", sys.stderr)
        return 2
    # argv as ``python -m MODULE ARGS`` gives it (runpy sets argv[0] to the module's file)
    sys.argv = [sys.argv[0]] + rest
    runpy.run_module(COMMANDS[name][0], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
