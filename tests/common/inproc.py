"""A command run in the test's own process: ``python -m hpcio.X ARGS`` exactly as ``-m``
runs it (:func:`runpy.run_module` as ``__main__``, ``sys.argv`` set), with
:func:`hpcio.errors.guard` swapped for one that returns instead of ending the process.

For checks about an option, a ``--help`` or one line of error text, which need no ranks:
the same ``CompletedProcess`` a launch gives (return code, stdout, stderr), in
milliseconds instead of seconds. An :class:`~hpcio.errors.HpcioError` is printed as the
guard prints it for one rank (``<prog>: error: <what>``, exit 2) and ``SystemExit`` keeps
its code; any other exception is the test's failure, with its traceback. Launched tests
keep the guard itself (aborts, ranks, banners, traceback files) covered.
"""

import contextlib
import io
import os
import runpy
import signal
import subprocess
import sys
import warnings

from hpcio import errors

__all__ = ["run_main"]


def _guard(main, prog="hpcio"):
    """:func:`hpcio.errors.guard` for one rank that does not exit the process."""
    saved, errors._prog = errors._prog, prog
    try:
        return main()
    except errors.HpcioError as e:
        print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        errors._prog = saved


@contextlib.contextmanager
def _inside(argv, env, cwd):
    """``sys.argv``, ``env`` (added to os.environ), ``cwd`` and the guard in place, all
    undone after, the signal handlers a command installs too."""
    saved = dict(os.environ), os.getcwd(), sys.argv, errors.guard
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    os.environ.update({k: str(v) for k, v in (env or {}).items()})
    if cwd is not None:
        os.chdir(cwd)
    sys.argv, errors.guard = argv, _guard
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved[0])
        os.chdir(saved[1])
        sys.argv, errors.guard = saved[2], saved[3]
        for s, h in handlers.items():
            signal.signal(s, h)


def run_main(args, env=None, cwd=None):
    """``["-m", "hpcio.train", *argv]`` (as :func:`common.mpi.run_py` takes it; ``-m``
    may be left out) run in-process; returns a ``CompletedProcess``."""
    args = [str(a) for a in args]
    module, argv = (args[1], args[2:]) if args[0] == "-m" else (args[0], args[1:])
    out, err = io.StringIO(), io.StringIO()
    with _inside([module, *argv], env, cwd), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            with warnings.catch_warnings():  # the module ran already in this process
                warnings.filterwarnings("ignore", "'hpcio.* found in sys.modules",
                                        RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return subprocess.CompletedProcess(["python", "-m", module, *argv], code, out.getvalue(),
                                       err.getvalue())
