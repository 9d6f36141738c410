"""A DLIO workload's data as DLIO's generators make it (``datagen generate --workload``
for npz, JPEG and parquet workloads), so that DLIO reads hpcio's data and hpcio reads
DLIO's.

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
  quality), one picture per file;
* parquet (MLPerf Storage v3.0's dlrm and flux): the config's ``dataset.parquet.columns``,
  each of its dtype, a list of ``size`` values where a size is given, random values (the
  bytes of random numbers), no compression, dictionary or statistics, row groups of
  ``row_group_size`` rows (at most 64 MiB of them); a record is the bytes of a row's
  columns marked ``read: true`` (all columns when none is marked), as DLIO's parquet
  reader reads only those. A config without columns: one binary column ``data`` of the
  drawn ``d1 x d2`` random bytes.

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


def write_npz(path, side, samples, rng, workload=None):
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


def write_jpeg(path, side, samples, rng, workload=None):
    """Random grey pixels (DLIO: ``np.random.randint(255)``) saved as Pillow's JPEG."""
    px = rng.integers(0, 255, size=(int(side[0]), int(side[1])), dtype=np.uint8)
    Image.fromarray(px).save(path, format="JPEG", bits=8)


ROW_GROUP_BYTES = 64 << 20  # the most a parquet row group holds: the writer's memory


def parquet_columns(workload, side):
    """[(name, numpy dtype, values per row)] of a parquet workload's rows."""
    if workload is not None and workload.columns:
        return [(c.name, np.dtype(c.dtype), c.size) for c in workload.columns]
    return [("data", np.dtype("S1"), int(side[0]) * int(side[1]))]


def write_parquet(path, side, samples, rng, workload=None):
    """``samples`` rows of random values in the workload's columns, row group by row
    group (never more than :data:`ROW_GROUP_BYTES` in memory)."""
    import pyarrow as pa  # pyarrow: an optional extra, for parquet workloads only
    import pyarrow.parquet as pq
    cols = parquet_columns(workload, side)
    row = sum(d.itemsize * k for _, d, k in cols)
    group = (workload.row_group if workload is not None and workload.row_group else
             8192)
    group = max(1, min(group, ROW_GROUP_BYTES // max(row, 1)))

    def array(d, k, n):
        if d.kind == "S":  # one binary value of k bytes per row
            return pa.array([rng.bytes(k) for _ in range(n)], pa.binary())
        flat = pa.array(np.frombuffer(rng.bytes(n * k * d.itemsize), d))
        return flat if k == 1 else pa.FixedSizeListArray.from_arrays(flat, k)

    writer = None
    try:
        for lo in range(0, samples, group):
            n = min(group, samples - lo)
            t = pa.table({name: array(d, k, n) for name, d, k in cols})
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, compression="none",
                                          use_dictionary=False, write_statistics=False)
            writer.write_table(t, row_group_size=n)
    finally:
        if writer is not None:
            writer.close()


#: DLIO's format -> (its file extension, the writer of one file)
FORMATS = {"npz": ("npz", write_npz), "jpeg": ("jpeg", write_jpeg),
           "parquet": ("parquet", write_parquet)}


def generate(out, workload, records=None, seed=0, force=False, comm=None,
             progress=False):
    """Write ``workload``'s training files (``records`` of them, scaled down, default the
    config's) into ``out`` as DLIO does, then index them; collective over ``comm``.
    Returns the :class:`~hpcio.data.dataset.Dataset` on every rank."""
    ext, write = FORMATS[workload.format]
    per = min(workload.samples_per_file, int(records)) if records else \
        workload.samples_per_file  # scaled down: files no larger than the records asked
    n = -(-int(records) // per) if records else workload.files
    sides = dims(workload.record_bytes, workload.record_stdev, n)
    names = file_names(n, ext)
    out = os.path.abspath(out)
    rank = comm.Get_rank() if comm is not None else 0
    size = comm.Get_size() if comm is not None else 1
    lock = []

    def claim():
        lock.append(lock_output(out))
        need = int(sum(int(a) * int(b) for a, b in sides)) * per if not \
            workload.columns else n * per * workload.row_bytes
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
                write(os.path.join(out, names[i]), sides[i], per, rng, workload)
                bar.update(1)
        except OSError as e:
            err = f"{e.filename or out}: cannot write ({e.strerror})"
        finally:
            bar.close()
        if size > 1:  # any rank's error, on every rank
            err = next((e for e in comm.allgather(err) if e), None)
        raise_everywhere(comm, err)

        def index():
            ds = index_path(out, images=",".join(workload.record_columns) or None)
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
