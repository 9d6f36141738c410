"""Checkpoints of MLPerf Storage's llama3 workloads, written and restored naively (PyTorch's
own checkpointing) and coordinated (MPI-IO into shared files): ``python -m
hpcio.checkpoint``.

* :mod:`.layout`: DLIO's per-rank tensors and files of a model, and its sizes;
* :mod:`.state`: a rank's tensors in memory and their CRC-32C;
* :mod:`.writers`: the writers, in a registry (``coordinated``, ``dcp``, ``torch_save``);
* :mod:`.run`: the MLPerf sequence (write N, clear caches, read N), timed, and its results.
"""

__all__ = ["layout", "state", "writers", "run", "command"]
