"""Run under mpiexec (2 ranks in the suite, 4 in the GlusterFS lane): every checkpoint
writer writes a tiny llama3_8b checkpoint and restores it, each rank its own shard and then
its neighbour's (a rank shift of one); every restored tensor must equal the original's bytes.
Prints ``OK <writer>`` per writer on rank 0.

Usage: check_checkpoint.py DIR
"""

import os
import sys

import torch

from hpcio.checkpoint.layout import Layout, load_model
from hpcio.checkpoint.run import Job, commit, read_manifest
from hpcio.checkpoint.state import make_state
from hpcio.checkpoint.writers import WRITERS, Plan, make_writer
from hpcio.errors import guard
from hpcio.train.dist import init_world


def main():
    world = init_world()
    layout = Layout(load_model("llama3_8b"), world.size, 0.00005)
    for name in sorted(WRITERS):
        directory = os.path.join(sys.argv[1], name)
        if world.rank == 0:
            os.makedirs(directory)
        world.comm.Barrier()
        job = Job(world, layout, {"align": 4096, "round_bytes": 1 << 20}, None, world.rank)
        writer = make_writer(name, job)
        state = make_state(layout.files(world.rank), 7, world.rank)
        where = writer.save(directory, state, layout.files(world.rank), 1)
        gathered = world.comm.gather(where, root=0)
        if world.rank == 0:
            commit(directory, writer, layout, [w for ws in gathered for w in ws])
        world.comm.Barrier()
        for shift in (0, 1):
            target = (world.rank + shift) % world.size
            job.target = target
            reader = writer if shift == 0 else make_writer(name, job)
            got = reader.load(directory, layout.files(target), {"files": []})
            want = make_state(layout.files(target), 7, target)
            assert got.keys() == want.keys(), (name, shift)
            for k, t in want.items():
                assert torch.equal(got[k].view(torch.uint8), t.view(torch.uint8)), (name, k)
            if reader is not writer:
                reader.close()
        if name == "coordinated":
            if world.rank == 0:
                size = os.path.getsize(os.path.join(directory, Plan.file_name(0)))
                assert size == writer.plan.sizes[0], (size, writer.plan.sizes)
            # a restore asked with other files and alignment reads the plan it was written with
            other = make_writer(name, Job(world, layout, {"align": 1 << 16, "files": world.size,
                                                          "round_bytes": 1 << 20}, None,
                                          world.rank))
            manifest = read_manifest(directory)
            got = other.load(directory, layout.files(world.rank), manifest)
            for k, t in make_state(layout.files(world.rank), 7, world.rank).items():
                assert torch.equal(got[k].view(torch.uint8), t.view(torch.uint8)), ("plan", k)
            other.close()
        writer.close()
        world.comm.Barrier()
        if world.rank == 0:
            print("OK", name, flush=True)
    return 0


sys.exit(guard(main, prog="check_checkpoint"))
