"""The sweep's spec: every key it takes, checked by one table, and the points it names.

A value comes from a spec file or from a flag; either way it goes through its key's entry
in :data:`SPEC` (a converter that refuses a value of the wrong type, then a constraint on
what it became), and a bad one is one line naming the key, the value and what is wrong.
"""

import argparse
import itertools
import os
import shlex
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

from ..checkpoint.command import WRITER_NAMES
from ..errors import HpcioError
from ..readers import READERS
from ..train.options import build_parser as train_parser

__all__ = ["Point", "points", "Key", "SPEC", "Bad", "checked", "unknown_keys", "flag_words",
           "train_options", "TRAIN_READS"]


@dataclass(frozen=True)
class Point:
    """One configuration of the sweep, run ``repeat`` times."""

    data: str
    reader: str
    ranks: int
    reader_option: str = ""

    @property
    def name(self):
        opt = f"-{self.reader_option.replace('=', '_')}" if self.reader_option else ""
        return f"{os.path.basename(os.path.normpath(self.data))}-{self.reader}{opt}-n{self.ranks}"


def points(data, readers, ranks, reader_options=("",)):
    """Every combination, in a fixed order (data, reader option, reader, ranks)."""
    return [Point(d, r, n, o) for d, o, r, n in
            itertools.product(data, reader_options or ("",), readers, ranks)]


class Bad(ValueError):
    """A value of the wrong type or range; the caller names where it came from."""


class Key(NamedTuple):
    """One key of the spec: ``convert`` turns a value into the setting or raises
    :class:`Bad` (its type is wrong); ``check`` says what is wrong with the setting, or
    None."""

    convert: Callable
    check: Optional[Callable] = None


# --- converters: value -> setting, or Bad ---------------------------------------------------

def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _words(text):
    return [v.strip() for v in str(text).split(",") if v.strip()]


def integer(says):
    """An int (not a bool); anything else is ``says``."""
    def convert(v):
        if not _is_int(v):
            raise Bad(says)
        return v
    return convert


def string(says):
    def convert(v):
        if not isinstance(v, str):
            raise Bad(says)
        return v
    return convert


def boolean(v):
    if not isinstance(v, bool):
        raise Bad("expected true or false")
    return v


def strings(split=False):
    """A string (comma-separated with ``split``) or a list of strings -> a list."""
    def convert(v):
        if isinstance(v, str):
            return _words(v) if split else [v]
        if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
            return [w for x in v for w in (_words(x) if split else [x])]
        raise Bad("expected a string or a list of strings")
    return convert


def rank_counts(v):
    """``1,2,4``, one int, or a list of ints -> [1, 2, 4]."""
    says = "expected a comma-separated list of integers"
    if isinstance(v, list) and v and all(_is_int(x) for x in v):
        v = ",".join(map(str, v))
    if not (_is_int(v) or isinstance(v, str)):
        raise Bad(says)
    try:
        return [int(x) for x in str(v).split(",") if x.strip()]
    except ValueError:
        raise Bad(says) from None


SCALARS = (str, int, float, bool, type(None))


def train_words(v):
    """``train:`` as command-line words: a mapping of option: value (a scalar or a list
    of scalars), a list of words, or one string."""
    if isinstance(v, str):
        return shlex.split(v)
    if isinstance(v, list) and all(isinstance(x, SCALARS) and x is not None for x in v):
        return [str(x) for x in v]
    if isinstance(v, dict):
        for k, x in v.items():
            if not (isinstance(x, list) and all(isinstance(y, SCALARS) for y in x)
                    or isinstance(x, SCALARS)):
                raise Bad(f"{k}: expected a value or a list of values, got {x!r}")
        return [w for k, x in v.items() for w in flag_words(k, x)]
    raise Bad("expected a mapping of option: value, a list of words or a string")


