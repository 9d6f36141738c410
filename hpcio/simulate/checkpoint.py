"""Checkpoint write and restore on a simulated platform: MLPerf Storage's llama3 checkpoints
(:mod:`hpcio.checkpoint.layout`: every rank's bytes and files, as DLIO lays them out) written
and read back by a writer, each checkpoint's wall time being its slowest rank's, and GiB/s
the checkpoint's bytes over it (DLIO's and MLPerf's definition).

A write is the reverse flow of a read: a rank's bytes go from its node's link to the servers
holding its files, shared max-min with every other rank's (SimGrid, as
:mod:`hpcio.simulate.engine`); what a rank does, in order:

* **metadata**: one create per file it writes (``create_us`` each, one after another, as a
  rank creates its files), every create also one operation of the file system's metadata
  service, which serves ``metadata_ops`` per second to all ranks together: file per process
  is a storm of creates at 1,024 ranks, a shared file one per rank (its collective open);
  a read opens them (``open_us``);
* **data**: its bytes to (from) the servers, at once, each server's link carrying
  ``write_mbs`` (``storage.bandwidth_mbs`` when reading), the node's link ``nic_mbs``;
  beside it the writer's own cost on the node's cores (``ns_per_byte``: serialising,
  copying; one core per rank, the node's ``cores`` shared): the slower sets the time;
* **fsync**: ``fsync_ms`` per file written;

and one process's stream through the file-system client is at most ``process_write_mbs``
(``process_read_mbs``): a FUSE client's round trips, a Lustre client's RPCs in flight; the
client's own CPU per byte (``client_write_ns_per_byte``) joins the writer's on the node's
cores, where ranks past the cores share them.

Above :data:`hpcio.simulate.engine.MAX_ACTORS` ranks, consecutive ranks of a node are one
actor (:func:`hpcio.simulate.engine.layout`), its flows their bytes summed, its latencies a
rank's: 1,024 ranks simulate in seconds. Ranks are placed in blocks of ``ranks_per_node``.
"""

import math
import os
import pickle
import traceback
from dataclasses import dataclass, field

import numpy as np
import yaml

from ..checkpoint.layout import GIB, Layout, load_model
from ..errors import HpcioError, lookup
from ..fsutil import atomic_write
from .engine import available, layout as group_layout
from .platform import parse_platform, platform_dict
from .topology import FLOPS

__all__ = ["CkptCosts", "WriterCost", "make_case", "WRITERS", "PHASES", "Case", "plan",
           "simulate_cases", "load_ckpt_platform", "write_ckpt_platform", "parse_costs", "costs_dict",
           "START"]

PHASES = ("write", "read")


@dataclass(frozen=True)
class WriterCost:
    """A writer's own cost per byte on a client core (serialising, copying), measured."""
    write_ns_per_byte: float = 0.0
    read_ns_per_byte: float = 0.0


@dataclass(frozen=True)
class CkptCosts:
    """What a checkpoint costs beyond the platform's links: the storage's write bandwidth,
    the metadata service, fsync, and each writer's own per-byte cost."""
    write_bps: float                  # per server
    create_s: float                   # per file created, a rank's files one after another
    open_s: float                     # per file opened for a restore
    fsync_s: float                    # per file written
    metadata_ops: float = math.inf    # creates/opens per second, the whole file system
    writers: dict = field(default_factory=dict)   # name -> WriterCost
    process_write_bps: float = math.inf   # one process's stream through the file-system
    process_read_bps: float = math.inf    # client (a FUSE client's round trips), each way
    client_write_ns: float = 0.0      # the file-system client's CPU per byte on the node's
    client_read_ns: float = 0.0       # cores (FUSE, the kernel), beside the writer's own


def _files_per_process(layout, how):
    """Per rank, its files as [(file index in the checkpoint, bytes)]: DLIO's files
    (``dlio``) or one file per rank (``rank``)."""
    out, g = [], 0
    for r in range(layout.world):
        fs = layout.files(r)
        sizes = ([sum(f.nbytes for f in fs)] if fs else []) if how == "rank" \
            else [f.nbytes for f in fs]
        out.append([(g + i, n) for i, n in enumerate(sizes)])
        g += len(sizes)
    return out


