"""The suite's tiers, set from the tests themselves rather than by hand.

* ``mpi``: a test that starts a process. Found in its source: the test, the helpers it
  calls and the fixtures it uses reach :func:`common.launch.launch` or ``spawn``
  (followed through names bound in ``tests/``, not into hpcio). A process started some
  other way, by a test outside the tier, fails that test (:func:`guard_launches`), so
  ``-m 'not mpi'`` launches nothing.
* ``slow``: a test whose last measured duration (``tests/durations.json``, written by
  ``pytest --record-durations``) passed :data:`SLOW_S`; the summary names a test that
  outgrew its tier since.
"""

import ast
import inspect
import json
import os
import subprocess
import textwrap
import types

from . import launch

__all__ = ["SLOW_S", "DURATIONS", "launches", "exempt", "load_durations", "save_durations",
           "guard_launches"]

#: a test measured above this many seconds (setup, call and teardown) is ``slow``
SLOW_S = 20.0
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DURATIONS = os.path.join(TESTS, "durations.json")
LAUNCHERS = (launch.launch, launch.spawn)
#: what the standard library runs on its own to answer a question (platform.processor,
#: ctypes.util.find_library): milliseconds, and not the test's doing
STDLIB_PROBES = {"uname", "ldconfig"}
#: hpcio's fault watcher (hpcio.mapfault), started by every naive reader that maps shards:
#: a stdlib-only interpreter, tens of milliseconds, part of the reader under test
WATCHER = "from hpcio.mapfault import main"


def exempt(argv):
    """True for the few processes a test in any tier may start without knowing it."""
    exe = os.path.basename(str(argv[0]).split()[0]) if argv else ""
    return exe in STDLIB_PROBES or any(WATCHER in str(a) for a in argv)


def _ours(obj):
    """True for a function, class or module written in ``tests/``."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return False
    return bool(path) and os.path.abspath(path).startswith(TESTS + os.sep)


def _names(fn):
    """(bare names, dotted ``a.b`` pairs) a function's source uses."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return set(), set()
    names, dotted = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            dotted.add((node.value.id, node.attr))
    return names, dotted


def _members(obj):
    """What a class of ours runs: its methods and properties."""
    for v in vars(obj).values():
        v = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
        if inspect.isfunction(v):
            yield v


def launches(obj, _seen=None):
    """True if ``obj`` (a test, fixture, helper or class of ``tests/``) reaches a launcher."""
    seen = set() if _seen is None else _seen
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if any(obj is f for f in LAUNCHERS):  # identity: a global may be an array
        return True
    if id(obj) in seen or not _ours(obj):
        return False
    seen.add(id(obj))
    if inspect.isclass(obj):
        return any(launches(m, seen) for m in _members(obj))
    if not inspect.isfunction(obj):
        return False
    scope = dict(obj.__globals__)
    for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
        if _full(cell):  # a name bound later in its enclosing function has no value yet
            scope[name] = cell.cell_contents
    names, dotted = _names(obj)
    found = [scope[n] for n in names if n in scope]
    found += [getattr(scope[m], a, None) for m, a in dotted
              if isinstance(scope.get(m), types.ModuleType) and _ours(scope[m])]
    return any(launches(v, seen) for v in found if v is not None)


def _full(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def load_durations(path=DURATIONS):
    """{test id: seconds} as last recorded."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def save_durations(measured, collected=(), path=DURATIONS):
    """Merge ``measured`` ({test id: seconds}) into the record (atomically); a recorded
    test of a file this run ``collected`` (test ids) that it no longer has is dropped."""
    ids = set(collected)
    files = {k.split("::")[0] for k in ids}
    record = {k: v for k, v in load_durations(path).items()
              if k in ids or k.split("::")[0] not in files}
    record.update({k: round(v, 2) for k, v in measured.items()})
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(dict(sorted(record.items())), f, indent=0)
        f.write("\n")
    os.replace(tmp, path)


class guard_launches:
    """While active, a process started by a test outside the ``mpi`` tier fails it
    (``allowed()`` says whether the running test may launch)."""

    def __init__(self, allowed, fail):
        self.allowed, self.fail = allowed, fail
        self.original = subprocess.Popen._execute_child

    def __enter__(self):
        guard, original = self, self.original

        def execute_child(popen, args, *rest, **kw):
            argv = [args] if isinstance(args, (str, bytes)) else list(args)
            if not exempt(argv) and not guard.allowed():
                what = " ".join(map(str, argv[:3]))
                guard.fail(f"this test starts a process ({what} ...) but is not in the mpi "
                           "tier: start it with common.launch (launch, spawn) or mark the "
                           "test @pytest.mark.mpi")
            return original(popen, args, *rest, **kw)
        subprocess.Popen._execute_child = execute_child
        return self

    def __exit__(self, *exc):
        subprocess.Popen._execute_child = self.original
