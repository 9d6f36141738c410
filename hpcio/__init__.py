"""hpcio: MPI-parallel I/O benchmark for deep-learning training on HPC systems."""

__version__ = "0.1.0"
__all__ = ["__version__"]
