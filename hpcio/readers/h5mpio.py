"""The coordinated reader's HDF5 path through HDF5's own parallel I/O
(``--reader-option hdf5=mpio``), what an HDF5 user on a cluster writes, to compare with the
default path (raw MPI-IO at the index's offsets).

Every shard is opened with h5py's ``mpio`` driver over the reader's communicator. For each
request and each file, a rank's records are selected as sorted, unique rows of the
``images`` dataset (its first axis) and read collectively: HDF5 turns the selections of all
ranks into MPI-IO (two-phase I/O in ROMIO, the same hints). The rows land in file order in a
staging buffer and are copied into plan order with one vectorised gather. How many
``H5Dread`` calls, HDF5's cost of a selection decides (HDF5 1.10.8 and 2.0.0 alike, figures
in ``benchmarks/parallel-hdf5.md``):

* a union of rows (one call per file) costs per element: ~3 ns on a contiguous dataset,
  ~90 ns on a chunked one (HDF5 maps every selected element of an irregular selection to
  its chunk: 18 ms per 196 KB row); one call per run of consecutive rows (a regular
  selection) costs ~20-100 us whatever its size. So small rows of a contiguous dataset
  (up to ``UNION_MAX_ELEMENTS``) are one union per file, anything else one call per run;
  collective calls are matched across ranks (each makes as many as the rank with the most
  runs, one Allreduce per request, empty selections for the rest);
* ``dset[rows]`` returns without calling ``H5Dread`` when a rank selects nothing, so the
  ranks that do select something wait for it forever (h5py#965), and for integer datasets
  it reads through a fast path with the default transfer properties, independently even
  inside ``dset.collective``. So rows are read with ``read_direct`` inside
  ``dset.collective``, and a rank with nothing to read in a file some rank needs joins
  the collective with an empty selection through ``dset.id.read``;
* h5py builds a row-list selection by merging halves (``H5Smodify_select``): ``n log n``.
  One ``select_hyperslab(..., SELECT_OR)`` per row from Python is quadratic in HDF5 1.10.

``read_bytes`` counts the rows asked for; what ROMIO's two-phase I/O reads around them
shows in ``hpcio.bench``'s ``dev/rec``.

Needs h5py built against a parallel HDF5 (``h5py.get_config().mpi``); :func:`check` says
in one line how to get it. Records are fixed-size rows (contiguous or chunked layout, any
element type: the row's bytes are the record); encoded records in one blob are not rows.
"""

import numpy as np

from ..errors import HpcioError
from .assemble import copy_records
from .hints import mpi_info

__all__ = ["check", "H5Files", "BUILD", "UNION_MAX_ELEMENTS"]

# rows of at most this many elements of a contiguous dataset are read as one union
UNION_MAX_ELEMENTS = 16384

BUILD = ("CC=mpicc HDF5_MPI=ON HDF5_DIR=<parallel HDF5, e.g. "
         "/usr/lib/x86_64-linux-gnu/hdf5/mpich> pip install --no-deps --force-reinstall "
         "--no-binary=h5py --no-build-isolation h5py (with Cython and pkgconfig "
         "installed; docs/setup.md: Parallel HDF5)")


def check(ds):
    """Refuse, with one line on every rank (every rank has the same manifest), a dataset
    this path cannot read or an h5py that cannot read in parallel. Cheap, before any work."""
    def no(msg):
        return HpcioError(f"reader option hdf5=mpio: {msg}", everywhere=True)
    if ds.format != "hdf5":
        raise no(f"{ds.root} is a {ds.format} dataset, not HDF5")
    layout = ds.manifest.get("hdf5", {}).get("layout", "contiguous")
    if layout not in ("contiguous", "chunked"):
        raise no(f"{ds.root} holds encoded records in one byte blob (hdf5 layout "
                 f"{layout}), not rows of an images dataset; the default hdf5=offsets "
                 f"reads it")
    import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
    if not h5py.get_config().mpi:
        raise no(f"h5py {h5py.version.version} is built without MPI; build it against a "
                 f"parallel HDF5: {BUILD}")


