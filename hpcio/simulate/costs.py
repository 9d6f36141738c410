"""What a rank's work costs in simulated time: a storage request (its queues, the servers'
latency, the transfer, the client's CPU per byte) and CPU bursts on a node's cores."""

from .topology import FLOPS

__all__ = ["WAKE_S", "request", "run_queue"]

WAKE_S = 1e-4               # a rank's CPU each time it wakes (the step loop), run-queue mode


def request(sg, case, servers, queues, host, parts, count=1, client=None, cores=None):
    """One request (``count`` of them back to back, aggregated): the per-request service
    time at each server it reads from, then its bytes from them over the links at once. A
    server serves ``threads`` requests at a time (``queues``, one semaphore per server, or
    None), a node's client ``client_threads``; the others queue (what makes many ranks'
    small requests slow down one another)."""
    held = sorted({j for j, n in parts if n > 0}) if queues else []
    if client is not None:              # the node's client first, then servers in order:
        client.acquire()                # no two requests wait on each other
    for j in held:
        queues[j].acquire()
    sg.this_actor.sleep_for(case.platform.latency_s * count)
    for j in held:
        queues[j].release()
    if client is not None:
        client.release()
    flows = [(j, int(n)) for j, n in parts if int(n) > 0]
    # the reader's bytes cost CPU on the node's cores (its file-system client's, the
    # kernel's), beside its ranks' work: after they arrive, or (``copy_overlaps``: a read
    # copying into its buffer as the bytes come in) at the same time, the slower of the two
    copy = case.params.get("cpu_s_per_byte", 0.0) * sum(n for _, n in flows)
    if copy > 0 and case.params.get("copy_overlaps") and cores is not None:
        ex = sg.this_actor.exec_async(copy * FLOPS)
        for a in [sg.Comm.sendto_async(servers[j], host, n) for j, n in flows]:
            a.wait()
        ex.wait()
        return
    if len(flows) == 1:     # one flow: one blocking call (each call is a context switch)
        sg.Comm.sendto(servers[flows[0][0]], host, flows[0][1])
    else:
        for a in [sg.Comm.sendto_async(servers[j], host, n) for j, n in flows]:
            a.wait()
    if cores is not None:
        cores(copy)


def run_queue(sg, case, slots):
    """CPU work on a node's cores: shared fluidly (SimGrid's own sharing) or, with a
    quantum, as a run queue: each burst holds a core for at most one quantum, then queues
    again behind the others, so a short burst (a rank waking) waits for the quanta ahead
    of it even before the cores are saturated."""
    q = case.platform.cpu_quantum_s

    def run(seconds):
        if seconds <= 0:
            return
        if not q or slots is None:
            sg.this_actor.execute(seconds * FLOPS)
            return
        while seconds > 1e-12:
            d = min(q, seconds)
            slots.acquire()
            sg.this_actor.execute(d * FLOPS)
            slots.release()
            seconds -= d
    return run
