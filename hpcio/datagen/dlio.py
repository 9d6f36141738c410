"""A DLIO workload's data as DLIO's generators make it (``datagen generate --workload``
for npz and JPEG workloads), so that DLIO reads hpcio's data and hpcio reads DLIO's.

What DLIO does (dlio_benchmark ``data_generator/{data_generator,npz_generator,
jpeg_generator}.py`` and ``utils/config.py`` at e1919d7), and hpcio the same:

* folders: ``DATA/train/`` and ``DATA/valid/``; file ``i`` of ``n`` is
  ``train/img_<i zero-padded to len(str(n))>_of_<n>.<format>`` (``file_prefix`` img);
* sizes: a file's picture is ``d1 x d2`` (x samples per file), both drawn from
  ``normal(int(sqrt(record_length_bytes)), record_length_bytes_stdev / 2 /
  sqrt(record_length_bytes))`` after ``np.random.seed(10)``, ``2 n`` draws in file order,
  each ``max(int(draw), 1)``: the same sizes as DLIO's files, file for file
  (``record_length_bytes_resize`` is the reader's resize, not the generator's);
* content: random bytes (DLIO: uniform uint8 from ``rng.random``), which do not compress;
* npz: ``np.savez`` of ``x`` (d1, d2, n) uint8 and ``y`` the n labels 0: a zip of stored
  ``.npy`` members (zip64 headers); DLIO's reader takes sample ``k`` as ``x[..., k]``.
  With n > 1 hpcio writes ``x`` in Fortran order (``fortran_order`` in its header), so
  that ``x[..., k]`` is one contiguous range of the file that the coordinated reader reads
  and DLIO's readers still slice a (d1, d2) sample; with one sample per file (U-Net3D) the
  files are laid out exactly as DLIO's;
* JPEG: random grey pixels ``d1 x d2`` saved by Pillow as DLIO saves them (its default
  quality), one picture per file.

Files are written streaming, a few MB at a time: a 146 MB U-Net3D record never sits in
memory whole. File ``i`` is written by rank ``i % P`` (DLIO's split); rank 0 then indexes
the folder (:func:`hpcio.datagen.importers.index_path`), which records every record's
CRC32C.
"""

import math
import os
import zipfile

import numpy as np
from PIL import Image

from ..data.dataset import open_dataset
from ..mpiutil import on_root, raise_everywhere
from ..progress import Progress
from .importers import index_path
from .write import MARKER, lock_output, prepare_output

__all__ = ["FORMATS", "dims", "file_names", "generate", "write_npz", "write_jpeg"]

CHUNK = 4 << 20  # random bytes drawn and written at a time


def dims(record_bytes, stdev, n):
    """(n, 2) picture sides of n files, as DLIO's ``get_dimension`` draws them."""
    side = int(math.sqrt(record_bytes))
    if stdev > 0:
        rs = np.random.RandomState(10)
        draw = rs.normal(side, stdev / 2.0 / math.sqrt(record_bytes), 2 * n)
        d = [max(int(v), 1) for v in draw]
    else:
        d = [side] * (2 * n)
    return np.asarray(d, np.int64).reshape(n, 2)


def file_names(n, ext, split="train"):
    """DLIO's names of n files: ``<split>/img_<i>_of_<n>.<ext>``."""
    width = len(str(n))
    return [f"{split}/img_{str(i).rjust(width, '0')}_of_{n}.{ext}" for i in range(n)]


def write_npz(path, side, samples, rng):
    """``np.savez(path, x=<(d1, d2, samples) uint8>, y=[0] * samples)`` streamed."""
    fmt = np.lib.format
    shape = (int(side[0]), int(side[1]), int(samples))
    head = {"descr": "|u1", "fortran_order": samples > 1, "shape": shape}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        with z.open("x.npy", "w", force_zip64=True) as f:
            fmt.write_array_header_1_0(f, head)
            left = shape[0] * shape[1] * shape[2]
            while left:
                k = min(CHUNK, left)
                f.write(rng.bytes(k))
                left -= k
        with z.open("y.npy", "w", force_zip64=True) as f:
            fmt.write_array(f, np.array([0] * samples))


def write_jpeg(path, side, samples, rng):
    """Random grey pixels (DLIO: ``np.random.randint(255)``) saved as Pillow's JPEG."""
    px = rng.integers(0, 255, size=(int(side[0]), int(side[1])), dtype=np.uint8)
    Image.fromarray(px).save(path, format="JPEG", bits=8)


#: DLIO's format -> (its file extension, the writer of one file)
FORMATS = {"npz": ("npz", write_npz), "jpeg": ("jpeg", write_jpeg)}


def generate(out, workload, records=None, seed=0, force=False, comm=None,
             progress=False):
    """Write ``workload``'s training files (``records`` of them, scaled down, default the
    config's) into ``out`` as DLIO does, then index them; collective over ``comm``.
    Returns the :class:`~hpcio.data.dataset.Dataset` on every rank."""
    ext, write = FORMATS[workload.format]
    per = workload.samples_per_file
    n = -(-int(records) // per) if records else workload.files
    sides = dims(workload.record_bytes, workload.record_stdev, n)
    names = file_names(n, ext)
    out = os.path.abspath(out)
    rank = comm.Get_rank() if comm is not None else 0
    size = comm.Get_size() if comm is not None else 1
    lock = []

    def claim():
        lock.append(lock_output(out))
        need = int(sum(int(a) * int(b) for a, b in sides)) * per
        prepare_output(out, ["train", "valid"], force, need, n * per)
        for d in ("train", "valid"):
            os.makedirs(os.path.join(out, d))

    try:
        on_root(comm, claim)
        mine = range(rank, n, size)
        mode = {True: "bar", False: "off", None: "off"}.get(progress, progress)
        bar = Progress(len(mine), "file", f"{workload.name} {workload.format}",
                       mode=mode if rank == 0 else "off")
        err = None
        try:
            for i in mine:
                rng = np.random.default_rng([int(seed), i])
                write(os.path.join(out, names[i]), sides[i], per, rng)
                bar.update(1)
        except OSError as e:
            err = f"{e.filename or out}: cannot write ({e.strerror})"
        finally:
            bar.close()
        if size > 1:  # any rank's error, on every rank
            err = next((e for e in comm.allgather(err) if e), None)
        raise_everywhere(comm, err)

        def index():
            ds = index_path(out)
            ds.manifest.update({"source": "generate", "workload": workload.name,
                                "seed": int(seed), "dlio": {"files": n,
                                                            "folders": ["train", "valid"]}})
            ds.save()
            os.unlink(os.path.join(out, MARKER))

        on_root(comm, index)
    finally:
        for fd in lock:
            os.close(fd)
    return open_dataset(out, comm, check=False)