class H5Files:
    """The dataset's shards opened with the ``mpio`` driver (collectively over ``comm``
    when ``collective``, else each rank alone), and their collective reads."""

    def __init__(self, ds, comm, collective, hints, check_files):
        import h5py  # h5py and mpi4py: HDF5's library, and MPI started
        from mpi4py import MPI
        self.collective = bool(collective)
        self.paths, self.check_files = ds.paths, check_files
        idx = ds.index
        name = ds.manifest.get("hdf5", {}).get("images", "images")
        # rows: record i of file j is row i - first[j] of its images dataset
        files, first, count = np.unique(idx.file, return_index=True, return_counts=True)
        self.first = np.zeros(len(self.paths), np.int64)
        self.first[files] = first
        self.files, self.dsets = [], []
        info = mpi_info(hints)
        fcomm = comm if self.collective else MPI.COMM_SELF
        kw = {"info": info} if info != MPI.INFO_NULL else {}
        try:
            for j, p in enumerate(self.paths):
                try:
                    f = h5py.File(p, "r", driver="mpio", comm=fcomm, **kw)
                except OSError as e:
                    raise HpcioError(f"{p}: HDF5 cannot open it with the mpio driver "
                                     f"({_first_line(e)})", everywhere=self.collective)
                self.files.append(f)
                self.dsets.append(f[name])
        except BaseException:
            self.close()
            raise
        finally:
            if info != MPI.INFO_NULL:
                info.Free()
        d = self.dsets[0]
        self.dtype, self.row_shape = d.dtype, d.shape[1:]
        self.row_bytes = int(d.dtype.itemsize * np.prod(d.shape[1:], dtype=np.int64))
        lens = np.unique(idx.length)
        if len(lens) > 1 or (len(lens) and int(lens[0]) != self.row_bytes):
            raise HpcioError(f"{self.paths[0]}: rows of {name} are {self.row_bytes} bytes, "
                             f"the index's records {', '.join(map(str, lens[:3]))} bytes",
                             everywhere=True)
        ordered = bool(np.all(idx.file[1:] >= idx.file[:-1]))
        for j, n in zip(files.tolist(), count.tolist()):
            if not ordered or n > self.dsets[j].shape[0]:
                raise HpcioError(f"{self.paths[j]}: its records are not the rows of "
                                 f"{name} in index order", everywhere=True)
        self._file = idx.file
        # a union of rows costs HDF5 per element (contiguous: per innermost line;
        # chunked: every element is mapped to its chunk), a read per run per call
        elements = int(np.prod(self.row_shape, dtype=np.int64))
        self.by_run = np.array([d.chunks is not None or elements > UNION_MAX_ELEMENTS
                                for d in self.dsets])
        self._comm = comm.Dup() if self.collective and comm.Get_size() > 1 else None
        xfer = h5py.h5p.create(h5py.h5p.DATASET_XFER)
        xfer.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
        self._xfer = xfer
        self._none = np.zeros(1, self.dtype)

    def read(self, ids, dst, files, buf, stage_of, stats):
        """Records ``ids`` (plan order) into ``buf`` at offsets ``dst``: per file in
        ``files`` (every file some rank needs, when collective) this rank's rows, sorted
        and unique (a record twice in the plan, padding, is read once), into the staging
        buffer ``stage_of(nbytes)``; then one gather into place. One read of the rows'
        union, or (``by_run``) one read per run of consecutive rows, as many on every
        rank as on the rank with the most runs when collective.
        Returns the files this rank read rows of."""
        R = self.row_bytes
        fil = self._file[ids]
        rows = ids - self.first[fil]
        order = np.lexsort((rows, fil))
        f, rw = fil[order], rows[order]
        new = np.ones(len(f), bool)
        new[1:] = (f[1:] != f[:-1]) | (rw[1:] != rw[:-1])
        uf, ur = f[new], rw[new]
        stage = stage_of(max(1, len(ur) * R))
        nf = len(self.paths)
        cuts = np.searchsorted(uf, np.arange(nf + 1))
        files = np.unique(uf) if files is None else np.asarray(files, np.int64)
        # runs of consecutive rows: where they start in ur, their lengths, per file
        brk = np.ones(len(ur), bool)
        brk[1:] = (uf[1:] != uf[:-1]) | (ur[1:] != ur[:-1] + 1)
        rs = np.flatnonzero(brk)
        rn = np.diff(np.append(rs, len(ur)))
        rcuts = np.searchsorted(uf[rs], np.arange(nf + 1))
        calls = np.where(self.by_run[files], rcuts[files + 1] - rcuts[files], 1)
        if self._comm is not None:  # one Allreduce per request: the collective calls agree
            from mpi4py import MPI  # mpi4py: importing it starts MPI
            self._comm.Allreduce(MPI.IN_PLACE, calls, op=MPI.MAX)
        read = []
        for j, nc in zip(files.tolist(), calls.tolist()):
            a, b = int(cuts[j]), int(cuts[j + 1])
            try:
                if not self.by_run[j]:
                    self._read_rows(j, ur[a:b], stage[a * R:b * R])
                else:
                    for k in range(rcuts[j], rcuts[j] + nc):
                        if k < rcuts[j + 1]:
                            q, n = int(rs[k]), int(rn[k])
                            r0 = int(ur[q])
                            self._read_rows(j, slice(r0, r0 + n), stage[q * R:(q + n) * R])
                        else:
                            self._read_rows(j, (), None)
            except Exception as e:  # HDF5's error: a shard that changed names itself
                self.check_files([j])
                raise HpcioError(f"{self.paths[j]}: HDF5 read failed ({_first_line(e)})")
            stats.calls += nc
            stats.read_bytes += (b - a) * R
            if b > a:
                read.append(j)
        src = np.empty(len(ids), np.int64)
        src[order] = (np.cumsum(new) - 1) * R  # each record's unique copy in the stage
        copy_records(stage, src, dst, np.full(len(ids), R, np.int64), buf)
        return read

    def _read_rows(self, j, rows, out):
        """Rows ``rows`` (sorted indices, or a slice) of file ``j`` into ``out``; no rows:
        join the collective read with an empty selection (or do nothing)."""
        d = self.dsets[j]
        n = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
        if n:
            view = out.view(self.dtype).reshape((n,) + self.row_shape)
            if self.collective:
                with d.collective:
                    d.read_direct(view, np.s_[rows])
            else:
                d.read_direct(view, np.s_[rows])
        elif self.collective:
            import h5py  # h5py: its HDF5 library loads only where HDF5 is read or written
            fs = d.id.get_space()
            fs.select_none()
            ms = h5py.h5s.create_simple((1,))
            ms.select_none()
            d.id.read(ms, fs, self._none, dxpl=self._xfer)

    def close(self):
        """Collective when the files were opened collectively."""
        self.dsets = []
        for f in self.files:
            try:
                f.close()
            except Exception:
                pass
        self.files = []
        if getattr(self, "_comm", None) is not None:
            self._comm.Free()
            self._comm = None


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
