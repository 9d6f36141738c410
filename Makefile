# Set-up and the two commands of the README. Everything goes into $(VENV).
#   make run            the main job on a small default
#   make test           the test suite less its CI lanes (-m 'not lane') on TEST_JOBS pytest
#                       workers: within 10 minutes on 2 cores, its ten slowest tests and its
#                       time against that printed
#   make test-fast      the tests that start no process (-m 'not mpi'): within 90 s
#   make durations      the suite, recording each test's time in tests/durations.json
#                       (a test over 20 s there is marked slow)
#   make MPI=system ... build mpi4py against the MPI on PATH (module, spack, apt)
#                       instead of the mpich wheel from PyPI (mpi4py 3.1 for MPICH < 4.1,
#                       see scripts/install-mpi4py.sh)
#   make VENV=.venv-system MPI=system test   a second venv beside .venv
#   make horovod        build Horovod 0.28.1 (MPI, PyTorch) into $(VENV) for --dist horovod
#                       (a C++ build of several minutes; scripts/install-horovod.sh)
#   setup also links Debian's python3-simgrid 3.32 (apt, root) into $(VENV) for
#                       python -m hpcio.simulate (scripts/install-simgrid.sh; without root
#                       or apt it prints what to run, and the simulate tests skip)
#   make TORCH_INDEX=https://download.pytorch.org/whl/cpu setup
#                       torch from that index first: PyPI's torch for Linux is the CUDA
#                       build (several GB); empty: whatever index pip is configured with
PY ?= python3
VENV ?= .venv
MPI ?= wheel
TORCH_INDEX ?=
TORCH = torch==2.13.0
EXTRAS_wheel = mpich,train,parquet,test,plot,analysis
EXTRAS_system = train,parquet,test,plot,analysis
BIN = $(abspath $(VENV))/bin

TEST_JOBS ?= 2
PYTEST = PATH="$(BIN):$$PATH" $(BIN)/python -m pytest -q --durations=10

.PHONY: run test test-fast durations setup horovod clean-venv

setup: $(VENV)/.installed-$(MPI)
	@scripts/install-simgrid.sh $(BIN)/python

$(VENV)/.installed-$(MPI): setup.py
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	if [ "$(MPI)" = system ]; then scripts/install-mpi4py.sh $(BIN)/pip; fi
	if [ -n "$(TORCH_INDEX)" ]; then $(BIN)/pip install -q "$(TORCH)" --index-url "$(TORCH_INDEX)"; fi
	$(BIN)/pip install -q -e ".[$(EXTRAS_$(MPI))]"
	rm -f $(VENV)/.installed-*
	touch $@

horovod: $(VENV)/.horovod

$(VENV)/.horovod: $(VENV)/.installed-$(MPI) scripts/install-horovod.sh
	scripts/install-horovod.sh $(BIN)/pip
	touch $@

run: setup
	PATH="$(BIN):$$PATH" $(BIN)/python -m hpcio.demo

test: setup
	HPCIO_TEST_BUDGET_S=600 $(PYTEST) -n $(TEST_JOBS) --dist loadfile -m "not lane" tests

test-fast: setup
	HPCIO_TEST_BUDGET_S=90 $(PYTEST) -m "not lane and not mpi" tests

durations: setup
	$(PYTEST) -p no:xdist -m "not lane" --record-durations tests

clean-venv:
	rm -rf $(VENV)
