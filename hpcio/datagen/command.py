"""``python -m hpcio.datagen``: make datasets (synthetic presets, imports, indexes of data
made elsewhere) and describe them."""

import argparse
import sys

import numpy as np

from ..cli import ArgumentParser, ExamplesFormatter, integer, parse_key_values, shape
from ..data import pictures
from ..data.dataset import NO_CRC, open_dataset
from ..data.presets import PRESETS, get_preset
from ..errors import HpcioError, guard
from ..formats import FORMATS, open_native
from ..mpiutil import on_root
from ..workloads import ACCELERATORS
from ..workloads import load as load_workload
from . import dlio, importers
from .write import dtypes_of, generate

__all__ = ["build_parser", "main", "summary", "COMMANDS"]


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
        f"{'x'.join(map(str, m.get('shape', [])))} {m.get('dtype', 'uint8')}"
        + (f" (stored {m.get('layout', 'hwc')}, pixel x {m['scale']})" if "scale" in m
           else "") + ", classes "
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
        f"  made by {m.get('generator')} ({m.get('source', '?')}" + (
            f" for workload {m['workload']}: DLIO's files, folders and record sizes, "
            f"random bytes, seed {m['seed']}" if "dlio" in m else
            f" for workload {m['workload']}: its record size and files, "
            + ("random bytes" if m.get("content") == "random bytes" else
               f"pixels drawn as preset {m.get('preset')}'s") + f", seed {m['seed']}"
            if "workload" in m else
            f", preset {m['preset']}, seed {m['seed']}" if "preset" in m else "") + ")",
    ]
    return "\n".join(lines)


# ---- command line -----------------------------------------------------------------------------

COMMANDS = ("generate", "import", "index", "info")
SEED_MAX = 2**63 - 1  # numpy seeds pictures from (seed, record id) as 64-bit words
DTYPES = list(dict.fromkeys(d for m in FORMATS.values() for d in dtypes_of(m)))


def _comm():
    from mpi4py import MPI  # mpi4py: importing it starts MPI
    return MPI.COMM_WORLD


