"""A rank's checkpoint state in memory: one tensor per :class:`~.layout.TensorSpec`, filled
with random bytes (as DLIO's ``torch.rand``: nothing a file system could compress or
deduplicate), and the CRC-32C of each, the record a restore is checked against."""

import crc32c
import numpy as np

from .layout import DTYPES

__all__ = ["torch_dtype", "make_state", "empty_state", "crc32c_of", "tensor_bytes",
           "tensor_records"]


def torch_dtype(name):
    """torch's dtype for a DLIO datatype name (``fp16``)."""
    import torch  # torch: seconds; only the writers and restores need it
    return getattr(torch, DTYPES[name][0])


def tensor_bytes(t):
    """The tensor's bytes as a uint8 numpy array (no copy)."""
    import torch  # torch: seconds (see torch_dtype)
    return t.view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)


def make_state(files, seed, rank):
    """{key: tensor} of ``files`` (a rank's :class:`~.layout.ShardFile` list), random
    bytes from a generator seeded by (seed, rank): float64 draws written straight into
    each tensor's memory, a few tail bytes apart (no temporary copies of GiB tensors)."""
    import torch  # torch: seconds (see torch_dtype)
    rng = np.random.default_rng([seed, rank])
    state = {}
    for f in files:
        for spec in f.tensors:
            t = torch.empty(spec.numel, dtype=torch_dtype(spec.dtype))
            b = tensor_bytes(t)
            whole = b.size // 8 * 8
            if whole:
                rng.random(out=b[:whole].view(np.float64))
            if b.size > whole:
                b[whole:] = rng.integers(0, 256, b.size - whole, dtype=np.uint8)
            state[spec.key] = t
    return state


def empty_state(files):
    """{key: preallocated, uninitialised tensor} to restore ``files`` into."""
    import torch  # torch: seconds (see torch_dtype)
    return {spec.key: torch.empty(spec.numel, dtype=torch_dtype(spec.dtype))
            for f in files for spec in f.tensors}


def crc32c_of(t):
    """CRC-32C of a tensor's bytes (the ``crc32c`` package: SSE4.2/ARMv8 instructions,
    several GB/s)."""
    return crc32c.crc32c(tensor_bytes(t))


def tensor_records(state, files):
    """Per tensor key, what the manifest says of it: dtype, elements, CRC-32C and the
    DLIO file it belongs to (the restore's check)."""
    return {t.key: {"dtype": str(state[t.key].dtype).replace("torch.", ""),
                    "shape": [state[t.key].numel()], "crc32c": crc32c_of(state[t.key]),
                    "file": f.name} for f in files for t in f.tensors}
