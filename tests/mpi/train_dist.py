"""Run under mpiexec: ranks, devices, gradients and weights after one SGD step, and the stop
vote; rank 0 prints every rank's findings as one JSON line for tests/test_dist.py."""

import json
import sys

import torch
from mpi4py import MPI

from hpcio.train.dist import init_world, make_dist, pick_device
from hpcio.train.stop import StopVote


def main(backend):
    world = init_world()
    device = pick_device(world, "cpu")
    dist = make_dist(backend, world, device)
    torch.manual_seed(0)  # same initial weights on every rank
    model = torch.nn.Linear(3, 1, bias=False)
    weight0 = model.weight.tolist()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = dist.wrap(model, opt)
    x = torch.full((2, 3), float(world.rank + 1))  # different data on every rank
    model(x).sum().backward()
    opt.step()  # Horovod exchanges the gradients here, DDP in backward
    layer = model.module if hasattr(model, "module") else model
    grad, weight = layer.weight.grad, layer.weight.detach()
    # the stop vote: only the last rank raises its flag, at step 5; all must stop together
    vote = StopVote(world.comm, every=4)
    stopped = None
    for step in range(50):
        if vote.poll(world.rank == world.size - 1 and step >= 5):
            stopped = step
            break
    settle = vote.settle(False)
    vote.close()
    dist.close()
    mine = {"rank": world.rank, "size": world.size, "local_rank": world.local_rank,
            "local_size": world.local_size, "nodes": world.nodes, "node": world.node,
            "device": str(device), "grad": grad.tolist(), "weight0": weight0,
            "weight": weight.tolist(), "stopped": stopped,
            "settle": settle}
    everyone = MPI.COMM_WORLD.gather(mine, root=0)  # one line: ranks' output may interleave
    if world.rank == 0:
        print(json.dumps(everyone), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "torch")
