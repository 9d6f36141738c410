"""A command run in the test's own process: ``python -m hpcio.X ARGS`` as ``main(ARGS)``.

For checks about an option, a ``--help`` or one line of error text, which need no ranks:
the same ``CompletedProcess`` a launch gives (return code, stdout, stderr), in
milliseconds instead of seconds. The one line is printed as :func:`hpcio.errors.guard`
prints it for one rank (``<prog>: error: <what>``, exit 2; ``SystemExit`` keeps its code);
any other exception is the test's failure, with its traceback. Launched tests keep the
guard's own behaviour (abort, ranks, banners) covered.
"""

import contextlib
import importlib
import io
import os
import signal
import subprocess

from hpcio import errors
from hpcio.cli import COMMANDS

__all__ = ["run_main", "main_of"]

#: ``python -m`` module -> where its ``main(argv)`` lives (a package's ``__main__`` runs
#: its command at import, so the function is taken from the module it calls)
MAINS = {"hpcio.train": "hpcio.train.trainer", "hpcio.datagen": "hpcio.datagen.command"}


def main_of(module):
    """The ``main(argv)`` of command module ``module`` (``hpcio.bench``)."""
    return importlib.import_module(MAINS.get(module, module)).main


@contextlib.contextmanager
def _inside(env, cwd):
    """``env`` added to os.environ and ``cwd`` entered, both undone after; the signal
    handlers a command installs are put back too."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    if cwd is not None:
        os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        for s, h in handlers.items():
            signal.signal(s, h)


def run_main(args, env=None, cwd=None):
    """``["-m", "hpcio.train", *argv]`` (as :func:`common.mpi.run_py` takes it, or the
    module name alone first) run in-process; returns a ``CompletedProcess``."""
    args = [str(a) for a in args]
    if args[0] == "-m":
        args = args[1:]
    module, argv = args[0], args[1:]
    if module == "hpcio":  # ``python -m hpcio COMMAND``: the table's module
        module, argv = COMMANDS[argv[0]][0], argv[1:]
    prog = module
    out, err = io.StringIO(), io.StringIO()
    saved_prog = errors.program()
    with _inside(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        errors._prog = prog
        try:
            code = main_of(module)(argv) or 0
        except errors.HpcioError as e:
            print(f"{prog}: error: {e}", file=err)
            code = 2
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            errors._prog = saved_prog
    return subprocess.CompletedProcess(["python", "-m", module, *argv], code, out.getvalue(),
                                       err.getvalue())
