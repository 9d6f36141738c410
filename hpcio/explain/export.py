"""One row per run, named as MLPerf Storage's report and DLIO's summary.json name them, for
``python -m hpcio.results export``: so hpcio's runs sit in the same sheets as theirs.

Every figure is read from the run's own files, never recomputed: the measured ones from
``summary.json`` (:mod:`hpcio.explain.summary`), the settings from ``config.yaml``, the
machine and the workload hash from ``provenance.json``. ``COLUMNS`` defines each column.

Names and where they differ from DLIO's (``dlio_benchmark/utils/statscounter.py``):
``train_au_mean_percentage`` is hpcio's ``au_percent`` (compute / wall per rank, each
epoch's first step left out as MLPerf Storage does, mean over ranks, over all epochs; DLIO
averages per-epoch values); ``train_io_mean_MB_per_second`` is MiB/s of record bytes
delivered (DLIO's is samples/s x record length / 2**20: MiB/s too, despite the name).

``rules``: the MLPerf Storage rules hpcio can check from a run; ``RULES`` lists them.
"pass", or "fail: " and the reasons. Not checked, because a run does not show them: the
seed changing between runs, stable storage, the data loader being MLPerf's own.
``category`` is mlpstorage's verdict: "open" when every checked rule holds, else "invalid";
never "closed", which needs MLPerf's own benchmark code (DLIO): hpcio's readers stand in
for DLIO's data loader (``reader.data_loader``, an OPEN tunable) at best.

``settings``: a ``--workload`` run's settings as mlpstorage's training checker
(``mlpstorage/rules.py`` ``TrainingRulesChecker.check_allowed_params``) judges DLIO
overrides: each setting of ``SETTINGS`` that differs from the workload's is a CLOSED
tunable, an OPEN one, or neither, which makes the run invalid (rule ``settings``).

Repeats: the runs of one workload (same ``workload_hash``), in the order given, are a
warm-up and measured runs (``repeat``); the published figures are the means of the first
5 measured runs (mlpstorage's rule: 1 warm-up + 5, the mean of the 5).
"""

import csv
import io
import json
import os

import yaml

from ..errors import HpcioError
from ..fsutil import atomic_write, jsonable
from ..measure import schema
from ..measure.rundir import RunDir
from ..workloads import WORKLOADS, load as load_workload

__all__ = ["COLUMNS", "RULES", "AU_THRESHOLD", "REPEATS", "SETTINGS", "run_row",
           "export_rows", "write_rows", "output_format", "csv_cell", "from_csv", "FORMATS",
           "is_export", "settings_changed", "workload_config"]

AU_THRESHOLD = 90.0  # % (MLPerf Storage: 3D U-Net and ResNet-50 90, CosmoFlow 70)
REPEATS = 6  # a warm-up run + 5 measured runs (guidelines 6.6, 3: "benchmark result")
MEMORY_MULTIPLE = 5  # dataset >= 5 x the sum of the hosts' memory (guidelines 6.6, 7)
MIN_STEPS = 500  # steps per epoch at least (guidelines 7)

