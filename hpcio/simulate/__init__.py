"""Prediction at scale: a SimGrid simulation of ranks reading from storage servers,
calibrated on measured runs and validated on a held-out rank count (``python -m
hpcio.simulate``). See :mod:`hpcio.simulate.engine` for what is simulated; checkpoints'
write and restore are :mod:`hpcio.simulate.checkpoint` (``python -m hpcio.simulate
checkpoint``)."""

__all__ = ["platform", "workload", "engine", "calibrate", "calibration", "predict",
           "checkpoint"]
