from setuptools import find_packages, setup

setup(
    name="hpcio",
    version="0.1.0",
    description="MPI-parallel I/O benchmark for deep-learning training on HPC systems",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.9",
    packages=find_packages(include=["hpcio", "hpcio.*"]),
    # files read at run time: Darshan's config, DLIO's workload configs
    package_data={"hpcio": ["measure/darshan.conf", "workloads/dlio/*.yaml",
                            "checkpoint/configs/*.yaml",
                            "simulate/platforms/published/*"]},
    # hpcio COMMAND: every python -m hpcio.<command> behind one name (hpcio/__main__.py)
    entry_points={"console_scripts": ["hpcio = hpcio.__main__:main"]},
    install_requires=[
        "numpy>=1.24",
        "mpi4py>=3.1",
        "lmdb>=1.4",
        "plyvel>=1.5",
        "h5py>=3.8",
        "pillow>=9.0",
        "pyyaml>=6.0",
        "tqdm>=4.60",
        "crc32c>=2.4",
    ],
    extras_require={
        # MPI from PyPI (no root, no system MPI). Leave it out with a system MPI and build
        # mpi4py against it instead: MPICC=mpicc pip install --no-binary=mpi4py mpi4py
        "mpich": ["mpich"],
        # pinned (also in the Makefile's TORCH); PyPI's Linux torch is the CUDA build, several
        # GB: make TORCH_INDEX=https://download.pytorch.org/whl/cpu setup takes the CPU one
        "train": ["torch==2.13.0"],
        "gpu": ["nvidia-ml-py"],
        # --format parquet (MLPerf Storage's dlrm and flux data): written and read natively
        # through pyarrow, as DLIO does
        "parquet": ["pyarrow>=14"],
        "darshan": ["darshan"],
        "plot": ["matplotlib"],
        # python -m hpcio.analyze: figures, Darshan's counters (PyDarshan brings pandas) and
        # Drishti's verdicts, read from Drishti's insights as 0.8 keeps them (pinned)
        "analysis": ["matplotlib", "darshan", "drishti-io==0.8"],
        # make test runs the suite on two workers (pytest-xdist): its launched tests wait
        # (sleeps, timeouts, collectives) a third of their time, which the other fills
        "test": ["pytest>=7", "pytest-xdist>=3"],
    },
)