# name, type, definition (source: file and field)
COLUMNS = [
    ("run_dir", str, "the run directory (absolute path)"),
    ("benchmark_type", str, "always 'training' (mlpstorage's benchmark type)"),
    ("model", str, "config.yaml model (emulate: a timed sleep, as DLIO's)"),
    ("workload", str, "config.yaml workload: the DLIO workload config run (--workload)"),
    ("workload_hash", str, "provenance.json workload_hash: sha256 of the workload's "
                           "settings (hpcio.measure.provenance.WORKLOAD_KEYS)"),
    ("num_accelerators", int, "summary.json ranks (DLIO's name: one rank per accelerator)"),
    ("num_hosts", int, "summary.json nodes"),
    ("epochs", int, "summary.json epochs_run"),
    ("batch_size", int, "summary.json batch (per rank)"),
    ("steps_per_epoch", int, "summary.json steps_per_epoch (per rank)"),
    ("train_au_mean_percentage", float, "summary.json metrics.au_percent: AU %, each "
                                        "epoch's first step left out"),
    ("train_au_percentage", list, "summary.json metrics.per_epoch[].au_percent, per epoch"),
    ("au_threshold_percent", float, "the AU a run must keep: export's --au-threshold, else "
                                    "the run's own (summary.json au_threshold_percent: its "
                                    "workload's), else 90"),
    ("train_au_meet_expectation", str, "'success' when train_au_mean_percentage >= "
                                       "au_threshold_percent, else 'fail'"),
    ("train_throughput_mean_samples_per_second", float,
     "summary.json metrics.samples_per_s: records / wall summed over ranks, every step"),
    ("train_io_mean_MB_per_second", float, "summary.json metrics.mib_per_s: MiB of record "
                                           "bytes / wall summed over ranks, every step"),
    ("host_memory_GB", list, "provenance.json hosts[].mem_total_bytes / 2**30, per host"),
    ("dataset_bytes", int, "config.yaml dataset_bytes: the records' bytes"),
    ("reader", str, "config.yaml reader"),
    ("format", str, "config.yaml dataset.format"),
    ("cache", str, "config.yaml cache (cold, warm, asis)"),
    ("au_percent_all_steps", float, "summary.json metrics.au_percent_all_steps: AU % over "
                                    "every step"),
    ("stall_percent", float, "summary.json metrics.stall_percent: own wait for data, % of "
                             "wall"),
    ("fetch_percent", float, "summary.json metrics.fetch_percent"),
    ("epoch_s_mean", float, "summary.json metrics.epoch_s_mean: an epoch's wall, slowest "
                            "rank, mean over epochs"),
    ("checkpoint_mode", str, "summary.json checkpoints.mode: a --checkpoint-workload run's "
     "sync or async checkpoints (empty otherwise)"),
    ("checkpoint_writer", str, "summary.json checkpoints.writer (coordinated, dcp, "
     "torch_save)"),
    ("checkpoint_stall_s_mean", float, "summary.json checkpoints.stall_s_mean: the step's "
     "ckpt component per checkpoint (slowest rank), mean over checkpoints"),
    ("checkpoint_write_GiB_per_s_mean", float, "summary.json "
     "checkpoints.write_GiB_per_s_mean: checkpoint GiB / the slowest rank's write, mean of "
     "the per-checkpoint rates (as MLPerf Storage publishes a checkpoint's)"),
    ("cut_short", bool, "summary.json cut_short (or no summary.json: true)"),
    ("data_fs_type", str, "provenance.json data_fs_type"),
    ("hpcio_version", str, "provenance.json hpcio_version"),
    ("git_commit", str, "provenance.json git.commit (hpcio's checkout), empty if none"),
    ("git_dirty", bool, "provenance.json git.dirty: uncommitted changes to tracked files"),
    ("settings", str, "a --workload run's settings against the workload's (SETTINGS): "
                      "'closed-eligible settings', 'open settings: ...' or 'invalid: ...'; "
                      "empty for a run without --workload"),
    ("min_samples", int, "records the dataset must hold: max(500 steps x batch x "
                         "accelerators, 5 x the hosts' memory / record length)"),
    ("potential_caching", list, "per host, 1 if its memory exceeds its share of the "
                                "dataset (dataset_bytes / hosts): hpcio's reading of MLPerf Storage's flag"),
    ("repeat", str, "'warm-up' for the first run of its workload_hash here, else the "
                    "measured run's number (1, 2, ...)"),
    ("published_throughput_samples_per_second", float,
     "the mean of train_throughput_mean_samples_per_second over measured runs 1-5 of this "
     "workload_hash (empty until there are 5)"),
    ("published_io_MB_per_second", float, "the same mean of train_io_mean_MB_per_second"),
    ("category", str, "'open' if every checked rule holds, else 'invalid' (never 'closed')"),
    ("rules", str, "'pass', or 'fail: ' and each failed rule's reason ('; ' between)"),
]
NAMES = [c[0] for c in COLUMNS]
_TYPES = {c[0]: c[1] for c in COLUMNS}

