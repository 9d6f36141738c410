"""DLIO 2.0's own PyTorch checkpointing with an fsync after each file's torch.save: loaded
by DLIO through its ``checkpoint.checkpoint_mechanism_classname`` (a module on
``PYTHONPATH``), so that ``benchmarks/bench_checkpoint_dlio.py`` can time DLIO's writes as
hpcio's writers and MLPerf Storage v3.0's rules do (durable, not only handed to the page
cache). Imported only inside DLIO's venv."""

import os

import torch
from dlio_benchmark.checkpointing.pytorch_checkpointing import PyTorchCheckpointing


class FsyncCheckpointing(PyTorchCheckpointing):
    """``PyTorchCheckpointing.save_state`` (``torch.save`` into the open file), then
    flush and ``os.fsync`` of that file."""

    _one = None

    @staticmethod
    def get_instance():
        if FsyncCheckpointing._one is None:
            FsyncCheckpointing._one = FsyncCheckpointing()
        return FsyncCheckpointing._one

    def save_state(self, suffix, state):
        with open(self.get_name(suffix), "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
