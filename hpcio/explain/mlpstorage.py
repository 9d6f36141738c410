"""Exported runs in the results layout that MLPerf Storage's ``mlpstorage reports
reportgen`` reads (``mlpstorage/rules.py`` ``get_runs_files``, ``BenchmarkRun``): one leaf
per run, ``DIR/<system>/training/<model>/run/<YYYYMMDD_HHMMSS>/`` holding DLIO's
``summary.json`` (its field names and units: DLIO's "MB" and "GB" are MiB and GiB), a
``training_<ts>_metadata.json`` (what makes the leaf a run) and ``dlio_config/`` with the
DLIO config run (``config.yaml``, the workload's with the run's values) and its
``overrides.yaml`` (``++workload.KEY=VALUE`` for every setting that differs from the
workload's, hpcio's reader as ``reader.data_loader``): the overrides mlpstorage classifies.
"""

import copy
import json
import os
import time

import yaml

from ..errors import HpcioError
from ..fsutil import atomic_write
from ..measure.rundir import RunDir
from ..measure.schema import Invalid
from .export import settings_changed, workload_config

__all__ = ["write_tree"]


def _set(cfg, key, value):
    head, _, tail = key.partition(".")
    if tail:
        cfg.setdefault(head, {})[tail] = value
    else:
        cfg[head] = value


def _dlio_value(key, value):
    return value / 100.0 if key == "metric.au" else value


def _dlio_config(row, config):
    """(DLIO config of the run, its overrides)."""
    wl = workload_config(config["workload"]) if config.get("workload") else None
    changed = settings_changed(config, wl) if wl else []
    cfg = copy.deepcopy(wl[1]) if wl else {
        "model": {"name": row["model"]}, "workflow": {"train": True},
        "dataset": {}, "reader": {}, "train": {}}
    d = config.get("dataset") or {}
    per_file = d["records"] // d["shards"] if d.get("records") and d.get("shards") else 1
    run = {"dataset.num_files_train": d.get("shards"), "dataset.num_samples_per_file":
           per_file, "dataset.record_length_bytes": (config.get("dataset_bytes") or 0) //
           max(1, d.get("records") or 1), "reader.batch_size": row["batch_size"],
           "train.epochs": row["epochs"], "reader.data_loader": f"hpcio_{row['reader']}"}
    for key, value in run.items():
        _set(cfg, key, value)
    overrides = [("reader.data_loader", run["reader.data_loader"])]
    for key, _, got, _, _ in changed:
        _set(cfg, key, _dlio_value(key, got))
        overrides.append((key, _dlio_value(key, got)))
    return cfg, [f"++workload.{k}={v}" for k, v in overrides]


def _cpus(run_dir):
    """The CPU count rank 0's node recorded (env.json ``cpus``), or None."""
    try:
        return (RunDir(run_dir).env()[0] or {}).get("cpus")
    except (OSError, Invalid):
        return None


def _summary(row, start, end, hosts):
    au = row["train_au_percentage"] or []
    mem = row["host_memory_GB"] or []
    return {
        "start": start, "end": end, "num_accelerators": row["num_accelerators"],
        "num_hosts": row["num_hosts"], "hostname": hosts[0] if hosts else None,
        "metric": {
            "train_au_percentage": au,
            "train_au_mean_percentage": row["train_au_mean_percentage"],
            "train_au_meet_expectation": row["train_au_meet_expectation"],
            "train_throughput_mean_samples_per_second":
                row["train_throughput_mean_samples_per_second"],
            "train_io_mean_MB_per_second": row["train_io_mean_MB_per_second"],
        },
        "num_files_train": None, "num_samples_per_file": None,
        # a run records rank 0's node's CPUs: MLPerf's hosts are alike (Rules 3.3.6)
        "host_cpu_count": [_cpus(row["run_dir"])] * len(mem), "host_memory_GB": mem,
        "potential_caching": row["potential_caching"], "epochs": row["epochs"],
    }


def write_tree(rows, configs, root, system):
    """One leaf per row under ``root``; returns the leaves written."""
    leaves = []
    for row, config in zip(rows, configs):
        t = os.path.getmtime(os.path.join(row["run_dir"], "config.yaml"))
        ts = time.strftime("%Y%m%d_%H%M%S", time.localtime(t))
        leaf = os.path.join(root, system, "training", row["model"] if row["model"] !=
                            "emulate" or not config.get("workload") else
                            workload_config(config["workload"])[0].model, "run", ts)
        base, n = leaf, 1
        while leaf in leaves:  # runs whose config.yaml were written in the same second
            leaf, n = f"{base}_{n}", n + 1
        cfg, overrides = _dlio_config(row, config)
        summary = _summary(row, time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)),
                           None, [])
        summary["num_files_train"] = cfg["dataset"].get("num_files_train")
        summary["num_samples_per_file"] = cfg["dataset"].get("num_samples_per_file")
        try:
            os.makedirs(os.path.join(leaf, "dlio_config"), exist_ok=True)
            for name, text in (
                    ("summary.json", json.dumps(summary, indent=2)),
                    (f"training_{ts}_metadata.json", json.dumps(
                        {"benchmark_type": "training", "model": cfg["model"]["name"],
                         "command": "run_benchmark", "num_processes":
                         row["num_accelerators"], "hpcio_run_dir": row["run_dir"]},
                        indent=2)),
                    ("dlio_config/config.yaml", yaml.safe_dump({"workload": cfg})),
                    ("dlio_config/overrides.yaml", yaml.safe_dump(overrides))):
                atomic_write(os.path.join(leaf, name), lambda f, b=text.encode(): f.write(b))
        except OSError as e:
            raise HpcioError(f"--mlpstorage {root}: {e.strerror}") from None
        leaves.append(leaf)
    return leaves
