"""DLIO workload configs as hpcio settings: MLPerf Storage's training workloads (3D U-Net on
npz, RetinaNet on JPEG, ResNet-50 and CosmoFlow on TFRecord), shipped as DLIO's and
mlcommons/storage's own files (``dlio/``, v3.0's b200 and mi355 among them, and its
whatif DLRM and Flux on parquet), or any DLIO
config given as a file. ``--accelerator`` picks a model's file for an accelerator
(``--workload unet3d --accelerator b200`` is ``unet3d_b200``).

A config says what the data are (``dataset``), how a framework reads them (``reader``), how
long a step computes (``train``) and the AU a run must keep (``metric.au``). :func:`load`
turns one into a :class:`Workload`; its :meth:`~Workload.train_options` and
:meth:`~Workload.datagen_options` are the defaults of ``hpcio.train --workload`` and
``hpcio.datagen generate --workload`` (flags given beside them win). Keys hpcio does not
model are listed in :attr:`Workload.unmodelled`, which the commands print in one line:
nothing a config asks for is dropped without saying so.
"""

import math
import os
from dataclasses import dataclass, field

import yaml

from ..errors import HpcioError, lookup

__all__ = ["WORKLOADS", "ACCELERATORS", "Workload", "load", "resolve", "MLPERF_AU",
           "FORMATS", "read_yaml", "Column"]

_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dlio")
#: the workloads shipped: name -> DLIO's config file
WORKLOADS = {f[:-5]: os.path.join(_HERE, f) for f in sorted(os.listdir(_HERE))
             if f.endswith(".yaml")}
#: the accelerators the shipped files are for (a name's part after its last ``_``)
ACCELERATORS = sorted({n.rsplit("_", 1)[1] for n in WORKLOADS if "_" in n})
#: MLPerf Storage's AU threshold per model, for configs without ``metric.au`` (DLIO's
#: v100 files): 90% for U-Net and ResNet-50, 70% for CosmoFlow (its rules, v1.0), 85% for
#: RetinaNet, 70% for DLRM and 90% for Flux (v3.0)
MLPERF_AU = {"unet3d": 90.0, "resnet50": 90.0, "cosmoflow": 70.0, "retinanet": 85.0,
             "dlrm": 70.0, "flux": 90.0}

# DLIO keys hpcio takes, as (section, key); all others are reported as not modelled
_MODELLED = {
    ("model", "name"), ("dataset", "format"), ("dataset", "num_files_train"),
    ("dataset", "num_samples_per_file"), ("dataset", "record_length_bytes"),
    ("dataset", "record_length_bytes_stdev"), ("dataset", "record_length"),
    ("dataset", "data_folder"), ("reader", "batch_size"),
    ("reader", "sample_shuffle"), ("reader", "file_shuffle"), ("reader", "prefetch_size"),
    ("train", "epochs"), ("train", "computation_time"), ("train", "computation_time_stdev"),
    ("train", "seed"), ("train", "total_training_steps"), ("metric", "au"),
    ("workflow", "train"), ("workflow", "generate_data"),
}
#: a DLIO format -> (hpcio's format, record encoding, its option for samples per file
#: within a shard, if it has one: else a shard is a file)
FORMATS = {"npz": ("npz", "raw", "samples_per_file"), "tfrecord": ("tfrecord", "raw", None),
           "hdf5": ("hdf5", "raw", None), "jpeg": ("images", "jpeg", None),
           "png": ("images", "png", None), "parquet": ("parquet", "raw", None)}
#: dataset.parquet keys hpcio takes: the columns written (and read) and the row group
_PARQUET = {"columns", "row_group_size", "read_mode"}


@dataclass(frozen=True)
class Column:
    """One column of a parquet workload (``dataset.parquet.columns``)."""

    name: str
    dtype: str
    size: int = 1      # values per row
    read: bool = True  # read by the loader (DLIO reads only ``read: true`` columns)

    @property
    def nbytes(self):
        import numpy as np  # numpy: not at the top, where hpcio --help reads this module
        return np.dtype(self.dtype).itemsize * self.size


