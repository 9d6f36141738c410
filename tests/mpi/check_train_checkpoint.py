"""Run under mpiexec with 2 ranks: two emulated training runs in one launch, one with
synchronous and one with asynchronous checkpoints of a tiny llama3_8b layout (coordinated
writer), then every checkpoint they wrote restored by :mod:`hpcio.checkpoint`'s reader
(manifest, layout check, CRC-32C of every tensor) and compared byte for byte with the state
the run held. Prints ``OK <mode> <checkpoints>`` per run on rank 0.

Usage: check_train_checkpoint.py DATA DIR
"""

import os
import sys

import torch

from hpcio.checkpoint.run import Job, _read_one
from hpcio.checkpoint.state import make_state
from hpcio.checkpoint.writers import make_writer
from hpcio.errors import guard
from hpcio.train import trainer
from hpcio.train.options import parse_args

SCALE, SEED = "0.00002", 5


def _train(data, out, mode):
    args = parse_args(["--data", data, "--model", "emulate", "--reader", "naive",
                       "--batch", "4", "--steps", "6", "--compute-time", "0.01",
                       "--seed", str(SEED), "--progress", "off", "--out", out,
                       "--checkpoint-every", "2", "--checkpoint-workload", "llama3_8b",
                       "--checkpoint-scale", SCALE, "--checkpoint-writer", "coordinated",
                       "--checkpoint-mode", mode])
    run = trainer.setup(args)
    t = trainer.train(run)
    assert trainer.write_results(run, t) == 0
    run.watchdog.stop()
    t.stop.restore()
    return run, [c["name"] for c in t.checkpoints]


def main():
    data, top = sys.argv[1], sys.argv[2]
    for mode in ("sync", "async"):
        run, names = _train(data, os.path.join(top, mode), mode)
        world, layout = run.world, run.state_ckpt.layout
        job = Job(world, layout, {}, None, world.rank)
        writer = make_writer("coordinated", job)
        files = layout.files(world.rank)
        want = make_state(files, SEED, world.rank)
        for name in names:
            # the package's restore: manifest, layout and writer checked, CRC-32C verified
            _read_one(job, writer, run.ckpt_dir, name, files)
            got = writer.load(os.path.join(run.ckpt_dir, name), files, {"files": []})
            for k, x in want.items():
                assert torch.equal(got[k].view(torch.uint8), x.view(torch.uint8)), (mode, k)
        writer.close()
        world.comm.Barrier()
        if world.rank == 0:
            print(f"OK {mode} {len(names)}", flush=True)
    from hpcio.mpiutil import finalize
    finalize()
    return 0


if __name__ == "__main__":
    sys.exit(guard(main, prog="check_train_checkpoint"))