RULES = [  # name, what (MLPerf Storage v2.0 submission guidelines; v3.0 Rules.md)
    ("complete", "the run finished every epoch it was asked for and wrote its summary"),
    ("au", "AU (first step of each epoch left out) at or above the threshold (section 4)"),
    ("dataset_size", f"files at least max({MIN_STEPS} steps x batch x accelerators, "
                     f"{MEMORY_MULTIPLE} x the sum of the hosts' memory / file size), as "
                     f"mlpstorage's calculate_training_data_size (v3.0 3.1.2)"),
    ("settings", "a --workload run changes no setting of its workload but the CLOSED and "
                 "OPEN tunables (v3.0 3.6.2, 3.6.3; SETTINGS)"),
    ("steps", f"at least {MIN_STEPS} steps per epoch (7)"),
    ("ranks_per_host", "every host runs the same number of ranks (9)"),
    ("no_cache", "not run with --cache warm (6.6: training data not cached on the hosts)"),
    ("repeats", f"the export holds at least {REPEATS} runs of this workload (same "
                f"workload_hash): a warm-up and 5 measured runs (6.6, 3)"),
]


CLOSED, OPEN = "a CLOSED tunable", "an OPEN tunable"
DLIO_PREFETCH = 2  # DLIO's reader.prefetch_size when a config names none


def _records_per_file(c):
    d = c.get("dataset") or {}
    return d["records"] // d["shards"] if d.get("records") and d.get("shards") else None


# DLIO key, what hpcio calls it, the run's value (config.yaml), the workload's value
# (Workload, its YAML), and what mlpstorage allows (None: neither CLOSED nor OPEN)
SETTINGS = [
    ("reader.batch_size", "batch", lambda c: c.get("batch"), lambda w, y: w.batch, None),
    ("train.epochs", "epochs", lambda c: c.get("epochs"), lambda w, y: w.epochs, None),
    ("train.computation_time", "compute time", lambda c: c.get("compute_time"),
     lambda w, y: w.compute_time, None),
    ("train.computation_time_stdev", "compute stdev",
     lambda c: c.get("compute_std") if c.get("compute_dist") == "normal" else 0.0,
     lambda w, y: w.compute_std, None),
    ("train.total_training_steps", "steps", lambda c: c.get("steps"), lambda w, y: w.steps,
     None),
    ("train.seed", "seed", lambda c: c.get("seed"),
     lambda w, y: c_or_none(w.seed), None),
    ("metric.au", "AU threshold", lambda c: c.get("au_threshold"),
     lambda w, y: w.au_threshold, None),
    ("reader.sample_shuffle", "shuffle", lambda c: c.get("shuffle"), lambda w, y: w.shuffle,
     None),
    ("model.compute", "model", lambda c: c.get("model"), lambda w, y: "emulate", None),
    ("reader.preprocess_time", "preprocess", lambda c: c.get("preprocess"),
     lambda w, y: "off", None),
    ("workflow.checkpoint", "checkpoints", lambda c: bool(c.get("checkpoint_every")),
     lambda w, y: c_or_none((y.get("workflow") or {}).get("checkpoint")), None),
    ("dataset.num_samples_per_file", "records per file", _records_per_file,
     lambda w, y: w.samples_per_file, OPEN),
    ("dataset.num_files_train", "files", lambda c: (c.get("dataset") or {}).get("shards"),
     lambda w, y: w.files, CLOSED),
    ("dataset.data_folder", "data folder", lambda c: c.get("data"),
     lambda w, y: w.data_folder, CLOSED),
    ("reader.prefetch_size", "prefetch", lambda c: c.get("prefetch"),
     lambda w, y: DLIO_PREFETCH if w.prefetch is None else w.prefetch, CLOSED),
]
_SKIP = object()  # the workload leaves the setting to the tool: nothing to compare


def c_or_none(v):
    return _SKIP if v is None else v


