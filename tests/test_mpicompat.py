"""hpcio.mpicompat: the mpi4py 4 + MPICH 4.0 ROMIO combination is refused with one line."""

import json

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import run_mpi, run_py
from hpcio.mpicompat import mpich_version, romio_problem

# MPI_Get_library_version's text: the MPICHs measured here, and Open MPI's format
DEBIAN12 = "MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\n"
WHEEL = "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 20:45:26 UTC 2026\n"
OPENMPI = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4\n"


@pytest.mark.parametrize("text,want", [
    (DEBIAN12, (4, 0, 2)),
    (WHEEL, (5, 0, 2)),
    ("MPICH Version:\t4.1\n", (4, 1)),
    ("MPICH Version:\t4.1a1\n", (4, 1)),
    (OPENMPI, None),
    ("", None),
])
def test_mpich_version(text, want):
    assert mpich_version(text) == want


@pytest.mark.parametrize("mpi4py,text,broken", [
    ("4.1.2", DEBIAN12, True),
    ("4.0.0", "MPICH Version:\t4.0\n", True),
    ("4.2.0.dev0", DEBIAN12, True),
    ("3.1.6", DEBIAN12, False),
    ("4.1.2", "MPICH Version:\t4.1.2\n", False),
    ("4.1.2", WHEEL, False),
    ("4.1.2", "MPICH Version:\t3.4.3\n", False),  # no large-count calls to use
    ("4.1.2", OPENMPI, False),
])
def test_romio_problem(mpi4py, text, broken):
    problem = romio_problem(mpi4py, text)
    assert (problem is not None) is broken
    if broken:
        assert "\n" not in problem
        assert problem.startswith(f"mpi4py {mpi4py} with MPICH {text.split()[2]}:")
        assert "mpi4py 3.1.x for MPICH < 4.1" in problem


def installed():
    """(mpi4py version, MPI library text) of this Python's mpi4py, asked in a subprocess."""
    p = run_py(["-c", "import json, mpi4py; from mpi4py import MPI; "
                      "print(json.dumps([mpi4py.__version__, MPI.Get_library_version()]))"],
               check=True, timeout=60)
    return json.loads(p.stdout.splitlines()[-1])


def test_check_romio_on_the_installed_mpi():
    version, lib = installed()
    p = run_py(["-c", "from mpi4py import MPI; from hpcio.mpicompat import check_romio; "
                      "print(check_romio(MPI))"], timeout=60)
    problem = romio_problem(version, lib)
    if problem:
        assert p.returncode != 0 and problem in p.stderr
    else:
        assert p.returncode == 0 and p.stdout.strip() == "None", p.stderr


def test_coordinated_reader_refuses_the_broken_combination(tmp_path):
    version, lib = installed()
    if romio_problem(version, lib) is None:
        first = " ".join(lib.splitlines()[0].split())
        pytest.skip(f"mpi4py {version} with {first}: not the broken combination "
                    f"(mpi4py 4 + MPICH 4.0)")
    ds = make_dataset(tmp_path, "packed", "raw", records=64)
    p = run_mpi(2, ["-m", "hpcio.bench", "--data", str(ds.root), "--readers", "coordinated",
                    "--cache", "asis", "--shuffle", "none", "--repeat", "1", "--batch", "4",
                    "--limits", "seq", "--out", str(tmp_path / "b.json")], timeout=120)
    line = one_line(p, "hpcio.bench: error: mpi4py 4")
    assert "mpi4py 3.1.x for MPICH < 4.1" in line
    assert "flatten.c" not in p.stderr
