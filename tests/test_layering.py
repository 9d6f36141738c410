"""The house's layering (README, "How the house is built"): a package imports only from the
layers below it, and no module imports another's private name. Read from the source (every
import, lazy ones inside functions too), so a new import against the layering fails here."""

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
    {"formats", "explain"},
    {"readers"},
    {"cli"},
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