def workload_config(spec):
    """(Workload, its DLIO YAML as a dict) of the workload a run names, or None when it
    can no longer be read (a config file moved)."""
    try:
        w = load_workload(spec)
        with open(WORKLOADS.get(spec, w.source)) as f:
            return w, yaml.safe_load(f)
    except (HpcioError, OSError):
        return None


def settings_changed(config, wl):
    """[(DLIO key, what, run's value, workload's value, allowed)] of the settings of the run
    ``config`` that differ from workload ``wl`` ((Workload, YAML))."""
    w, y = wl
    out = []
    for key, what, mine, theirs, allowed in SETTINGS:
        want, got = theirs(w, y), mine(config)
        if want is _SKIP or got == want:
            continue
        if isinstance(want, float) and isinstance(got, (int, float)) and \
                abs(got - want) <= 1e-9 * max(1.0, abs(want)):
            continue
        out.append((key, what, got, want, allowed))
    return out


def _settings(config):
    """(the ``settings`` column, the ``settings`` rule's reasons) of a run."""
    spec = config.get("workload")
    if not spec:
        return None, []
    wl = workload_config(spec)
    if wl is None:
        why = f"the workload {spec} cannot be read to compare the run's settings with"
        return f"invalid: {why}", [f"settings: {why}"]
    changed = settings_changed(config, wl)
    bad = [f"{what} {got} is not the workload's {want} (not a tunable)"
           for _, what, got, want, allowed in changed if allowed is None]
    if bad:
        return "invalid: " + "; ".join(bad), ["settings: " + b for b in bad]
    opened = [f"{what} {got} (the workload's {want})"
              for _, what, got, want, allowed in changed if allowed is OPEN]
    if opened:
        return "open settings: " + "; ".join(opened), []
    return "closed-eligible settings", []


def _read(reader, path, problems):
    """A file of the run through its RunDir reader, or None; why, and the fields left
    out, in ``problems``."""
    try:
        value, gaps = reader()
        if gaps:
            problems.append(schema.gap_line(path, gaps))
        return value
    except FileNotFoundError:
        return None
    except schema.Invalid as e:
        problems.append(str(e))
        return None


def run_row(path, threshold=None):
    """(row, broken, problems) of the run directory ``path``: the row has every column but
    ``category`` and ``rules``, which need the other rows (:func:`export_rows`); broken:
    the reasons it breaks rules; problems: one line per file that could not be used."""
    run = RunDir(os.path.abspath(path))
    try:
        config, _ = run.config()
    except FileNotFoundError:
        raise HpcioError(f"{run.path}: not a run directory (no {RunDir.CONFIG})") from None
    problems = []
    summary = _read(run.summary, run.summary_file, problems) or {}
    prov = _read(run.provenance, run.provenance_file, problems) or {}
    m = summary.get("metrics") or {}
    hosts = prov.get("hosts")
    git = prov.get("git") or {}
    au = m.get("au_percent")
    ck = summary.get("checkpoints") or {}
    if threshold is None:
        threshold = summary.get("au_threshold_percent") or AU_THRESHOLD
    row = {
        "run_dir": run.path, "benchmark_type": "training", "model": config.get("model"),
        "workload": config.get("workload"), "au_threshold_percent": threshold,
        "workload_hash": prov.get("workload_hash"),
        "num_accelerators": summary.get("ranks"), "num_hosts": summary.get("nodes"),
        "epochs": summary.get("epochs_run"), "batch_size": summary.get("batch"),
        "steps_per_epoch": summary.get("steps_per_epoch"),
        "train_au_mean_percentage": au,
        "train_au_percentage": [e["au_percent"] for e in m["per_epoch"]]
        if "per_epoch" in m else None,
        "train_au_meet_expectation": None if au is None else
        ("success" if au >= threshold else "fail"),
        "train_throughput_mean_samples_per_second": m.get("samples_per_s"),
        "train_io_mean_MB_per_second": m.get("mib_per_s"),
        "host_memory_GB": [None if h["mem_total_bytes"] is None else
                           h["mem_total_bytes"] / 2 ** 30 for h in hosts]
        if hosts is not None else None,
        "dataset_bytes": config.get("dataset_bytes"), "reader": config.get("reader"),
        "format": (config.get("dataset") or {}).get("format"), "cache": config.get("cache"),
        "au_percent_all_steps": m.get("au_percent_all_steps"),
        "stall_percent": m.get("stall_percent"), "fetch_percent": m.get("fetch_percent"),
        "epoch_s_mean": m.get("epoch_s_mean"),
        "checkpoint_mode": ck.get("mode"), "checkpoint_writer": ck.get("writer"),
        "checkpoint_stall_s_mean": ck.get("stall_s_mean"),
        "checkpoint_write_GiB_per_s_mean": ck.get("write_GiB_per_s_mean"),
        "cut_short": bool(summary.get("cut_short", True)),
        "data_fs_type": prov.get("data_fs_type"),
        "hpcio_version": prov.get("hpcio_version"), "git_commit": git.get("commit"),
        "git_dirty": git.get("dirty"),
    }
    row["settings"], why = _settings(config)
    row["min_samples"], row["potential_caching"], size_why = _dataset_size(row, config,
                                                                           hosts)
    return row, _broken(row, summary, config, hosts, threshold) + size_why + why, problems


