"""spack.yaml against the facts of spack's package recipes (spack-packages, 2026-07): what
the specs must say for the stack to concretize and to do what hpcio needs, and a spack
counterpart (or a note saying why there is none) for every Python dependency of setup.py.
Nothing is concretized here (no spack); the recipes' facts are the table below."""

import ast
import os
import re

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPACK_YAML = os.path.join(ROOT, "spack.yaml")
SETUP_PY = os.path.join(ROOT, "setup.py")
# where the optional Horovod block starts: the line that says to uncomment what follows
BLOCK_MARK = "below, to the end of the file:"

# package: (variants it must set: True "+v", False "~v", str "v=str"; versions it may take
# as (lowest, highest) prefixes, None for open; the recipe's fact behind it)
FACTS = {
    "python": ({}, ("3.11", "3.12"),
               "py-pandas 3 and py-matplotlib 3.11 need 3.11; Horovod's numpy 1 ends at 3.12"),
    "py-mpi4py": ({}, (None, None), "depends_on('mpi'): built with the environment's MPI"),
    "hdf5": ({"mpi": True, "hl": True}, ("1.10.7", "1.14"),
             "py-h5py needs hdf5@1.10.7:1.14 +hl (hl is off by default, 2.x is newest); "
             "+mpi for h5py's mpio driver"),
    "py-h5py": ({"mpi": True}, (None, None), "+mpi pulls hdf5+mpi and builds with mpicc"),
    "py-torch": ({"gloo": True}, ("2.10", None),
                 "~gloo is the default and gloo is the CPU backend of torch.distributed; "
                 "versions up to 2.9.1 are deprecated"),
    "darshan-runtime": ({}, (None, None), "LD_PRELOAD tracing"),
    "darshan-util": ({}, (None, None), "darshan-parser"),
    "py-darshan": ({}, (None, None), "pins darshan-util to its own version"),
    "py-nvidia-ml-py": ({}, (None, None), "the official NVML bindings"),
    "arrow": ({"parquet": True, "snappy": True}, (None, None),
              "py-pyarrow has pyarrow.parquet only with arrow +parquet (default off); "
              "snappy (default off) is the codec of most parquet files"),
    "py-pyarrow": ({}, (None, None), "depends on arrow +python"),
}
# packages the environment's specs must not name, and why
NOT = {
    "py-pynvml": "a wrapper of py-nvidia-ml-py; ask for py-nvidia-ml-py",
    "py-horovod": "deprecated in every version: only in the optional block",
    "py-drishti-io": "no such package: it is called drishti",
}
# setup.py's requirement -> the spack package that provides it (None: outside spack, and
# spack.yaml says why in an "# outside spack: NAME: why" line)
PIP_TO_SPACK = {
    "numpy": "py-numpy", "mpi4py": "py-mpi4py", "lmdb": "py-lmdb", "h5py": "py-h5py",
    "pillow": "py-pillow", "pyyaml": "py-pyyaml", "tqdm": "py-tqdm", "torch": "py-torch",
    "nvidia-ml-py": "py-nvidia-ml-py", "darshan": "py-darshan",
    "matplotlib": "py-matplotlib", "pyarrow": "py-pyarrow", "pytest": "py-pytest",
    "pytest-xdist": "py-pytest-xdist",
    "mpich": None, "plyvel": None,
    "crc32c": None, "drishti-io": None,
}


def parse_spec(text):
    """``name@versions +a ~b key=value`` -> (name, (low, high), {variant: value}); the
    versions are tuples of ints, None where open (``@2.10:``, ``@:1``)."""
    assert isinstance(text, str), f"not one spec string (quote it): {text!r}"
    head, *rest = text.split()
    m = re.fullmatch(r"([a-z0-9-]+)(?:@([0-9.:]+))?", head)
    assert m, f"cannot read {head!r} in {text!r}"
    variants = {}
    for tok in rest:
        if tok[0] in "+~":
            variants[tok[1:]] = tok[0] == "+"
        elif "=" in tok:
            key, value = tok.split("=", 1)
            variants[key] = value
        else:
            raise AssertionError(f"cannot read {tok!r} in {text!r}")
    return m.group(1), versions(m.group(2)), variants


def versions(text):
    """'1.14' -> ((1, 14), (1, 14)); '2.10:' -> ((2, 10), None); ':1' -> (None, (1,))."""
    if not text:
        return None, None
    low, colon, high = text.partition(":")
    low = tuple(map(int, low.split("."))) if low else None
    high = (tuple(map(int, high.split("."))) if high else None) if colon else low
    return low, high


def within(have, allowed):
    """Every version ``have`` (a range) admits lies in ``allowed`` (prefix bounds)."""
    (lo, hi), (alo, ahi) = have, allowed
    if alo is not None and (lo is None or lo < alo):
        return False
    return ahi is None or (hi is not None and hi[:len(ahi)] <= ahi)


def load(text):
    env = yaml.safe_load(text)
    assert set(env) == {"spack"}
    return env["spack"]


def specs(env):
    """{name: (versions, variants)} of the environment's root specs, one per package."""
    out = {}
    for text in env["specs"]:
        name, vers, variants = parse_spec(text)
        assert name not in out, f"{name} twice in specs"
        out[name] = (vers, variants)
    return out


