"""Small real datasets for tests, made with :func:`hpcio.datagen.generate`."""

import os

from hpcio.datagen import generate
from hpcio.formats import FORMATS
from hpcio.images import ENCODINGS

__all__ = ["make_dataset", "FORMATS_X_ENCODINGS"]

FORMATS_X_ENCODINGS = [(f, e) for f in FORMATS for e in ENCODINGS]


def make_dataset(tmpdir, format, encoding, preset="mnist", records=64, shards=2, seed=0,
                 **kw):
    """A dataset in ``tmpdir/<preset>-<format>-<encoding>-<records>-<shards>-<seed>``
    (made once per directory and reused); returns its :class:`~hpcio.dataset.Dataset`."""
    name = f"{preset}-{format}-{encoding}-{records}-{shards}-{seed}" + "".join(
        f"-{k}{v}" for k, v in sorted(kw.items()))
    out = os.path.join(str(tmpdir), name)
    return generate(out, preset=preset, records=records, format=format, encoding=encoding,
                    shards=shards, seed=seed, force=True, **kw)
