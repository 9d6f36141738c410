"""The house's layering (docs/layout.md, "Where things live"): a package imports only from the
layers below it, and no module imports another's private name. Read from the source (every
import, lazy ones inside functions too), so a new import against the layering fails here;
so does an import inside a function that DEFERRED does not list, and a function longer
than MAX_LINES."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

#: lowest first; a unit (``hpcio/<unit>.py`` or ``hpcio/<unit>/``) imports its own modules
#: and those of lower layers only
LAYERS = [
    {"hpcio", "errors"},
    {"fsutil", "mpiutil", "mpicompat", "mapfault", "plan", "progress"},
    {"cache", "data", "measure", "workloads"},
    {"formats", "explain", "world"},
    {"readers"},
    {"cli", "outputs"},
    {"checkpoint"},
    {"train"},
    {"datagen", "simulate", "bench", "sweep", "demo", "analyze", "results"},
    {"__main__"},
]
LAYER = {unit: k for k, units in enumerate(LAYERS) for unit in units}


def _module(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts), path.name == "__init__.py"


def _imports(path):
    """(line, imported module, names) of every import in ``path``, relative ones resolved."""
    name, is_pkg = _module(path)
    package = name if is_pkg else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target, [a.name for a in node.names]


def _unit(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _sources(*tops):
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


def test_every_unit_has_a_layer():
    units = {_unit(_module(p)[0]) for p in _sources("hpcio")}
    assert units <= set(LAYER), f"add to LAYERS: {sorted(units - set(LAYER))}"


def test_imports_go_down_the_layers():
    wrong = []
    for path in _sources("hpcio"):
        me = _unit(_module(path)[0])
        for line, target, names in _imports(path):
            if not target.startswith("hpcio"):
                continue
            # ``from hpcio import x`` names a unit, not the package root
            units = [_unit(f"hpcio.{n}") for n in names] if target == "hpcio" else [
                _unit(target)]
            for unit in units:
                if unit not in LAYER:  # a name of the package root (__version__)
                    unit = "hpcio"
                if unit != me and LAYER[unit] >= LAYER[me]:
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {me} (layer {LAYER[me]}) "
                                 f"imports {target} ({unit}, layer {LAYER[unit]})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("top", ["hpcio", "benchmarks", "analysis"])
def test_no_private_name_across_modules(top):
    wrong = []
    for path in _sources(top):
        me = _module(path)[0]
        for line, target, names in _imports(path):
            if not target.startswith("hpcio") or target == me:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    wrong.append(f"{path.relative_to(ROOT)}:{line}: {target}.{n}")
    assert not wrong, "\n".join(wrong)


# ---- imports inside functions: only where a heavy library is the reason -------------------
#: module -> what it imports inside a function body, and only these: mpi4py (importing it
#: starts MPI), torch (seconds), h5py (HDF5's library), and the optional extras (pyarrow,
#: matplotlib behind explain.report, PyDarshan, pynvml, horovod, SimGrid); the command
#: line's shared groups (cli.py) leave the readers' numpy out of ``hpcio --help``,
#: measure.darshan, which
#: train asks before MPI_Init, leaves numpy out of that small heap, and train's __main__
#: imports under its guard. Each one says why in a comment on its line or above it.
DEFERRED = {
    "hpcio/analyze.py": {"hpcio.explain.report"},
    "hpcio/bench.py": {"mpi4py"},
    "hpcio/simulate/bench.py": {"mpi4py"},
    "hpcio/cli.py": {"hpcio.readers", "hpcio.plan"},
    "hpcio/datagen/command.py": {"mpi4py"},
    "hpcio/datagen/write.py": {"mpi4py"},
    "hpcio/datagen/dlio.py": {"pyarrow", "pyarrow.parquet"},
    "hpcio/errors.py": {"mpi4py"},
    # torch: seconds, loaded by a run's writers (the sizes subcommand and --help need none)
    "hpcio/checkpoint/state.py": {"torch"},
    "hpcio/checkpoint/writers.py": {"mpi4py", "torch", "torch.distributed",
                                    "torch.distributed.checkpoint"},
    "hpcio/formats/hdf5.py": {"h5py"},
    "hpcio/formats/parquet.py": {"pyarrow", "pyarrow.parquet"},
    "hpcio/measure/clock.py": {"mpi4py"},
    "hpcio/measure/darshan.py": {"hpcio.measure.rundir", "hpcio.measure.darshanlog"},
    "hpcio/measure/darshanlog.py": {"darshan.backend"},
    "hpcio/measure/rundir.py": {"mpi4py"},
    "hpcio/measure/sampler.py": {"pynvml", "torch"},
    "hpcio/mpicompat.py": {"mpi4py"},
    "hpcio/mpiutil.py": {"mpi4py"},
    "hpcio/readers/coordinated.py": {"mpi4py"},
    "hpcio/readers/h5mpio.py": {"h5py", "mpi4py"},
    "hpcio/readers/hints.py": {"mpi4py"},
    "hpcio/readers/nodeshare.py": {"mpi4py"},
    "hpcio/readers/routes.py": {"mpi4py"},
    "hpcio/simulate/engine.py": {"simgrid"},
    "hpcio/simulate/checkpoint.py": {"simgrid"},
    # what the command imports, under its guard and signal handlers (a Ctrl-C during the
    # imports is one line, exit 130)
    "hpcio/train/__main__.py": {"hpcio.train.trainer", "hpcio.measure.darshan",
                                "hpcio.measure.clock"},
    "hpcio/train/checkpoint.py": {"torch"},
    # an emulated run that asks for no torch feature never imports it (seconds, ~200 MB)
    "hpcio/train/emulate.py": {"torch"},
    "hpcio/train/dist.py": {"torch", "torch.distributed", "torch.nn.parallel",
                            "torch.distributed.algorithms.ddp_comm_hooks.default_hooks",
                            "horovod.torch"},
    "hpcio/train/exchange.py": {"mpi4py", "torch", "torch.distributed"},
    "hpcio/train/stop.py": {"mpi4py"},
    "hpcio/workloads/__init__.py": {"numpy"},
    "hpcio/train/trainer.py": {"torch", "hpcio.train.pipeline"},
    # torch: loaded by the checkpoint writers already (DCP's own group, in async mode)
    "hpcio/train/statecheckpoint.py": {"torch.distributed"},
    "hpcio/world.py": {"mpi4py", "torch.distributed"},
}


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _deferred(path):
    """{line: [imported modules]} of every import inside a function body of ``path``."""
    inside = {node.lineno for fn in ast.walk(ast.parse(path.read_text(), str(path)))
              if isinstance(fn, FUNCTIONS) for node in ast.walk(fn)
              if isinstance(node, (ast.Import, ast.ImportFrom))}
    out = {}
    for line, target, _ in _imports(path):
        if line in inside:
            out.setdefault(line, []).append(target)
    return out


def test_imports_inside_functions_are_the_listed_ones():
    got = {}
    for path in _sources("hpcio"):
        rel = str(path.relative_to(ROOT))
        for line, targets in _deferred(path).items():
            got.setdefault(rel, {}).update({t: line for t in targets})
    new = [f"{rel}:{line}: imports {target} inside a function: import it at the top of the "
           f"module, or (a heavy library) add it to DEFERRED with its reason in a comment"
           for rel, targets in sorted(got.items()) for target, line in sorted(targets.items())
           if target not in DEFERRED.get(rel, set())]
    gone = [f"{rel}: {target} is no longer imported inside a function: remove it from "
            f"DEFERRED" for rel, targets in sorted(DEFERRED.items())
            for target in sorted(targets) if target not in got.get(rel, {})]
    assert not new + gone, "\n".join(new + gone)


def test_every_deferred_import_says_why():
    """A comment on the import's line, or on the line before its run of imports."""
    silent = []
    for path in _sources("hpcio"):
        rel = str(path.relative_to(ROOT))
        text = path.read_text().splitlines()
        for line, targets in sorted(_deferred(path).items()):
            k = line - 1
            while "#" not in text[k] and text[k].lstrip().startswith(("import ", "from ")):
                k -= 1
            if "#" not in text[k]:
                silent.append(f"{rel}:{line}: imports {', '.join(targets)} inside a function "
                              f"without a comment saying why")
    assert not silent, "\n".join(silent)


# ---- no function over MAX_LINES lines ------------------------------------------------------
MAX_LINES = 100
#: "path:function" -> its length, for modules being rewritten elsewhere (none now)
LONG = {}


def _functions():
    for path in _sources("hpcio"):
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, FUNCTIONS):
                yield rel, node


def test_no_function_over_max_lines():
    long = {f"{rel}:{fn.name}": fn.end_lineno - fn.lineno + 1 for rel, fn in _functions()
            if fn.end_lineno - fn.lineno + 1 > MAX_LINES}
    new = [f"{name}: {n} lines (at most {MAX_LINES}): split it" for name, n in
           sorted(long.items()) if name not in LONG]
    stale = [f"{name}: no longer over {MAX_LINES} lines: remove it from LONG"
             for name in sorted(LONG) if name not in long]
    assert not new + stale, "\n".join(new + stale)
