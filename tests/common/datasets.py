"""Small real datasets for tests, made with :func:`hpcio.datagen.write.generate`."""

import os

from hpcio.data.dataset import is_dataset, open_dataset
from hpcio.datagen.write import generate
from hpcio.formats import FORMATS
from hpcio.data.pictures import ENCODINGS

__all__ = ["make_dataset", "FORMATS_X_ENCODINGS", "records_of", "error_lines"]

FORMATS_X_ENCODINGS = [(f, e) for f in FORMATS for e in ENCODINGS]


def make_dataset(tmpdir, format, encoding, preset="mnist", records=64, shards=2, seed=0,
                 **kw):
    """A dataset in ``tmpdir/<preset>-<format>-<encoding>-<records>-<shards>-<seed>``
    (made once per directory and reused); returns its :class:`~hpcio.data.dataset.Dataset`."""
    name = f"{preset}-{format}-{encoding}-{records}-{shards}-{seed}" + "".join(
        f"-{k}{v}" for k, v in sorted(kw.items()))
    out = os.path.join(str(tmpdir), name)
    if is_dataset(out):
        return open_dataset(out)
    return generate(out, preset=preset, records=records, format=format, encoding=encoding,
                    shards=shards, seed=seed, force=True, **kw)


def records_of(ds):
    """(labels, [record bytes]) of every record, read at the index's offsets."""
    out = []
    handles = {}
    try:
        for i in range(ds.records):
            j = int(ds.index.file[i])
            if j not in handles:
                handles[j] = open(ds.path(j), "rb")
            f = handles[j]
            f.seek(int(ds.index.offset[i]))
            out.append(f.read(int(ds.index.length[i])))
    finally:
        for f in handles.values():
            f.close()
    return ds.index.label.copy(), out


def error_lines(stderr):
    """The lines a failed command printed, less the MPI launcher's own abort notices."""
    skip = ("Abort(", "application called MPI_Abort", "[unset]:", "=====", "BAD TERMINATION",
            "PID ", "EXIT CODE", "CLEANING UP", "YOU CAN IGNORE")
    return [ln for ln in stderr.splitlines()
            if ln.strip() and not ln.lstrip().startswith(skip) and "%|" not in ln]