def _dcp(layout, files):
    """torch.distributed.checkpoint, one file per rank (``single_file_per_rank``), rank 0's
    ``.metadata`` beside."""
    regions = _files_per_process(layout, "rank")
    return [(len(r) + (1 if k == 0 else 0), r) for k, r in enumerate(regions)]


def _torch_save(layout, files):
    """DLIO's ``pt_save``: ``torch.save`` of each of the rank's DLIO files."""
    return [(len(r), r) for r in _files_per_process(layout, "dlio")]


def _coordinated(layout, files):
    """Shared files (``files`` of them, ranks in blocks of consecutive ranks), each rank's
    region in its block's file: one metadata operation per rank (its collective open)."""
    per = -(-layout.world // files)
    return [(1, [(r // per, layout.rank_bytes(r))]) for r in range(layout.world)]


#: writer -> its files: f(layout, shared files) -> per rank (metadata ops, [(file, bytes)])
WRITERS = {"dcp": _dcp, "torch_save": _torch_save, "coordinated": _coordinated}


@dataclass(frozen=True)
class Case:
    """One phase of one checkpoint: a platform (with its checkpoint costs), a layout, a
    writer, ``write`` or ``read``."""
    platform: object
    costs: CkptCosts
    layout: Layout
    writer: str
    phase: str
    files: int = 1


def _server_bytes(p, regions):
    """Bytes per server of a rank's [(file, bytes)]: ``file`` placement puts a file whole on
    the server its name hashes to (GlusterFS's distribute, an object store; here a
    Fibonacci hash of its index); ``stripe`` spreads it over ``stripe_count`` servers from
    there."""
    out = np.zeros(p.servers)
    for f, n in regions:
        first = (((f + 1) * 0x9E3779B97F4A7C15) % (1 << 64) >> 32) % p.servers
        if p.placement == "stripe":
            k = min(p.stripe_count, p.servers)
            out[(first + np.arange(k)) % p.servers] += n / k
        else:
            out[first] += n
    return out


_PER_RANK = {}


def _per_rank(case):
    """The writer's per-rank files of the case's layout, computed once per layout."""
    L = case.layout
    key = (L.model, L.world, L.scale, case.writer, case.files)
    if key not in _PER_RANK:
        _PER_RANK[key] = lookup(WRITERS, case.writer, "writer")(L, case.files)
    return _PER_RANK[key]


def plan(case):
    """Per actor: (members, node host index, metadata ops per rank, files per rank,
    bytes per server summed over members, bytes of the busiest member); and (group,
    per_host)."""
    p, L = case.platform, case.layout
    per_rank = _per_rank(case)
    group, per_host = group_layout(p, L.world)
    actors = []
    for a in range(-(-L.world // group)):
        members = range(a * group, min(L.world, (a + 1) * group))
        sb = np.zeros(p.servers)
        ops = files = 0
        busiest = 0.0
        for r in members:
            n_ops, regions = per_rank[r]
            sb += _server_bytes(p, regions)
            ops, files = max(ops, n_ops), max(files, len(regions))
            busiest = max(busiest, float(sum(n for _, n in regions)))
        actors.append((len(members), a * group // (p.ranks_per_node * per_host), ops,
                       files, sb, busiest))
    return actors, group, per_host


def _build(sg, zone, k, case, actors, group, per_host):
    """Hosts and links of case ``k``: the nodes (per_host nodes per host), the servers
    (each link the phase's bandwidth) and the metadata service (a link of ops/s)."""
    p, c = case.platform, case.costs
    nodes = max(a[1] for a in actors) + 1
    cores = p.node_cores * per_host / group          # in actors' units
    hosts = []
    for i in range(nodes):
        h = zone.create_host(f"k{k}n{i}", FLOPS * min(1.0, cores))
        h.core_count = max(1, int(cores))
        hosts.append(h)
    bps = c.write_bps if case.phase == "write" else p.server_bps
    servers = [zone.create_host(f"k{k}s{j}", FLOPS) for j in range(p.servers)]
    mds = zone.create_host(f"k{k}m", FLOPS)
    # no link latency: a checkpoint's flows are GiB, and SimGrid (3.32, CM02) shares a
    # server's link past its bandwidth between flows whose routes carry a latency
    link = {h.name: zone.create_link(f"k{k}l{h.name}", p.nic_bps * per_host) for h in hosts}
    link.update({s.name: zone.create_link(f"k{k}l{s.name}", bps) for s in servers})
    ops = c.metadata_ops if math.isfinite(c.metadata_ops) else 1e15
    link[mds.name] = zone.create_link(f"k{k}lm", ops)
    for s in servers + [mds]:
        for h in hosts:
            zone.add_route(s.netpoint, h.netpoint, None, None,
                           [sg.LinkInRoute(link[s.name]), sg.LinkInRoute(link[h.name])], True)
    # one process's stream cap: its flows leave from a host of its own whose link carries
    # its members' streams, then the node's link and the server's
    cap = c.process_write_bps if case.phase == "write" else c.process_read_bps
    streams = [None] * len(actors)
    if math.isfinite(cap):
        for a, act in enumerate(actors):
            h = streams[a] = zone.create_host(f"k{k}p{a}", FLOPS)
            lk = zone.create_link(f"k{k}lp{a}", cap * act[0])
            for s in servers:
                zone.add_route(s.netpoint, h.netpoint, None, None,
                               [sg.LinkInRoute(link[s.name]),
                                sg.LinkInRoute(link[hosts[act[1]].name]),
                                sg.LinkInRoute(lk)], True)
    return hosts, servers, mds, streams


def _ns(c, wc, write):
    """CPU per byte a rank spends on its node's cores: its writer's and the file-system
    client's."""
    return (wc.write_ns_per_byte + c.client_write_ns) if write else \
        (wc.read_ns_per_byte + c.client_read_ns)


def _actor(sg, case, hosts, servers, mds, stream, act, ends, a):
    """One actor: metadata, then its bytes beside the writer's CPU, then fsync."""
    members, node, ops, files, sb, busiest = act
    c = case.costs
    host = hosts[node]
    write = case.phase == "write"
    wc = c.writers.get(case.writer, WriterCost())
    per_op = c.create_s if write else c.open_s
    t0 = sg.Engine.clock
    if ops:
        sg.this_actor.sleep_for(ops * per_op)
        if math.isfinite(c.metadata_ops):
            sg.Comm.sendto(host, mds, int(ops * members))
    t1 = sg.Engine.clock
    ns = _ns(c, wc, write)
    src = stream or host
    comms = [sg.Comm.sendto_async(src, servers[j], int(n)) if write else
             sg.Comm.sendto_async(servers[j], src, int(n))
             for j, n in enumerate(sb) if n >= 1]
    ex = sg.this_actor.exec_async(busiest * ns * 1e-9 * FLOPS) if ns > 0 else None
    for cm in comms:
        cm.wait()
    if ex is not None:
        ex.wait()
    t2 = sg.Engine.clock
    if write and files:
        sg.this_actor.sleep_for(files * c.fsync_s)
    ends[a] = (t0, t1, t2, sg.Engine.clock)


def _run(cases, plans):
    """In a forked child: every case on one engine; per case the actors' phase times."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(2)
    os.dup2(devnull, 2)
    try:
        import simgrid as sg  # optional, and only in the forked child (one engine each)
        e = sg.Engine(["hpcio.simulate", "--log=root.thres:critical",
                       "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"])
    finally:
        os.dup2(saved, 2)
        os.close(devnull)
    zone = sg.NetZone.create_full_zone("world")
    built = []
    for k, (case, (actors, group, per_host)) in enumerate(zip(cases, plans)):
        built.append((actors, group, per_host, _build(sg, zone, k, case, actors, group,
                                                      per_host)))
    zone.seal()
    outs = []
    for k, (case, (actors, group, per_host, (hosts, servers, mds, streams))) in \
            enumerate(zip(cases, built)):
        ends = [None] * len(actors)
        outs.append((ends, actors, group))
        for a, act in enumerate(actors):
            sg.Actor.create(f"k{k}a{a}", hosts[act[1]], _actor, sg, case, hosts, servers,
                            mds, streams[a], act, ends, a)
    e.run()
    return [(np.array(ends, dtype=float), group) for ends, _, group in outs]


def _fork(cases, plans):
    """Run ``cases`` in a forked child (SimGrid keeps one engine per process)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            payload = ("ok", _run(cases, plans))
        except BaseException as e:
            payload = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
        with os.fdopen(wfd, "wb") as f:
            pickle.dump(payload, f)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    if not data:
        raise HpcioError("the SimGrid engine died")
    payload = pickle.loads(data)
    if payload[0] != "ok":
        if os.environ.get("HPCIO_DEBUG"):
            print(payload[2])
        raise HpcioError(f"the checkpoint simulation failed: {payload[1]}")
    return payload[1]


def _limit(case, ends, actors):
    """Each resource's share of the wall time, and the largest: what set the time."""
    p, c = case.platform, case.costs
    wall = float((ends[:, 3] - ends[:, 0]).max())
    total = sum(float(a[4].sum()) for a in actors)
    bps = c.write_bps if case.phase == "write" else p.server_bps
    server = max(float(sum(a[4][j] for a in actors)) for j in range(p.servers)) / bps
    per_node = {}
    for a in actors:
        per_node[a[1]] = per_node.get(a[1], 0.0) + float(a[4].sum())
    _, per_host = group_layout(p, case.layout.world)
    nic = max(per_node.values()) / (p.nic_bps * per_host) if per_node else 0.0
    ns = _ns(c, c.writers.get(case.writer, WriterCost()), case.phase == "write")
    ranks_node = min(p.ranks_per_node, case.layout.world)
    cpu = max(a[5] for a in actors) * ns * 1e-9 * max(1.0, ranks_node / p.node_cores)
    meta = float((ends[:, 1] - ends[:, 0]).max())
    fsync = float((ends[:, 3] - ends[:, 2]).max())
    cap = c.process_write_bps if case.phase == "write" else c.process_read_bps
    stream = max(a[5] for a in actors) / cap
    shares = {"storage": server, "network": nic, "client CPU": cpu, "metadata": meta,
              "fsync": fsync, "process stream": stream}
    return wall, total, {k: v / wall if wall > 0 else 0.0 for k, v in shares.items()}


def simulate_cases(cases):
    """Per case: {wall_s, GiB_per_s, bytes, shares (resource -> fraction of the wall),
    limit, group}."""
    ok, why = available()
    if not ok:
        raise HpcioError(why)
    plans = [plan(c) for c in cases]
    outs = []
    for case, (actors, _, _), (ends, group) in zip(cases, plans, _fork(cases, plans)):
        wall, total, shares = _limit(case, ends, actors)
        outs.append({"wall_s": wall, "GiB_per_s": total / GIB / wall if wall > 0 else None,
                     "bytes": total, "shares": shares,
                     "limit": max(shares, key=shares.get), "group": group})
    return outs


def _positive(where, d, key, default=None, allow_zero=True):
    if key not in d:
        if default is not None:
            return default
        raise HpcioError(f"{where}: missing key {key}")
    v = d[key]
    if v in ("unlimited", "inf") and default is not None:
        return math.inf
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < 0 or (v == 0 and not allow_zero):
        raise HpcioError(f"{where}: {key} must be a number >= 0{'' if allow_zero else ' (> 0)'}"
                         f", not {v!r}")
    return float(v)


def parse_costs(d, where):
    """:class:`CkptCosts` from a platform's ``checkpoint`` mapping."""
    if not isinstance(d, dict):
        raise HpcioError(f"{where}: missing section checkpoint (write_mbs, create_us, "
                         f"open_us, fsync_ms, metadata_ops, writers)")
    w = d.get("writers") or {}
    if not isinstance(w, dict):
        raise HpcioError(f"{where}: checkpoint.writers must be a mapping of writer -> costs")
    writers = {}
    for name, v in w.items():
        lookup(WRITERS, name, f"{where}: checkpoint.writers")
        v = v if isinstance(v, dict) else {}
        writers[name] = WriterCost(
            _positive(f"{where}: checkpoint.writers.{name}", v, "write_ns_per_byte"),
            _positive(f"{where}: checkpoint.writers.{name}", v, "read_ns_per_byte"))
    s = f"{where}: checkpoint"
    return CkptCosts(write_bps=_positive(s, d, "write_mbs", allow_zero=False) * 1e6,
                     create_s=_positive(s, d, "create_us") * 1e-6,
                     open_s=_positive(s, d, "open_us") * 1e-6,
                     fsync_s=_positive(s, d, "fsync_ms") * 1e-3,
                     metadata_ops=_positive(s, d, "metadata_ops", default=math.inf,
                                            allow_zero=False),
                     writers=writers,
                     process_write_bps=_positive(s, d, "process_write_mbs", default=math.inf,
                                                 allow_zero=False) * 1e6,
                     process_read_bps=_positive(s, d, "process_read_mbs", default=math.inf,
                                                allow_zero=False) * 1e6,
                     client_write_ns=_positive(s, d, "client_write_ns_per_byte", default=0.0),
                     client_read_ns=_positive(s, d, "client_read_ns_per_byte", default=0.0))


def _mbs(bps):
    return "unlimited" if math.isinf(bps) else round(bps / 1e6, 3)


def costs_dict(c):
    """``c`` as the ``checkpoint`` mapping :func:`parse_costs` reads back."""
    return {"write_mbs": round(c.write_bps / 1e6, 3), "create_us": round(c.create_s * 1e6, 3),
            "open_us": round(c.open_s * 1e6, 3), "fsync_ms": round(c.fsync_s * 1e3, 4),
            "metadata_ops": "unlimited" if math.isinf(c.metadata_ops) else c.metadata_ops,
            "process_write_mbs": _mbs(c.process_write_bps),
            "process_read_mbs": _mbs(c.process_read_bps),
            "client_write_ns_per_byte": round(c.client_write_ns, 4),
            "client_read_ns_per_byte": round(c.client_read_ns, 4),
            "writers": {k: {"write_ns_per_byte": round(v.write_ns_per_byte, 4),
                            "read_ns_per_byte": round(v.read_ns_per_byte, 4)}
                        for k, v in sorted(c.writers.items())}}


#: what a calibration starts from on a platform without a checkpoint section
START = {"write_mbs": 200, "create_us": 1000, "open_us": 500, "fsync_ms": 10}


def load_ckpt_platform(path, text=None, required=True):
    """(Platform, CkptCosts, the YAML mapping) of a platform file with a ``checkpoint``
    section (without one, and not ``required``: :data:`START`)."""
    try:
        if text is None:
            with open(path) as f:
                text = f.read()
        d = yaml.safe_load(text)
    except OSError as e:
        raise HpcioError(f"{path}: cannot read the platform: {e.strerror}")
    except yaml.YAMLError as e:
        raise HpcioError(f"{path}: not YAML ({str(e).splitlines()[0]})")
    if not isinstance(d, dict):
        raise HpcioError(f"{path}: not a platform mapping")
    section = d.get("checkpoint", None if required else START)
    return parse_platform(d, path), parse_costs(section, path), d


def write_ckpt_platform(path, platform, costs, calibration, header=""):
    """A fitted platform with its ``checkpoint`` section (what :func:`load_ckpt_platform`
    reads) and ``checkpoint_calibration`` (what it was fitted on, its held-out errors),
    atomically, after ``header`` (comment lines)."""
    out = platform_dict(platform)
    out["checkpoint"] = costs_dict(costs)
    out["checkpoint_calibration"] = calibration
    data = (header + yaml.safe_dump(out, sort_keys=False)).encode()
    atomic_write(path, lambda f: f.write(data))


def make_case(platform, costs, model, world, writer, phase, scale=1.0, files=1):
    """A :class:`Case`, the layout checked (a world size not a multiple of TP x PP is one
    line) and the platform grown to hold ``world`` ranks."""
    L = Layout(load_model(model) if isinstance(model, str) else model, world, scale)
    lookup(WRITERS, writer, "--writer")
    return Case(platform.fit_ranks(world), costs, L, writer, phase, files)

