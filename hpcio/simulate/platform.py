"""The simulated platform: compute nodes, storage servers and the star network between them,
read from a YAML file and checked whole before anything is simulated (one line per fault)."""

import math
import os
from dataclasses import dataclass, replace

import numpy as np
import yaml

from ..errors import HpcioError

__all__ = ["Platform", "barrier_rounds", "load_platform", "platform_dict", "PLACEMENTS", "NETWORKS"]

PLACEMENTS = ("file", "stripe")   # whole shard file per server | round-robin stripes
NETWORKS = ("star",)


def barrier_rounds(ranks):
    """Rounds of a dissemination barrier over ``ranks`` ranks: ceil(log2 P)."""
    return (int(ranks) - 1).bit_length()


@dataclass(frozen=True)
class Platform:
    name: str
    nodes: int
    ranks_per_node: int
    nic_bps: float          # bytes/s
    nic_latency_s: float
    servers: int
    server_bps: float       # bytes/s per server
    latency_s: float        # per request, at the server
    placement: str
    stripe_bytes: int
    stripe_count: int
    cache_bytes: float      # node page cache; 0 = off, inf = unlimited
    network: str = "star"
    cores: int = 0          # per node, shared by its ranks' CPU work; 0 = one per rank
    server_threads: int = 0  # requests a server serves at once, the rest queue; 0 = no limit
    client_threads: int = 0  # requests a node's file-system client has out at once; 0 = any
    exchange_bps: float = 0.0  # a rank's allreduce bandwidth, calibrated; 0 = the NIC's
    cpu_quantum_s: float = 0.0  # the node's cores as a run queue: a burst of CPU holds a
    # core for at most this long, then queues again; 0 = shared fluidly (no queueing)
    barrier_round_s: float = -1.0  # one round of the step's barrier (gloo's dissemination:
    # log2 P rounds), as the last rank to arrive waits it; calibrated; < 0 = a NIC hop

    @property
    def round_s(self):
        """One barrier round: the calibrated figure, else one message's NIC latency."""
        return self.barrier_round_s if self.barrier_round_s >= 0 else self.nic_latency_s

    def barrier_s(self, ranks):
        """What the last rank to reach a step's barrier waits: gloo's dissemination barrier,
        log2 P rounds (:func:`barrier_rounds`)."""
        return self.round_s * barrier_rounds(ranks)

    def exchange_s(self, ranks, nbytes):
        """One ring allreduce of ``nbytes`` over ``ranks`` ranks: each sends and receives
        2(P-1)/P of the bytes, the node's ranks sharing its NIC, in 2(P-1) hops."""
        if ranks < 2 or not nbytes:
            return 0.0
        share = min(ranks, self.ranks_per_node)
        bps = self.exchange_bps or self.nic_bps / share
        return 2 * (ranks - 1) / ranks * nbytes / bps + 2 * (ranks - 1) * self.nic_latency_s

    @property
    def node_cores(self):
        return self.cores or self.ranks_per_node

    @property
    def max_ranks(self):
        return self.nodes * self.ranks_per_node

    def server_of(self, offset, total):
        """The server holding byte ``offset`` (or an array of them) of a ``total``-byte
        dataset: ``file`` spreads its shard files whole (one per server, equal contiguous
        ranges); ``stripe`` stripes round-robin over ``stripe_count`` servers."""
        off = np.asarray(offset, dtype=np.float64)
        if self.placement == "file":
            out = np.minimum((off * self.servers // total).astype(np.int64), self.servers - 1)
        else:
            out = (off // self.stripe_bytes).astype(np.int64) % self.stripe_count
        return out if out.ndim else int(out)

    def with_storage(self, latency_s, server_bps, server_threads=None, client_threads=None,
                     cpu_quantum_s=None):
        """The same platform with other storage figures (what calibration varies)."""
        keep = lambda v, old, kind: old if v is None else kind(v)  # noqa: E731
        return replace(self, latency_s=float(latency_s), server_bps=float(server_bps),
                       server_threads=keep(server_threads, self.server_threads, int),
                       client_threads=keep(client_threads, self.client_threads, int),
                       cpu_quantum_s=keep(cpu_quantum_s, self.cpu_quantum_s, float))

    def fit_ranks(self, ranks):
        """The platform grown to hold ``ranks`` (more nodes of the same kind): a prediction
        at scale adds nodes, never ranks per node."""
        need = -(-int(ranks) // self.ranks_per_node)
        return self if need <= self.nodes else replace(self, nodes=need)


def _number(where, d, key, positive=True, allow_zero=False):
    if key not in d:
        raise HpcioError(f"{where}: missing key {key}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise HpcioError(f"{where}: {key} must be a finite number, not {v!r}")
    if positive and (v < 0 or (v == 0 and not allow_zero)):
        raise HpcioError(f"{where}: {key} must be {'>= 0' if allow_zero else '> 0'}, "
                         f"not {v!r}")
    return v


def _integer(where, d, key):
    v = _number(where, d, key)
    if int(v) != v:
        raise HpcioError(f"{where}: {key} must be a whole number, not {v!r}")
    return int(v)


def _section(path, d, key):
    v = d.get(key)
    if not isinstance(v, dict):
        raise HpcioError(f"{path}: missing section {key}" if v is None
                         else f"{path}: {key} must be a mapping")
    return v


def _cache(path, v):
    if v in ("off", False, 0):
        return 0.0
    if v in ("unlimited", "inf"):
        return math.inf
    return _number(path, {"client_cache_mib": v}, "client_cache_mib") * 2 ** 20


def _threads(path, v):
    if v in ("unlimited", "inf", 0):
        return 0
    return _integer(f"{path}: storage", {"threads": v}, "threads")


def parse_platform(d, path="platform"):
    """A :class:`Platform` from a mapping, or HpcioError naming the first bad value."""
    if not isinstance(d, dict):
        raise HpcioError(f"{path}: not a mapping of compute, storage, client_cache_mib, "
                         f"network")
    c, s = _section(path, d, "compute"), _section(path, d, "storage")
    placement = s.get("placement", "file")
    if placement not in PLACEMENTS:
        raise HpcioError(f"{path}: storage.placement must be one of {', '.join(PLACEMENTS)}, "
                         f"not {placement!r}")
    network = d.get("network", "star")
    if network not in NETWORKS:
        raise HpcioError(f"{path}: network {network!r} is not simulated yet (only "
                         f"{', '.join(NETWORKS)})")
    if "client_cache_mib" not in d:
        raise HpcioError(f"{path}: missing key client_cache_mib (a size in MiB, or off)")
    p = Platform(
        name=str(d.get("name") or os.path.splitext(os.path.basename(path))[0]),
        nodes=_integer(f"{path}: compute", c, "nodes"),
        ranks_per_node=_integer(f"{path}: compute", c, "ranks_per_node"),
        nic_bps=_number(f"{path}: compute", c, "nic_mbs") * 1e6,
        nic_latency_s=_number(f"{path}: compute", c, "nic_latency_us", allow_zero=True) * 1e-6,
        servers=_integer(f"{path}: storage", s, "servers"),
        server_bps=_number(f"{path}: storage", s, "bandwidth_mbs") * 1e6,
        latency_s=_number(f"{path}: storage", s, "latency_us", allow_zero=True) * 1e-6,
        placement=placement,
        stripe_bytes=_integer(f"{path}: storage", s, "stripe_kib") * 1024
        if placement == "stripe" else int(s.get("stripe_kib", 1024)) * 1024,
        stripe_count=_integer(f"{path}: storage", s, "stripe_count")
        if placement == "stripe" else int(s.get("stripe_count", 1)),
        cache_bytes=_cache(path, d["client_cache_mib"]),
        network=network,
        cores=_integer(f"{path}: compute", c, "cores") if "cores" in c else 0,
        server_threads=_threads(path, s.get("threads", "unlimited")),
        client_threads=_threads(path, c.get("client_threads", "unlimited")),
        cpu_quantum_s=_number(f"{path}: compute", c, "cpu_quantum_us", allow_zero=True) * 1e-6
        if "cpu_quantum_us" in c else 0.0,
        barrier_round_s=_number(f"{path}: compute", c, "barrier_round_us", allow_zero=True)
        * 1e-6 if "barrier_round_us" in c else -1.0)
    if p.placement == "stripe" and p.stripe_count > p.servers:
        raise HpcioError(f"{path}: storage.stripe_count {p.stripe_count} is more than its "
                         f"{p.servers} servers")
    return p


def load_platform(path):
    """The platform in YAML file ``path`` (see platforms/testbed.yaml), checked."""
    try:
        with open(path) as f:
            d = yaml.safe_load(f)
    except OSError as e:
        raise HpcioError(f"{path}: cannot read the platform: {e.strerror}")
    except yaml.YAMLError as e:
        raise HpcioError(f"{path}: not YAML ({str(e).splitlines()[0]})")
    return parse_platform(d, path)


def platform_dict(p, **extra):
    """``p`` as the YAML mapping :func:`load_platform` reads back."""
    cache = "off" if p.cache_bytes == 0 else (
        "unlimited" if math.isinf(p.cache_bytes) else p.cache_bytes / 2 ** 20)
    d = {"name": p.name,
         "compute": {"nodes": p.nodes, "ranks_per_node": p.ranks_per_node,
                     "cores": p.node_cores,
                     "client_threads": p.client_threads or "unlimited",
                     "cpu_quantum_us": round(p.cpu_quantum_s * 1e6, 3),
                     "barrier_round_us": round(p.round_s * 1e6, 3),
                     "nic_mbs": p.nic_bps / 1e6, "nic_latency_us": p.nic_latency_s * 1e6},
         "storage": {"servers": p.servers, "bandwidth_mbs": round(p.server_bps / 1e6, 3),
                     "latency_us": round(p.latency_s * 1e6, 3),
                     "threads": p.server_threads or "unlimited", "placement": p.placement,
                     "stripe_kib": p.stripe_bytes // 1024, "stripe_count": p.stripe_count},
         "client_cache_mib": cache, "network": p.network}
    d.update(extra)
    return d