def _add_output(p):
    p.add_argument("--format", default=None, choices=list(FORMATS),
                   help="storage format (default: packed)")
    p.add_argument("--shards", type=integer(1), default=None,
                   help="number of shards (files/envs/folders); shard k is written by "
                        "rank k %% P under mpiexec -n P (default: 1)")
    p.add_argument("--chunk-records", type=integer(1), default=None,
                   help="hdf5 only: chunked layout with this many records per chunk "
                        "(raw encoding; default contiguous)")
    p.add_argument("--format-option", action="append", default=[], metavar="KEY=VALUE",
                   help="a format option, repeatable; " + "; ".join(
                       f"{n}: " + ", ".join(f"{k}={'|'.join(c)}"
                                            for k, c in m.info.options.items())
                       for n, m in FORMATS.items() if m.info.options)
                   + " (the first of each is the default)")
    p.add_argument("--dtype", default="uint8", choices=DTYPES,
                   help="element type of raw records: float32 is what Caffe's HDF5 data "
                        "layer reads (hdf5 only: N x C x H x W pixels x 0.00390625 in "
                        "datasets data and label; implies --encoding raw)")
    p.add_argument("--quality", type=integer(1, 100), default=None,
                   help="JPEG quality (default: the preset's, 90 for imports)")
    p.add_argument("--force", action="store_true",
                   help="write into an existing directory; replaces only files an earlier "
                        "hpcio dataset there wrote, never anything else")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction,
                   default=None, help="progress bar on rank 0's stderr (default: a bar on a "
                                      "terminal, else a plain line every 20 s)")


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
               "imagenet --records 100000 --format packed --shards 64\n"
               "  python -m hpcio.datagen import mnist ~/mnist /tmp/mnist-h5 --format hdf5 "
               "--encoding raw\n"
               "  python -m hpcio.datagen generate /tmp/mnist-ldb --format leveldb "
               "--format-option compression=snappy\n"
               "  python -m hpcio.datagen index /data/ilsvrc12_train_lmdb\n"
               "  python -m hpcio.datagen index --update /tmp/old-dataset\n"
               "  python -m hpcio.datagen info /tmp/mnist",
        formatter_class=ExamplesFormatter)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    sub.required = True

    g = sub.add_parser("generate", formatter_class=ExamplesFormatter, help="write a synthetic dataset (the default command)",
                       description="Write a synthetic dataset of a preset: pictures drawn "
                                   "from (seed, record id), labels uniform over the classes.")
    g.add_argument("out", help="output dataset directory")
    g.add_argument("--preset", default="mnist", choices=list(PRESETS),
                   help="; ".join(f"{p.name}: {p.records:,} x {'x'.join(map(str, p.shape))},"
                                  f" {p.classes} classes, {p.encoding}"
                                  for p in PRESETS.values()))
    g.add_argument("--records", type=integer(1), default=None,
                   help="number of records (default: the preset's)")
    g.add_argument("--encoding", default=None, choices=list(pictures.ENCODINGS),
                   help="record encoding (default: the preset's)")
    g.add_argument("--seed", type=integer(0, SEED_MAX), default=0, help="seed of pictures and labels")
    g.add_argument("--shape", type=shape, default=None, metavar="HxWxC",
                   help="picture size instead of the preset's, e.g. 227x227x3 raw records "
                        "for offline preprocessing (the model's input, no decode/resize)")
    g.add_argument("--workload", metavar="NAME|FILE.yaml",
                   help="the dataset of a DLIO workload config (see hpcio.train "
                        "--workload): npz and JPEG workloads as DLIO's generator makes "
                        "them (train/img_<i>_of_<n>.<format>, DLIO's record sizes, random "
                        "bytes); others in hpcio's layout, its format, record size and "
                        "files of its samples per file, random bytes; --records scales "
                        "it down, output flags (--format, --shape, ...) make hpcio's "
                        "layout instead")
    g.add_argument("--accelerator", metavar="NAME",
                   help="with --workload MODEL: its file for this accelerator ("
                        f"{', '.join(ACCELERATORS)})")
    _add_output(g)

    i = sub.add_parser("import", formatter_class=ExamplesFormatter, help="write a dataset from data you have (local files "
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

    _add_index(sub)

    f = sub.add_parser("info", formatter_class=ExamplesFormatter, help="print a dataset's summary",
                       description="Print a dataset's summary from its manifest and index.")
    f.add_argument("path", help="dataset directory")
    f.add_argument("--verify", action="store_true",
                   help="also check every shard's sha256 and every record's CRC32C "
                        "(reads all data)")
    return ap


def _add_index(sub):
    """The ``index`` command's parser (an index of data made elsewhere)."""
    x = sub.add_parser("index", formatter_class=ExamplesFormatter, help="index a dataset made elsewhere (LMDB, LevelDB, HDF5, "
                                     "npz, TFRecord, parquet, image folder) without "
                                     "touching its data",
                       description="Write hpcio.json + index.npz for an existing LMDB "
                                   "environment or LevelDB database (e.g. Caffe "
                                   "convert_imageset), HDF5 file with images/labels "
                                   "datasets, .npz, TFRecord or parquet files (DLIO's), or "
                                   "folder of images in class sub-folders. The data is "
                                   "only read.")
    x.add_argument("path", help="LMDB environment directory (or data.mdb), LevelDB "
                                "directory, HDF5 file, .npz, .tfrecord or .parquet file or "
                                "folder of them, or image folder")
    x.add_argument("--out", default=None,
                   help="where to write the manifest and index (default: PATH if a "
                        "directory, else its parent)")
    x.add_argument("--images", default=None, help="hdf5: the images dataset (default: "
                                                  "images, else data); npz: the samples' "
                                                  "member (default: x); tfrecord: the "
                                                  "Examples' image bytes feature (default: "
                                                  "image, else image/encoded); parquet: the "
                                                  "record's column(s), COL[,COL...] "
                                                  "(default: the binary column)")
    x.add_argument("--labels", default=None, help="hdf5: the labels dataset (default: "
                                                  "labels, else label); npz: the labels' "
                                                  "member (default: y); tfrecord: the int64 "
                                                  "label feature (default: label, else "
                                                  "image/class/label); parquet: the labels' "
                                                  "column (default: label)")
    x.add_argument("--format-option", action="append", default=[],
                   metavar="image_key=K,label_key=K",
                   help="the same as --images K and --labels K (other formats' tools name "
                        "TFRecord feature keys so)")
    x.add_argument("--force", action="store_true",
                   help="replace an existing hpcio manifest and index there")
    x.add_argument("--update", action="store_true",
                   help="PATH is an hpcio dataset indexed before hpcio recorded record "
                        "checksums: add them (reads every record once) and the index's "
                        "sha256 to it; bytes that changed since they were recorded are "
                        "refused")
    x.add_argument("--accept-changed", action="store_true",
                   help="with --update: the change on disk is wanted; record its CRCs "
                        "and sha256, and the change in the manifest's history")


def _progress_default(flag):
    """--progress: a bar; --no-progress: none; neither: a bar on a terminal, else lines."""
    return "auto" if flag is None else flag


def _format_options(a):
    """``--format-option`` as a dict, each one an option of the chosen format."""
    opts = parse_key_values(a.format_option, "--format-option")
    have = FORMATS[a.format].info.options
    for k in opts:
        if k not in have:
            raise HpcioError(f"--format-option {k}: the {a.format} format has no such option"
                             + (f" (it has {', '.join(have)})" if have else ""),
                             everywhere=True)
    return opts


#: ``index --format-option`` key -> the flag it stands for
_INDEX_KEYS = {"image_key": "images", "label_key": "labels"}


def _index_keys(a):
    """(images, labels) of ``index``: its flags, or ``--format-option image_key=K,
    label_key=K`` (items split at commas too)."""
    items = [x for it in a.format_option for x in it.split(",") if x.strip()]
    got = {"images": a.images, "labels": a.labels}
    for k, v in parse_key_values(items, "--format-option").items():
        flag = _INDEX_KEYS.get(k)
        if flag is None:
            raise HpcioError(f"--format-option {k}: index takes "
                             f"{' and '.join(_INDEX_KEYS)} only", everywhere=True)
        if got[flag] not in (None, v):
            raise HpcioError(f"--format-option {k}={v} and --{flag} {got[flag]} disagree",
                             everywhere=True)
        got[flag] = v
    return got["images"], got["labels"]


def _apply_workload(a, comm):
    """The workload's dataset settings where no flag gave one; what it asks that hpcio
    does not make, in one line."""
    w = load_workload(a.workload, a.accelerator)
    a.workload = w.name  # what the manifest records
    mine = ("format", "shards", "shape", "encoding", "chunk_records", "quality")
    if w.format in dlio.FORMATS and not a.format_option and a.dtype == "uint8" and \
            all(getattr(a, k) is None for k in mine):
        a.dlio = w  # DLIO's own layout: no hpcio output flag asks for another
    o = w.datagen_options(a.records)
    for k, v in o.items():
        if k == "format_option":        # the workload's format's; the user's own win
            given = {x.split("=", 1)[0] for x in a.format_option}
            if a.format == o["format"]:
                a.format_option += [x for x in v if x.split("=", 1)[0] not in given]
        elif getattr(a, k) is None:
            setattr(a, k, shape(v) if k == "shape" else v)
    if comm.Get_rank() == 0:
        line = w.unmodelled_line("hpcio.datagen")
        if line:
            print(line, file=sys.stderr, flush=True)


def _cmd_generate(a, comm):
    if getattr(a, "dlio", None):
        ds = dlio.generate(a.out, a.dlio, a.records, a.seed, a.force, comm,
                           _progress_default(a.progress))
        if comm.Get_rank() == 0:
            print(summary(ds), flush=True)
        return
    p = get_preset(a.preset)
    raw = "raw" if a.dtype != "uint8" else None  # other element types are pixels
    ds = generate(a.out, a.preset, a.records, a.format, a.encoding or raw or p.encoding,
                  a.shards, a.seed, a.force, comm, _progress_default(a.progress),
                  shape=a.shape, chunk_records=a.chunk_records, quality=a.quality,
                  dtype=a.dtype, workload=a.workload, **_format_options(a))
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_import(a, comm):
    raw = "raw" if a.dtype != "uint8" else None  # other element types are pixels
    ds = importers.import_data(a.kind, a.src, a.out, format=a.format,
                               encoding=a.encoding or raw, shards=a.shards,
                               split=a.split, force=a.force, comm=comm,
                               progress=_progress_default(a.progress),
                               chunk_records=a.chunk_records, quality=a.quality,
                               dtype=a.dtype, **_format_options(a))
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_index(a, comm):
    if a.accept_changed and not a.update:
        raise HpcioError("--accept-changed goes with --update", everywhere=True)
    if a.update:
        ds = on_root(comm, lambda: importers.update_index(a.path, a.accept_changed))
    else:
        images, labels = _index_keys(a)
        ds = on_root(comm, lambda: importers.index_path(a.path, out=a.out, images=images,
                                                       labels=labels, force=a.force))
    if comm.Get_rank() == 0:
        print(summary(ds), flush=True)


def _cmd_info(a, comm):
    ds = open_dataset(a.path, comm)
    crc = ds.index.crc is not None
    if a.verify:
        on_root(comm, lambda: (ds.verify_checksums(), crc and ds.verify_records(open_native)))
    if comm.Get_rank() == 0:
        if not crc:
            print(NO_CRC.format(root=ds.root), file=sys.stderr, flush=True)
        print(summary(ds) + ("\n  checksums: ok (shards' sha256" + (
            f", {ds.records:,} records' CRC32C)" if crc else ")") if a.verify else ""),
            flush=True)


_RUN = {"generate": _cmd_generate, "import": _cmd_import, "index": _cmd_index,
        "info": _cmd_info}


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS and not argv[0].startswith("-"):
        argv.insert(0, "generate")  # `python -m hpcio.datagen OUT ...` generates
    a = build_parser().parse_args(argv)
    if getattr(a, "accelerator", None) and not a.workload:
        raise HpcioError("--accelerator goes with --workload MODEL", everywhere=True)
    if getattr(a, "workload", None):
        _apply_workload(a, _comm())
    if hasattr(a, "format"):
        a.format = a.format or "packed"
        a.shards = a.shards or 1
    _RUN[a.command](a, _comm())
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="hpcio.datagen"))
