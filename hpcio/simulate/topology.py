"""The simulated machine of one case as SimGrid hosts and links: compute nodes, storage
servers, and the star of links between them, each server's link carrying its bandwidth."""

__all__ = ["FLOPS", "build"]

FLOPS = 1e9                 # a core's speed: CPU seconds are executed as FLOPS x s


def build(sg, zone, k, case, group, per_host):
    """Hosts and links of case ``k`` (names prefixed, so cases never share): its compute
    hosts, each standing for ``per_host`` nodes whose ranks run as actors of ``group``
    ranks (:func:`hpcio.simulate.engine.layout`), and its servers."""
    p, w = case.platform, case.workload
    nodes = -(-w.ranks // (p.ranks_per_node * per_host))
    fast = group // per_host            # ranks of a node one actor stands for
    hosts = [zone.create_host(f"c{k}n{i}", FLOPS * fast) for i in range(nodes)]
    for h in hosts:
        h.core_count = max(1, -(-p.node_cores * per_host // fast))
    servers = [zone.create_host(f"c{k}s{j}", FLOPS) for j in range(p.servers)]
    # a server's bandwidth is its link's: what it reads it streams, one flow per request
    up = {h.name: zone.create_link(f"c{k}l{h.name}", p.server_bps if h in servers
                                   else p.nic_bps * per_host).set_latency(p.nic_latency_s)
          for h in hosts + servers}
    for s in servers:
        for h in hosts:
            zone.add_route(s.netpoint, h.netpoint, None, None,
                           [sg.LinkInRoute(up[s.name]), sg.LinkInRoute(up[h.name])], True)
    return hosts, servers