def _dataset_size(row, config, hosts):
    """(min_samples, potential_caching, the dataset_size rule's reasons): the files the
    run read against mlpstorage's required count (calculate_training_data_size: in whole
    files, the memory bound in bytes of all hosts' MemTotal)."""
    mem = [h["mem_total_bytes"] for h in hosts or []]
    d = config.get("dataset") or {}
    records, files, size = d.get("records"), d.get("shards"), config.get("dataset_bytes")
    batch, ranks = row["batch_size"] or config.get("batch"), row["num_accelerators"]
    if not mem or None in mem:
        return None, None, ["dataset_size: the hosts' memory is unknown (no usable "
                            "provenance.json)"]
    if not (records and files and size and batch and ranks):
        return None, None, ["dataset_size: the run's records, files, bytes, batch or ranks "
                            "are unknown"]
    per_file = records // files
    file_bytes = size / files
    by_steps = MIN_STEPS * batch * ranks
    by_mem = int(MEMORY_MULTIPLE * sum(mem) // file_bytes)
    need = max(by_mem, by_steps // per_file)
    caching = [int(m > size / len(mem)) for m in mem]
    why = []
    if files < need:
        bound = (f"{MEMORY_MULTIPLE} x {sum(mem):,} B of host memory / {file_bytes:,.0f} B "
                 f"per file" if by_mem >= by_steps // per_file else
                 f"{MIN_STEPS} steps x batch {batch} x {ranks} accelerator(s)")
        why.append(f"dataset_size: {files:,} files < {need:,} ({bound})")
    return max(by_steps, int(MEMORY_MULTIPLE * sum(mem) * records // size)), caching, why


def _broken(row, summary, config, hosts, threshold):
    """The reasons this run alone breaks a rule of ``RULES`` (repeats aside)."""
    out = []
    if not summary:
        out.append("complete: no usable summary.json (the run did not finish)")
    elif summary.get("source"):
        out.append("complete: the run wrote no summary; hpcio.results summarize made it "
                   "from the ranks' flushed files")
    elif summary.get("cut_short") or \
            summary.get("epochs_run") != summary.get("epochs_requested"):
        out.append(f"complete: {summary.get('epochs_run')} of "
                   f"{summary.get('epochs_requested')} epochs"
                   + (", cut short" if summary.get("cut_short") else ""))
    au = row["train_au_mean_percentage"]
    if au is None:
        out.append("au: no AU in the summary")
    elif au < threshold:
        out.append(f"au: {au:.2f}% < {threshold:g}%")
    steps = row["steps_per_epoch"]
    if steps is None or steps < MIN_STEPS:
        out.append(f"steps: {steps} steps per epoch < {MIN_STEPS}")
    per_host = {h["ranks"] for h in hosts or []}
    if len(per_host) > 1:
        out.append(f"ranks_per_host: hosts run {sorted(per_host)} ranks")
    if config.get("cache") == "warm":
        out.append("no_cache: run with --cache warm")
    return out


def export_rows(runs, threshold=None):
    """The rows of the run directories ``runs`` (in order), with ``category`` and
    ``rules``; the one-line problems of files that could not be used go with them."""
    rows, problems, broken = [], [], []
    for path in runs:
        row, why, bad = run_row(path, threshold)
        rows.append(row)
        broken.append(why)
        problems += bad
    count = {}
    for row in rows:
        count[row["workload_hash"]] = count.get(row["workload_hash"], 0) + 1
    _repeats(rows)
    for row, why in zip(rows, broken):
        n = count[row["workload_hash"]]
        if not row["workload_hash"]:
            why.append("repeats: no workload_hash (no provenance.json) to group runs by")
        elif n < REPEATS:
            why.append(f"repeats: {n} run(s) of this workload here, not a warm-up + 5")
        row["category"] = "invalid" if why else "open"
        row["rules"] = "fail: " + "; ".join(why) if why else "pass"
    return rows, problems


def _repeats(rows):
    """``repeat`` and the published means of each row: per workload_hash, in order, a
    warm-up then measured runs; the mean over measured runs 1 to REPEATS - 1."""
    groups = {}
    for row in rows:
        groups.setdefault(row["workload_hash"], []).append(row)
    for group in groups.values():
        measured = group[1:REPEATS]
        full = len(measured) == REPEATS - 1
        for i, row in enumerate(group):
            row["repeat"] = "warm-up" if i == 0 else str(i)
            for out, col in (("published_throughput_samples_per_second",
                              "train_throughput_mean_samples_per_second"),
                             ("published_io_MB_per_second", "train_io_mean_MB_per_second")):
                vals = [r[col] for r in measured]
                row[out] = sum(vals) / len(vals) if full and None not in vals else None


def csv_cell(v):
    """A value as its CSV text: empty for null, true/false, JSON for a list."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return json.dumps(v)
    return repr(v) if isinstance(v, float) else str(v)


def from_csv(text):
    """The rows of an exported CSV, each cell back to its column's type."""
    out = []
    for r in csv.DictReader(io.StringIO(text)):
        row = {}
        for k, v in r.items():
            kind = _TYPES.get(k, str)
            if v == "":
                row[k] = None
            elif kind is bool:
                row[k] = v == "true"
            elif kind is list:
                row[k] = json.loads(v)
            else:
                row[k] = kind(v)
        out.append(row)
    return out


def _csv(rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(NAMES)
    for row in rows:
        w.writerow([csv_cell(row.get(k)) for k in NAMES])
    return buf.getvalue().encode()


def _json(rows):
    return (json.dumps(jsonable([{k: r.get(k) for k in NAMES} for r in rows], finite=True),
                       indent=2) + "\n").encode()


FORMATS = {".json": _json, ".csv": _csv}


def output_format(path):
    """The writer for ``path``'s extension (``FORMATS``); an error for any other."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise HpcioError(f"-o {path}: unknown extension {ext or '(none)'!r}; give "
                         f"{' or '.join(FORMATS)}")
    return FORMATS[ext]


def is_export(path):
    """Whether ``path`` holds rows this module wrote (its JSON list or CSV header), read
    from the file's first bytes: an earlier export may be replaced, nothing else."""
    with open(path, "rb") as f:
        head = f.read(4096).decode()
    if output_format(path) is _csv:
        return head.split("\n", 1)[0] == ",".join(NAMES)
    body = head.lstrip()
    return body.startswith("[") and (body[1:].lstrip().startswith("]") or
                                     body[1:].lstrip().startswith('{\n    "run_dir"'))


def write_rows(rows, path):
    """``rows`` into ``path`` (atomically) as JSON (a list of rows) or CSV, by its
    extension."""
    data = output_format(path)(rows)
    try:
        atomic_write(path, lambda f: f.write(data))
    except OSError as e:
        raise HpcioError(f"-o {path}: {e.strerror}") from None
