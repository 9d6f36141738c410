"""What ``tests/test_tiers.py`` asks :func:`common.tiers.launches` about: helpers that start
a process directly, through another helper, a class or a module attribute, and one that
starts none."""

from . import mpi
from .launch import launch
from .procs import Job

__all__ = ["direct", "through_helper", "through_module", "through_class", "none", "nested"]


def direct():
    return launch(["true"])


def _helper():
    return direct()


def through_helper():
    return _helper()


def through_module():
    return mpi.run_py(["-c", "pass"])


def through_class():
    return Job(1, [])


def none():
    return sorted([3, 1, 2])


def nested():
    def inner():
        return none()
    return inner()