@dataclass(frozen=True)
class Workload:
    """One DLIO workload config, as far as hpcio models it."""

    name: str
    source: str                  # the config file read
    model: str
    format: str
    files: int
    samples_per_file: int
    record_bytes: int            # DLIO's record_length_bytes (the mean)
    batch: int
    epochs: int
    compute_time: float          # seconds per step
    au_threshold: float = None   # percent (DLIO's fraction x 100); None: the config names none
    compute_std: float = 0.0
    prefetch: int = None
    shuffle: str = "none"
    seed: int = None
    steps: int = None
    data_folder: str = None
    record_stdev: float = 0.0    # DLIO's record_length_bytes_stdev
    unmodelled: tuple = field(default_factory=tuple)
    columns: tuple = ()          # parquet: the row's Columns
    row_group: int = None        # parquet: rows per row group

    @property
    def record_columns(self):
        """The parquet columns a record is made of: those read (all when none is)."""
        read = [c.name for c in self.columns if c.read]
        return read or [c.name for c in self.columns]

    @property
    def row_bytes(self):
        """The bytes of a parquet row, all its columns."""
        return sum(c.nbytes for c in self.columns)

    @property
    def records(self):
        return self.files * self.samples_per_file

    def shape(self):
        """A picture shape HxWx1 whose raw bytes come to ``record_bytes`` at most, as DLIO's
        generators size a record (a square of side sqrt(record_length_bytes))."""
        side = max(1, math.isqrt(int(self.record_bytes)))
        return f"{side}x{side}x1"

    def train_options(self):
        """``hpcio.train`` option defaults (dest names) that run this workload: emulated
        compute of the config's time per step, the batch's bytes handed over as read (no
        preprocessing, as DLIO), a barrier but no gradients exchanged (DLIO's step: the
        emulate model's default, so ``--exchange-model``/``--exchange-bytes`` may add one)."""
        o = {"model": "emulate", "compute_time": self.compute_time, "batch": self.batch,
             "epochs": self.epochs, "shuffle": self.shuffle, "preprocess": "off",
             "au_threshold": self.au_threshold}
        if self.shuffle == "chunk":  # DLIO's file shuffle: whole files, samples in order
            o.update(block=self.samples_per_file, window=1)
        if self.compute_std > 0:
            o.update(compute_dist="normal", compute_std=self.compute_std)
        for k in ("seed", "steps", "prefetch"):
            if getattr(self, k) is not None:
                o[k] = getattr(self, k)
        if self.data_folder:
            o["data"] = self.data_folder
        return o

    def datagen_options(self, records=None):
        """``hpcio.datagen generate`` options (dest names) that make its dataset, or
        ``records`` of it (scaled down): shards (files) of ``samples_per_file`` records
        of ``record_bytes`` each."""
        fmt, encoding, per_file = FORMATS[self.format]
        records = records or self.records
        o = {"format": fmt, "records": records, "encoding": encoding,
             "shards": -(-records // self.samples_per_file), "shape": self.shape()}
        if per_file:
            o["format_option"] = [f"{per_file}={self.samples_per_file}"]
        return o

    def unmodelled_line(self, prog):
        """The one line that lists what hpcio leaves out of this workload, or None."""
        if not self.unmodelled:
            return None
        return (f"{prog}: workload {self.name}: not modelled, run without: "
                f"{', '.join(self.unmodelled)}")


def read_yaml(path, what):
    """The YAML document at ``path``; an unreadable file or bad YAML is one line that
    starts with ``what`` (the option or the kind of file: ``--model x.yaml``)."""
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise HpcioError(f"{what}: {e.strerror}", everywhere=True)
    except yaml.YAMLError as e:
        raise HpcioError(f"{what} is not YAML: {str(e).splitlines()[0]}", everywhere=True)


def resolve(spec, accelerator=None):
    """The workload name ``spec`` and ``accelerator`` name together: a model
    (``unet3d``) and an accelerator choose its shipped file (``unet3d_b200``); a full
    name or a file is kept, a full name for another accelerator refused."""
    if not accelerator:
        return spec
    lookup(ACCELERATORS, accelerator, "accelerator")
    if spec in WORKLOADS:
        if spec.rsplit("_", 1)[-1] != accelerator:
            raise HpcioError(f"--workload {spec} is for {spec.rsplit('_', 1)[-1]}, not "
                             f"--accelerator {accelerator}", everywhere=True)
        return spec
    if f"{spec}_{accelerator}" in WORKLOADS:
        return f"{spec}_{accelerator}"
    have = [n for n in WORKLOADS if n.startswith(spec + "_")]
    if have:
        raise HpcioError(f"workload {spec} has no file for {accelerator} (shipped: "
                         f"{', '.join(have)})", everywhere=True)
    return spec


def load(spec, accelerator=None):
    """The workload ``spec`` names: a shipped name (:data:`WORKLOADS`) or a DLIO config
    file, or a model with ``accelerator`` (:func:`resolve`). Bad input is one line: no
    such name, not YAML, no dataset section, a format hpcio has not, a value of the wrong
    type."""
    spec = resolve(spec, accelerator)
    if spec in WORKLOADS:
        path, name = WORKLOADS[spec], spec
    elif os.path.isfile(spec) or spec.endswith((".yaml", ".yml")) or os.sep in spec:
        path, name = spec, os.path.splitext(os.path.basename(spec))[0]
    else:
        lookup(WORKLOADS, spec, "workload")       # raises, naming the shipped ones
    cfg = read_yaml(path, f"workload {path}")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("dataset"), dict):
        raise HpcioError(f"workload {path}: no dataset section (a DLIO workload config "
                         f"has dataset, reader and train sections)", everywhere=True)
    return _workload(name, path, cfg)


def _workload(name, path, cfg):
    def get(section, key, kind, default=None, least=None):
        v = (cfg.get(section) or {}).get(key, default)
        if v is None:
            return None
        try:
            v = kind(v)
        except (TypeError, ValueError):
            raise HpcioError(f"workload {path}: {section}.{key}: {v!r} is not a "
                             f"{kind.__name__}", everywhere=True)
        if least is not None and v < least:
            raise HpcioError(f"workload {path}: {section}.{key} must be >= {least}, not "
                             f"{v}", everywhere=True)
        return v

    for s in ("model", "reader", "train", "metric", "workflow", "checkpoint", "evaluation"):
        if cfg.get(s) is not None and not isinstance(cfg[s], dict):
            raise HpcioError(f"workload {path}: {s} must be a section (a mapping)",
                             everywhere=True)
    fmt = get("dataset", "format", str)
    if fmt not in FORMATS:
        raise HpcioError(f"workload {path}: dataset.format {fmt!r}: hpcio runs DLIO's "
                         f"{', '.join(FORMATS)}", everywhere=True)
    if get("workflow", "train", bool, True) is False:
        raise HpcioError(f"workload {path}: workflow.train is false: nothing to run",
                         everywhere=True)
    model = get("model", "name", str) or name
    au = get("metric", "au", float)
    if au is None:
        au = MLPERF_AU.get(model)
    elif not 0 < au <= 1:
        raise HpcioError(f"workload {path}: metric.au is a fraction (0.9 for 90%), not "
                         f"{au}", everywhere=True)
    else:
        au = 100.0 * au  # hpcio's unit: percent, as AU is printed
    on = {"seed", "random", "on", "true"}
    by_file, by_sample = (str(get("reader", k, str, "off")).lower() in on for k in
                          ("file_shuffle", "sample_shuffle"))
    seed = get("train", "seed", int, least=0)
    columns, row_group, pq_left = _parquet(path, cfg["dataset"])
    per_file = get("dataset", "num_samples_per_file", int, 1, least=1)
    left = [f"{s}.{k}" for s, sec in cfg.items() if isinstance(sec, dict)
            for k in sec if (s, k) not in _MODELLED and (s, k) != ("dataset", "parquet")]
    left += pq_left
    if str(cfg["dataset"].get("compression", "none")).lower() == "none" and \
            "dataset.compression" in left:  # none is what hpcio writes
        left.remove("dataset.compression")
    left += [s for s, sec in cfg.items() if not isinstance(sec, dict)]
    return Workload(
        name=name, source=os.path.abspath(path), model=model, format=fmt,
        files=get("dataset", "num_files_train", int, least=1) or 1,
        samples_per_file=per_file,
        record_bytes=int(get("dataset", "record_length_bytes", float, least=1) or
                         get("dataset", "record_length", float, least=1) or
                         sum(c.nbytes for c in columns) or 65536),
        batch=get("reader", "batch_size", int, 1, least=1),
        epochs=get("train", "epochs", int, 1, least=1),
        compute_time=get("train", "computation_time", float, 0.0, least=0),
        compute_std=get("train", "computation_time_stdev", float, 0.0, least=0),
        au_threshold=au,
        prefetch=get("reader", "prefetch_size", int, least=0),
        # DLIO's seed or random: every epoch in a new order. Its file shuffle alone
        # reorders whole files and reads each file's samples in order: hpcio's chunk
        # shuffle of blocks of a file's records, not mixed (with one sample per file,
        # the same as a global shuffle)
        shuffle="global" if by_sample or (by_file and per_file == 1) else
        "chunk" if by_file else "none",
        seed=seed, steps=get("train", "total_training_steps", int, least=1),
        data_folder=get("dataset", "data_folder", str),
        record_stdev=get("dataset", "record_length_bytes_stdev", float, 0.0, least=0),
        unmodelled=tuple(sorted(left)), columns=columns, row_group=row_group)


def _parquet(path, dataset):
    """(columns, row group, keys not modelled) of ``dataset.parquet``; a column without a
    name or with a dtype NumPy does not know is one line."""
    import numpy as np  # numpy: not at the top, where hpcio --help reads this module
    sec = dataset.get("parquet")
    if sec is None:
        return (), None, []
    if not isinstance(sec, dict):
        raise HpcioError(f"workload {path}: dataset.parquet must be a mapping",
                         everywhere=True)
    cols = []
    for i, c in enumerate(sec.get("columns") or []):
        try:
            col = Column(str(c["name"]), str(c.get("dtype", "float32")),
                         int(c.get("size", 1)), bool(c.get("read", True)))
            np.dtype(col.dtype)
            if col.size < 1:
                raise ValueError
        except (TypeError, KeyError, ValueError):
            raise HpcioError(f"workload {path}: dataset.parquet.columns[{i}]: {c!r} is not "
                             f"a column (name, dtype, size >= 1, read)", everywhere=True)
        cols.append(col)
    rg = sec.get("row_group_size")
    if rg is not None:
        if not isinstance(rg, int) or rg < 1:
            raise HpcioError(f"workload {path}: dataset.parquet.row_group_size must be "
                             f"an integer >= 1, not {rg!r}", everywhere=True)
    left = [f"dataset.parquet.{k}" for k in sec if k not in _PARQUET]
    if str(sec.get("read_mode", "row_group")) != "row_group":
        left.append("dataset.parquet.read_mode")
    return tuple(cols), rg, left
