"""Make datasets: synthetic presets in every format, imports of data the user has, and
indexes of datasets made elsewhere. ``python -m hpcio.datagen --help`` lists the commands.

Generation is parallel: under ``mpiexec -n P`` shard ``k`` is written by rank ``k % P``;
a record's pixels and label depend only on (seed, record id), so any number of ranks or
shards gives the same records. Each rank returns its shards' index arrays to rank 0 once, at
the end (one gather), and rank 0 writes the manifest and the record index.
"""

import argparse
import os
import sys

import numpy as np

from . import __version__
from . import images as pictures
from .cli import ArgumentParser
from .dataset import INDEX, KIND, MANIFEST, Dataset, RecordIndex, is_dataset, open_dataset
from .errors import HpcioError, guard
from .formats import FORMATS, get_format
from .formats.base import Block, Spec, record_ranges, write_error
from .presets import PRESETS, get_preset

__all__ = ["generate", "write_dataset", "Synthetic", "summary", "prepare_output",
           "block_records", "main"]

BLOCK_BYTES = 16 << 20  # raw pixels rendered per block: bounded memory, numpy-sized work


def block_records(record_bytes):
    """Records per block: ~16 MB of raw pixels, at most 1024 records."""
    return int(max(1, min(1024, BLOCK_BYTES // max(int(record_bytes), 1))))


class Synthetic:
    """Records of a preset: drawn pictures and labels from (seed, record id)."""

    def __init__(self, preset, seed=0, records=None, shape=None):
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.seed = int(seed)
        self.records = self.preset.records if records is None else int(records)
        self.shape = tuple(self.preset.shape if shape is None else shape)
        self.classes = self.preset.classes

    def block(self, lo, hi, encoding, quality):
        px, lab = pictures.render(self.preset.style, self.seed, np.arange(lo, hi),
                                  self.shape, self.classes)
        data, lengths = pictures.encode(px, encoding, quality)
        return Block(lo, hi, lab, data, lengths)


# ---- output directory -------------------------------------------------------------------

def _owned(root):
    """Paths (relative) that the hpcio dataset in ``root`` wrote and may replace: always its
    manifest, index and side files; its data too unless it indexed data made elsewhere."""
    import json
    try:
        with open(os.path.join(root, MANIFEST)) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return [], []
    if not isinstance(m, dict) or m.get("kind") != KIND:
        return [], []
    own = [MANIFEST, m.get("index", INDEX)] + list(m.get("side_files", []))
    data, dirs = [], []
    if m.get("source") in ("generate", "import"):
        try:
            idx = RecordIndex.load(os.path.join(root, m.get("index", INDEX)))
            data = [str(p) for p in idx.files]
        except HpcioError:
            data = []
        for s in m.get("shards", []):
            p = s.get("path", "")
            if not p.startswith("shard-"):
                continue
            dirs.append(p)
            if p.endswith(".lmdb"):
                data.append(p + "/lock.mdb")
    return own + data, dirs


def _remove(root, files, dirs):
    for rel in files:
        p = os.path.join(root, rel)
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise write_error(p, e)
    # empty folders only, deepest first: anything hpcio did not write stays
    for top in dirs:
        full = os.path.join(root, top)
        if not os.path.isdir(full):
            continue
        for d, _, _ in sorted(os.walk(full, topdown=False), key=lambda t: -len(t[0])):
            try:
                os.rmdir(d)
            except OSError:
                pass


def prepare_output(out, targets, force=False):
    """Make ``out`` ready for a new dataset whose files are ``targets`` (relative).

    An empty or new directory is used as is. One holding an hpcio dataset, or anything
    else, is refused unless ``force``; with ``force`` only files the old hpcio dataset
    wrote are removed (listed by its manifest and index), and a target that exists and was
    not written by hpcio is never overwritten."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise HpcioError(f"{out}: exists and is not a directory")
    try:
        os.makedirs(out, exist_ok=True)
        import tempfile
        fd, probe = tempfile.mkstemp(prefix=".hpcio-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise write_error(out, e)
    entries = [e for e in os.listdir(out)]
    if not entries:
        return
    if is_dataset(out):
        if not force:
            raise HpcioError(f"{out}: already holds an hpcio dataset (pass --force to "
                             f"replace it)")
        files, dirs = _owned(out)
        _remove(out, files, dirs)
    elif not force:
        raise HpcioError(f"{out}: directory exists and is not empty, and is not an hpcio "
                         f"dataset (pass --force to write into it; only hpcio's own files "
                         f"are ever replaced)")
    for rel in list(targets) + [MANIFEST, INDEX]:
        p = os.path.join(out, rel)
        if os.path.lexists(p):
            raise HpcioError(f"{p}: exists and was not written by hpcio; move it away or "
                             f"choose another output directory")


# ---- progress -------------------------------------------------------------------------------

class _Progress:
    """A tqdm bar on rank 0 over all ranks' records: other ranks send a small count per
    block (non-blocking) that rank 0 folds in whenever it finishes a block of its own."""

    TAG = 0x4847

    def __init__(self, comm, total, enabled, desc):
        self.comm = comm
        self.size = comm.Get_size() if comm is not None else 1
        self.rank = comm.Get_rank() if comm is not None else 0
        self.on = bool(enabled)
        self.reqs, self.done, self.bar = [], 0, None
        if self.on and self.rank == 0:
            from tqdm import tqdm
            self.bar = tqdm(total=total, unit="rec", desc=desc, file=sys.stderr,
                            dynamic_ncols=True, smoothing=0.05)

    def add(self, n):
        if not self.on:
            return
        if self.rank == 0:
            self.bar.update(n)
            self._drain(block=False)
        else:
            self.reqs.append(self.comm.isend(int(n), dest=0, tag=self.TAG))

    def _drain(self, block):
        from mpi4py import MPI
        while self.size > 1 and self.done < self.size - 1:
            if not block and not self.comm.iprobe(source=MPI.ANY_SOURCE, tag=self.TAG):
                return
            n = self.comm.recv(source=MPI.ANY_SOURCE, tag=self.TAG)
            if n < 0:
                self.done += 1
            else:
                self.bar.update(n)

    def finish(self):
        """Every rank, always (also after an error): no message is left unmatched."""
        if not self.on:
            return
        if self.rank == 0:
            self._drain(block=True)
            self.bar.close()
        else:
            from mpi4py import MPI
            self.reqs.append(self.comm.isend(-1, dest=0, tag=self.TAG))
            MPI.Request.waitall(self.reqs)


# ---- writing ----------------------------------------------------------------------------------

def _write_shards(out, source, spec, fmt, mine, ranges, progress, quality):
    """Write this rank's shards; returns their ShardResults."""
    results = []
    per = block_records(int(np.prod(spec.shape)))
    for k in mine:
        lo, hi = ranges[k]
        w = None
        path = os.path.join(out, fmt.targets(k, spec)[0])
        try:
            w = fmt.Writer(out, k, lo, hi, spec)
            for a in range(lo, hi, per):
                b = min(hi, a + per)
                w.write(source.block(a, b, spec.encoding, quality))
                progress.add(b - a)
            results.append(w.close())
        except HpcioError:
            if w is not None:
                w.abort()
            raise
        except Exception as e:  # OSError, lmdb.Error, h5py's errors: one line
            if w is not None:
                w.abort()
            if not isinstance(e, (OSError, RuntimeError)) and \
                    type(e).__module__.split(".")[0] not in ("lmdb", "h5py"):
                raise
            raise write_error(path, e)
    return results


def _assemble(results, spec):
    """The record index from all shards' results, in record order."""
    results = sorted(results, key=lambda r: r.records[0])
    files, file_bytes, fileno = [], [], []
    for r in results:
        fileno.append(r.file.astype(np.int64) + len(files))
        files.extend(r.files)
        file_bytes.extend(r.file_bytes)
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    index = RecordIndex(cat(fileno, np.int32), cat([r.offset for r in results], np.int64),
                        cat([r.length for r in results], np.int64),
                        cat([r.label for r in results], np.int64),
                        np.asarray(files, dtype=str), np.asarray(file_bytes, np.int64))
    if len(index) != spec.records:
        raise HpcioError(f"shards hold {len(index)} records, expected {spec.records}")
    return results, index


def _bcast_error(comm, err):
    """Raise on every rank the first error of any rank (errors travel with the data)."""
    if comm is None or comm.Get_size() == 1:
        if err:
            raise HpcioError(err)
        return
    err = comm.bcast(err, root=0)
    if err:
        raise HpcioError(err, everywhere=True)


def _rank0(comm, fn):
    """Run ``fn()`` on rank 0 only; an HpcioError there is raised on every rank."""
    rank = comm.Get_rank() if comm is not None else 0
    err, val = None, None
    if rank == 0:
        try:
            val = fn()
        except HpcioError as e:
            err = str(e)
    _bcast_error(comm, err)
    return val


def write_dataset(out, source, format="packed", encoding="raw", shards=1, force=False,
                  comm=None, progress=False, quality=90, manifest=None, desc=None,
                  **format_options):
    """Write the records of ``source`` (an object with ``records``, ``shape``,
    ``classes`` and ``block(lo, hi, encoding, quality) -> Block``) as a dataset in
    ``out``; collective over ``comm``. Returns the :class:`~hpcio.dataset.Dataset` on every
    rank."""
    fmt = get_format(format)
    if encoding not in pictures.ENCODINGS:
        raise HpcioError(f"unknown encoding {encoding!r} (choose from "
                         f"{', '.join(pictures.ENCODINGS)})", everywhere=True)
    records, shards = int(source.records), int(shards)
    if records < 1:
        raise HpcioError(f"--records must be at least 1 (got {records})", everywhere=True)
    if shards < 1 or shards > records:
        raise HpcioError(f"--shards must be between 1 and the record count {records} "
                         f"(got {shards})", everywhere=True)
    out = os.path.abspath(out)
    spec = Spec(format, encoding, tuple(source.shape), int(source.classes), records, shards,
                {k: v for k, v in format_options.items() if v is not None})
    keys = fmt.manifest_keys(spec)  # validates options on every rank
    targets = [t for k in range(shards) for t in fmt.targets(k, spec)]
    _rank0(comm, lambda: prepare_output(out, targets, force))
    if comm is not None and comm.Get_size() > 1:
        comm.Barrier()
    rank = comm.Get_rank() if comm is not None else 0
    size = comm.Get_size() if comm is not None else 1
    ranges = record_ranges(records, shards)
    bar = _Progress(comm, records, progress, desc or f"{format}/{encoding}")
    err, results = None, []
    try:
        results = _write_shards(out, source, spec, fmt, range(rank, shards, size), ranges,
                                bar, quality)
    except HpcioError as e:
        err = f"{e}" if size == 1 else f"{e} (rank {rank})"
    finally:
        bar.finish()
    if size > 1:
        gathered = comm.gather((err, results), root=0)
        if rank == 0:
            errs = [e for e, _ in gathered if e]
            err = errs[0] if errs else None
            results = [r for _, rs in gathered for r in rs]
    else:
        _bcast_error(None, err)

    def finish():
        if err:
            raise HpcioError(err)
        res, index = _assemble(results, spec)
        m = {"kind": KIND, "format": format, "encoding": encoding,
             "shape": list(spec.shape), "dtype": "uint8", "classes": spec.classes,
             "records": records}
        m.update(manifest or {})
        m.update({"generator": f"hpcio {__version__}", "index": INDEX,
                  "shards": [r.entry() for r in res]})
        if encoding == "jpeg":
            m["quality"] = int(quality)
        m.update(keys)
        Dataset(out, m, index).save()

    def finish_or_error():
        try:
            finish()
        except OSError as e:
            raise write_error(out, e)

    _rank0(comm, finish_or_error)
    return open_dataset(out, comm, check=False)


def generate(out, preset="mnist", records=None, format="packed", encoding="raw", shards=1,
             seed=0, force=False, comm=None, progress=False, shape=None, **format_options):
    """Write a synthetic ``preset`` dataset (``records`` of them, default the preset's
    count) to ``out``. Collective over ``comm`` (shard ``k`` on rank ``k % size``);
    returns the :class:`~hpcio.dataset.Dataset` on every rank. Format options: hdf5
    ``chunk_records``; ``quality`` sets the JPEG quality (default the preset's).
    ``shape`` (H, W, C) draws the pictures at another size than the preset's, e.g. raw
    records already at a model's input for offline-preprocessing runs."""
    p = get_preset(preset)
    if records is not None and int(records) < 1:
        raise HpcioError(f"--records must be at least 1 (got {records})", everywhere=True)
    if shape is not None:
        shape = tuple(int(v) for v in shape)
        if len(shape) != 3 or min(shape) < 1 or shape[2] not in (1, 3):
            raise HpcioError(f"shape must be H x W x C with C 1 or 3 (got {shape})",
                             everywhere=True)
    src = Synthetic(p, seed, records, shape)
    quality = format_options.pop("quality", None) or p.quality
    return write_dataset(out, src, format, encoding, shards, force, comm, progress,
                         quality, manifest={"preset": p.name, "seed": int(seed),
                                            "source": "generate"},
                         desc=f"{p.name} {format}/{encoding}", **format_options)


# ---- summary ------------------------------------------------------------------------------

def _size(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0


def summary(ds):
    """A few lines describing a dataset, from its manifest and index."""
    m, idx = ds.manifest, ds.index
    n = len(idx)
    ln = idx.length
    lab = idx.label[idx.label >= 0]
    counts = np.bincount(lab) if len(lab) else np.zeros(0, np.int64)
    counts = counts[counts > 0]  # classes present
    lines = [
        f"{ds.root}",
        f"  format {m['format']}, encoding {m['encoding']}, records {n:,}, shape "
        f"{'x'.join(map(str, m.get('shape', [])))} {m.get('dtype', 'uint8')}, classes "
        f"{m.get('classes')}",
        f"  bytes {_size(int(ln.sum()))} in records ({_size(int(idx.file_bytes.sum()))} in "
        f"{len(idx.files):,} files), record mean {ln.mean() if n else 0:.0f} B, "
        f"min {ln.min() if n else 0} B, max {ln.max() if n else 0} B",
        f"  shards {len(m.get('shards', []))}: " + ", ".join(
            f"{s['path']} [{s['records'][0]}, {s['records'][1]}) {_size(s['bytes'])}"
            for s in m.get("shards", [])[:4]) + (" ..." if len(m.get("shards", [])) > 4
                                                 else ""),
        f"  labels: {len(counts)} classes present, records per class min {counts.min() if len(counts) else 0}"
        f" max {counts.max() if len(counts) else 0}"
        + (f", {int((idx.label < 0).sum())} unlabelled" if (idx.label < 0).any() else ""),
        f"  made by {m.get('generator')} ({m.get('source', '?')}"
        + (f", preset {m['preset']}, seed {m['seed']}" if "preset" in m else "") + ")",
    ]
    return "\n".join(lines)


# ---- command line -----------------------------------------------------------------------------

COMMANDS = ("generate", "import", "index", "info")


def _comm():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _add_output(p):
    p.add_argument("--format", default="packed", choices=list(FORMATS),
                   help="storage format")
    p.add_argument("--shards", type=int, default=1,
                   help="number of shards (files/envs/folders); shard k is written by "
                        "rank k %% P under mpiexec -n P")
    p.add_argument("--chunk-records", type=int, default=None,
                   help="hdf5 only: chunked layout with this many records per chunk "
                        "(raw encoding; default contiguous)")
    p.add_argument("--quality", type=int, default=None,
                   help="JPEG quality (default: the preset's, 90 for imports)")
    p.add_argument("--force", action="store_true",
                   help="write into an existing directory; replaces only files an earlier "
                        "hpcio dataset there wrote, never anything else")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction,
                   default=None, help="progress bar on rank 0 (default: when stderr is a "
                                      "terminal)")


class _Help(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown where they say something (not for None/False), examples kept as
    written."""

    def _get_help_string(self, action):
        if action.default in (None, False) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def build_parser():
    ap = ArgumentParser(
        prog="python -m hpcio.datagen",
        description="Make hpcio datasets (manifest hpcio.json + record index index.npz "
                    "beside the data): synthetic presets, imports, indexes of datasets "
                    "made elsewhere. Runs in parallel under mpiexec -n P.",
        epilog="examples:\n"
               "  python -m hpcio.datagen generate /tmp/mnist --preset mnist --records 6000"
               " --format lmdb\n"
               "  mpiexec -n 4 python -m hpcio.datagen generate /scratch/inet --preset "
               "imagenet --format packed --shards 64\n"
               "  python -m hpcio.datagen import mnist ~/mnist /tmp/mnist-h5 --format hdf5 "
               "--encoding raw\n"
               "  python -m hpcio.datagen index /data/ilsvrc12_train_lmdb\n"
               "  python -m hpcio.datagen info /tmp/mnist",
        formatter_class=_Help)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    g = sub.add_parser("generate", formatter_class=_Help, help="write a synthetic dataset (the default command)",
                       description="Write a synthetic dataset of a preset: pictures drawn "
                                   "from (seed, record id), labels uniform over the classes.")
    g.add_argument("out", help="output dataset directory")
    g.add_argument("--preset", default="mnist", choices=list(PRESETS),
                   help="; ".join(f"{p.name}: {p.records:,} x {'x'.join(map(str, p.shape))},"
                                  f" {p.classes} classes, {p.encoding}"
                                  for p in PRESETS.values()))
    g.add_argument("--records", type=int, default=None,
                   help="number of records (default: the preset's)")
    g.add_argument("--encoding", default=None, choices=list(pictures.ENCODINGS),
                   help="record encoding (default: the preset's)")
    g.add_argument("--seed", type=int, default=0, help="seed of pictures and labels")
    g.add_argument("--shape", type=_shape, default=None, metavar="HxWxC",
                   help="picture size instead of the preset's, e.g. 227x227x3 raw records "
                        "for offline preprocessing (the model's input, no decode/resize)")
    _add_output(g)

    i = sub.add_parser("import", formatter_class=_Help, help="write a dataset from data you have (local files "
                                      "only, never a download)",
                       description="Import a folder of images in class sub-folders, MNIST "
                                   "idx files or CIFAR-10 batches into an hpcio dataset.")
    i.add_argument("kind", choices=["folder", "mnist", "cifar10"],
                   help="folder: SRC/<class>/<image>; mnist: SRC is the folder with "
                        "<split>-images-idx3-ubyte[.gz] and labels, or the images file; "
                        "cifar10: SRC is the folder with data_batch_1..5 / test_batch "
                        "(python pickles or .bin)")
    i.add_argument("src", help="source file or folder")
    i.add_argument("out", help="output dataset directory")
    i.add_argument("--split", default="train", choices=["train", "test"],
                   help="mnist/cifar10: which split to import")
    i.add_argument("--encoding", default=None,
                   choices=list(pictures.ENCODINGS) + ["keep"],
                   help="record encoding; 'keep' (folder only) stores the files' bytes "
                        "unchanged (default: keep for folder, png for mnist/cifar10)")
    _add_output(i)

    x = sub.add_parser("index", formatter_class=_Help, help="index a dataset made elsewhere (LMDB, HDF5, image "
                                     "folder) without touching its data",
                       description="Write hpcio.json + index.npz for an existing LMDB "
                                   "environment (e.g. Caffe convert_imageset), HDF5 file "
                                   "with images/labels datasets, or folder of images in "
                                   "class sub-folders. The data is only read.")
    x.add_argument("path", help="LMDB environment directory (or data.mdb), HDF5 file, or "
                                "image folder")
    x.add_argument("--out", default=None,
                   help="where to write the manifest and index (default: PATH if a "
                        "directory, else its parent)")
    x.add_argument("--images", default=None, help="hdf5: the images dataset (default: "
                                                  "images, else data)")
    x.add_argument("--labels", default=None, help="hdf5: the labels dataset (default: "
                                                  "labels, else label)")
    x.add_argument("--force", action="store_true",
                   help="replace an existing hpcio manifest and index there")

    f = sub.add_parser("info", formatter_class=_Help, help="print a dataset's summary",
                       description="Print a dataset's summary from its manifest and index.")
    f.add_argument("path", help="dataset directory")
    f.add_argument("--verify", action="store_true",
                   help="also check every shard's sha256 (reads all data)")
    return ap


def _shape(text):
    try:
        return tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not HxWxC: {text!r}")


def _progress_default(flag):
    return sys.stderr.isatty() if flag is None else flag


def _cmd_generate(a, comm):
    p = get_preset(a.preset)
    ds = generate(a.out, a.preset, a.records, a.format, a.encoding or p.encoding, a.shards,
                  a.seed, a.force, comm, _progress_default(a.progress),
                  shape=a.shape, chunk_records=a.chunk_records, quality=a.quality)
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_import(a, comm):
    from . import importers
    ds = importers.import_data(a.kind, a.src, a.out, format=a.format, encoding=a.encoding,
                               shards=a.shards, split=a.split, force=a.force, comm=comm,
                               progress=_progress_default(a.progress),
                               chunk_records=a.chunk_records, quality=a.quality)
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_index(a, comm):
    from . import importers
    ds = _rank0(comm, lambda: importers.index_path(a.path, out=a.out, images=a.images,
                                                   labels=a.labels, force=a.force))
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_info(a, comm):
    ds = open_dataset(a.path, comm)
    if a.verify:
        _rank0(comm, ds.verify_checksums)
    if comm.Get_rank() == 0:
        print(summary(ds) + ("\n  checksums: ok" if a.verify else ""), flush=True)


_RUN = {"generate": _cmd_generate, "import": _cmd_import, "index": _cmd_index,
        "info": _cmd_info}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "generate")  # `python -m hpcio.datagen OUT ...` generates
    a = build_parser().parse_args(argv)
    _RUN[a.command](a, _comm())
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.datagen"))