@pytest.fixture(scope="module")
def text():
    with open(SPACK_YAML) as f:
        return f.read()


@pytest.fixture(scope="module")
def env(text):
    return load(text)


def horovod_env(text):
    """The environment with the optional Horovod block uncommented, as its comment says."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith(BLOCK_MARK)) + 1
    block = lines[start:]
    assert block and all(ln.startswith("  # ") for ln in block), block
    return load("\n".join(lines[:start] + ["  " + ln[4:] for ln in block]) + "\n")


def test_the_environment_is_unified_with_a_view(env):
    assert env["concretizer"]["unify"] is True and env["view"] is True
    assert "config" not in env  # deprecated versions stay refused without Horovod


@pytest.mark.parametrize("package", sorted(FACTS))
def test_specs_hold_the_recipes_facts(env, package):
    want, allowed, why = FACTS[package]
    have = specs(env)
    assert package in have, f"{package} missing: {why}"
    vers, variants = have[package]
    for v, value in want.items():
        assert variants.get(v) == value, f"{package}: {v} must be {value!r}: {why}"
    allowed = tuple(tuple(map(int, a.split("."))) if a else None for a in allowed)
    assert within(vers, allowed), f"{package}@{vers} outside {allowed}: {why}"


def test_nothing_deprecated_or_misnamed(env):
    have = specs(env)
    for name, why in NOT.items():
        assert name not in have, f"{name}: {why}"


def test_torch_is_cpu_or_names_its_gpu(env):
    """py-torch defaults to +cuda with cuda_arch=none, which conflicts with +cuda."""
    _, variants = specs(env)["py-torch"]
    assert "cuda" in variants, "py-torch must say ~cuda or +cuda cuda_arch=<arch>"
    if variants["cuda"]:
        assert variants.get("cuda_arch", "none") != "none"
    else:
        assert "cuda_arch" not in variants


def test_darshan_logs_have_a_home_and_one_version(env):
    have = specs(env)
    _, runtime = have["darshan-runtime"]
    # no logpath= or jobid= variant exists; scheduler=slurm or log_path=<dir> is needed
    assert not {"logpath", "jobid"} & set(runtime)
    assert runtime.get("scheduler") == "slurm" or runtime.get("log_path", "none") != "none"
    # py-darshan pins darshan-util@<its first three parts>; the runtime writes that format
    v = {name: have[name][0] for name in ("darshan-runtime", "darshan-util", "py-darshan")}
    assert len(set(v.values())) == 1 and v["py-darshan"][0] == v["py-darshan"][1]
    assert len(v["py-darshan"][0]) == 3


def test_horovod_block_is_deprecated_cpu_mpi_and_numpy_1(text, env):
    hv = horovod_env(text)
    assert hv["config"] == {"deprecated": True}  # every py-horovod version is deprecated
    have = specs(hv)
    assert set(have) == set(specs(env)) | {"py-horovod"}
    vers, variants = have["py-horovod"]
    assert vers == ((0, 28, 1), (0, 28, 1))
    # the nccl default conflicts with ~cuda; horovodrun is not used, MPI launches it
    assert variants["cuda"] is False and variants["tensor_ops"] in ("mpi", "gloo")
    assert "mpi" in variants["controllers"].split(",")
    assert "pytorch" in variants["frameworks"].split(",")
    # pytorch-lightning -> tensorboard <= 2.11 (protobuf 3.13) -> numpy 1 -> python <= 3.12
    req = hv["packages"]["py-numpy"]["require"]
    assert within(versions(req.lstrip("@")), (None, (1,)))
    assert within(have["python"][0], (None, (3, 12)))


def _requirements():
    """Every requirement name in setup.py's install_requires and extras_require."""
    with open(SETUP_PY) as f:
        tree = ast.parse(f.read())
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "id", None) == "setup")
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords
          if k.arg in ("install_requires", "extras_require")}
    reqs = list(kw["install_requires"]) + [r for rs in kw["extras_require"].values()
                                           for r in rs]
    return sorted({re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in reqs})


def test_every_python_dependency_has_a_spack_counterpart(text, env):
    have = specs(env)
    outside = set(re.findall(r"^# outside spack: ([a-z0-9-]+): \S", text, re.M))
    for req in _requirements():
        assert req in PIP_TO_SPACK, f"{req}: add it to PIP_TO_SPACK and to spack.yaml"
        package = PIP_TO_SPACK[req]
        if package is None:
            assert req in outside, f"{req}: spack.yaml needs '# outside spack: {req}: why'"
        else:
            assert package in have, f"{req}: spack.yaml needs {package}"


def test_parse_spec():
    assert parse_spec("py-torch@2.10: ~cuda +gloo cuda_arch=90") == (
        "py-torch", ((2, 10), None), {"cuda": False, "gloo": True, "cuda_arch": "90"})
    assert parse_spec("hdf5@1.14 +mpi") == ("hdf5", ((1, 14), (1, 14)), {"mpi": True})
    assert within(versions("1.14"), ((1, 10, 7), (1, 14)))
    assert not within(versions("2.1.0"), (None, (1, 14)))
    assert not within(versions("2.10:"), (None, (2, 12)))
    with pytest.raises(AssertionError, match="quote it"):
        parse_spec({"py-torch@2.10": "~cuda"})  # what YAML makes of an unquoted "@2.10: "