def flag_words(key, value):
    """A spec's ``train:`` mapping entry as command-line words."""
    opt = "--" + str(key).replace("_", "-")
    if value is True:
        return [opt]
    if value is False or value is None:
        return []
    if isinstance(value, list):
        return [w for v in value for w in (opt, str(v))]
    return [opt, str(value)]


# --- constraints: setting -> what is wrong, or None -----------------------------------------

def minimum(n, says):
    return lambda v: None if v >= n else says


def nonblank(says):
    return lambda v: None if v.strip() else says


def every(ok, says, nonempty=False):
    """Each item passes ``ok`` (and there is one, with ``nonempty``); ``says`` may name
    the first that does not (``{bad!r}``)."""
    def check(items):
        bad = [x for x in items if not ok(x)]
        return says.format(bad=bad[0] if bad else None) if bad or (nonempty and not items) \
            else None
    return check


def known_readers(names):
    bad = [r for r in names if r not in READERS]
    if bad or not names:
        return f"unknown reader(s) {', '.join(bad) or '(none)'}; choose from " \
               f"{', '.join(READERS)}"
    return None


def known_writers(names):
    bad = [w for w in names if w not in WRITER_NAMES]
    if bad or not names:
        return f"unknown checkpoint writer(s) {', '.join(bad) or '(none)'}; choose from " \
               f"{', '.join(WRITER_NAMES)}"
    return None


TEXT = Key(string("expected a non-empty string"), nonblank("expected a non-empty string"))

# spec key (a flag with dashes) -> its check: the one place a sweep's setting is validated
SPEC = {
    "data": Key(strings(), every(str.strip, "expected dataset directories, not empty names")),
    "reader": Key(strings(split=True), known_readers),
    "ranks": Key(rank_counts, every(lambda n: n >= 1, "every rank count must be >= 1",
                                    nonempty=True)),
    "reader_option": Key(strings(), every(lambda o: not o or "=" in o,
                                          "expected KEY=VALUE, got {bad!r}")),
    "repeat": Key(integer("expected an integer"), minimum(1, "must be at least 1")),
    "warmup": Key(integer("expected an integer >= 0"), minimum(0, "expected an integer >= 0")),
    "launcher": TEXT, "darshan": TEXT, "out": TEXT, "simulate_beyond": TEXT,
    "train": Key(train_words),
    "find_max_accelerators": Key(boolean),
    "checkpoint_writer": Key(strings(split=True), known_writers),
}


def checked(key, value, spec_path=None):
    """``value`` through ``SPEC[key]``; a bad one is one line naming the key (the flag, or
    the spec file and key)."""
    convert, check = SPEC[key]
    try:
        got = convert(value)
        wrong = check(got) if check else None
        if wrong:
            raise Bad(wrong)
        return got
    except Bad as e:
        where = f"spec {spec_path}: {key}" if spec_path else "--" + key.replace("_", "-")
        raise HpcioError(f"{where} {value!r}: {e}", everywhere=True) from None


def unknown_keys(spec, path):
    """Refuse, in one line, a spec with keys :data:`SPEC` does not have."""
    bad = sorted(set(spec) - set(SPEC))
    if bad:
        raise HpcioError(f"spec {path}: unknown key(s): {', '.join(bad)}", everywhere=True)


# the train options the sweep reads: None unless given (the train parser's defaults would
# hide whether they were)
TRAIN_READS = ("cache", "model", "workload", "au_threshold")


def train_options(words):
    """The sweep's train words as hpcio.train's own parser reads them: a Namespace with
    :data:`TRAIN_READS` (None when not given); other options and values pass unread. A bad
    value of a train option is one line, before any run."""
    given = argparse.Namespace(**dict.fromkeys(TRAIN_READS))
    try:
        return train_parser().parse_known_args(
            [w for w in words if w not in ("-h", "--help")], given)[0]
    except HpcioError as e:
        raise HpcioError(f"the train options after --: {e}", everywhere=True) from None
