"""A sampler thread: node CPU, process memory, the data's disk and the GPU over a run."""

import threading
import time

from . import probes

__all__ = ["Sampler"]


class _Gpu:
    """GPU utilisation and memory through pynvml (nvidia-ml-py), when there is one."""

    def __init__(self, device):
        self.h = None
        try:
            import pynvml  # pynvml, torch: the [gpu] and [train] extras, seconds to import
            import torch
            pynvml.nvmlInit()
            self.nvml = pynvml
            props = torch.cuda.get_device_properties(device)
            bus = getattr(props, "pci_bus_id", None)
            if bus is not None:  # CUDA_VISIBLE_DEVICES renumbers; the PCI id does not
                dom = getattr(props, "pci_domain_id", 0)
                devid = getattr(props, "pci_device_id", 0)
                self.h = pynvml.nvmlDeviceGetHandleByPciBusId(
                    f"{dom:08X}:{bus:02X}:{devid:02X}.0".encode())
            else:
                self.h = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        except Exception:  # no pynvml, no driver: the sample just has no GPU fields
            self.h = None

    def sample(self):
        if self.h is None:
            return float("nan"), float("nan")
        try:
            u = self.nvml.nvmlDeviceGetUtilizationRates(self.h)
            m = self.nvml.nvmlDeviceGetMemoryInfo(self.h)
            return float(u.gpu), float(m.used)
        except Exception:
            return float("nan"), float("nan")


class Sampler(threading.Thread):
    """Samples, every ``interval`` seconds: node CPU user / system / iowait / idle
    fractions over the interval (/proc/stat), this process's RSS, bytes read from the
    data's whole disk over the interval (:func:`probes.data_disks`: every whole disk when
    the data is not on a local block device), and GPU utilisation % and memory bytes
    (pynvml) when ``device`` is a CUDA device. Costs a few file reads per interval."""

    FIELDS = ("t", "cpu_user", "cpu_system", "cpu_iowait", "cpu_idle", "rss_bytes",
              "disk_read_bytes", "gpu_util", "gpu_mem_bytes")

    def __init__(self, interval=0.5, data_path=None, device=None, origin=None):
        super().__init__(name="hpcio-sampler", daemon=True)
        self.interval = float(interval)
        self.disks = probes.data_disks(data_path)
        self.gpu = _Gpu(device) if device is not None and device.type == "cuda" else None
        self.origin = time.perf_counter() if origin is None else origin
        self.samples = []
        self._halt = threading.Event()
        self.disk_read_start = self._disk()
        self.disk_read_end = self.disk_read_start

    def _disk(self):
        return probes.disk_read_bytes(self.disks) or 0

    def _sample(self):
        cpu, disk = probes.cpu_jiffies(), self._disk()
        last_cpu, last_disk = self._last
        if cpu and last_cpu:
            d = [c - l for c, l in zip(cpu, last_cpu)]
            tot = d[4] or 1
            fr = (d[0] / tot, d[1] / tot, d[2] / tot, d[3] / tot)
        else:
            fr = (float("nan"),) * 4
        gu, gm = self.gpu.sample() if self.gpu else (float("nan"), float("nan"))
        self.samples.append((time.perf_counter() - self.origin, *fr, probes.rss_bytes(),
                             disk - last_disk, gu, gm))
        self._last = (cpu, disk)

    def run(self):
        while not self._halt.wait(self.interval):
            self._sample()

    def start(self):
        self._last = (probes.cpu_jiffies(), self._disk())
        super().start()

    def stop(self):
        """End sampling, with one last sample (so even a short run has one)."""
        self._halt.set()
        if self.is_alive():
            self.join(timeout=5)
        if hasattr(self, "_last"):
            self._sample()
        self.disk_read_end = self._disk()

    def as_dict(self):
        """Samples as columns (JSON-friendly), plus the disks watched and the disk bytes
        read over the sampler's whole life."""
        cols = list(zip(*self.samples)) if self.samples else [()] * len(self.FIELDS)
        out = {f: [None if v != v else v for v in c] for f, c in zip(self.FIELDS, cols)}
        out["interval_s"] = self.interval
        out["disks"] = self.disks
        out["disk_read_bytes_total"] = self.disk_read_end - self.disk_read_start
        return out


