"""A training run's checkpoints of an MLPerf Storage llama3 layout (``--checkpoint-workload``):
every rank writes its DLIO shard every ``--checkpoint-every`` steps through one of
:mod:`hpcio.checkpoint`'s writers, synchronously or asynchronously, and the stall that puts
into the step is the step's ``ckpt`` component.

* ``sync``: the step writes the shard (the writer's fsync included), then the ranks commit
  the checkpoint (a gather of where each tensor went; rank 0 writes ``manifest.json`` and
  ``complete``, fsync'd). The step's ``ckpt`` is all of it.
* ``async``: the step waits for the previous write if it is still in flight, copies the
  state into a host snapshot buffer allocated once, and hands the buffer to a background
  thread that writes it and commits it (its collectives on a duplicate of the world's
  communicator, which the step never uses: MPI_THREAD_MULTIPLE) while training goes on.
  The step's ``ckpt`` is the wait and the copy; the background write's own duration
  (``write_s``) and its commit are recorded per checkpoint. The last write is waited for
  after the last step (``final_wait_s``, in no step).

The state is the layout's tensors filled once with random bytes (the emulated model's
state: it does not change between checkpoints, so its CRC-32C are computed once). The
checkpoints are :mod:`hpcio.checkpoint`'s (``global_epoch1_step<global step>/``, its
manifest and ``complete``): ``python -m hpcio.checkpoint run --phase read`` restores them.

Per checkpoint each rank records its own part (``bytes``, ``write_s``: its writer's save,
``copy_s``, ``wait_s``, ``commit_s``, ``stall_s``: the step's ``ckpt``); rank 0's summary
takes the size over ranks, the write wall and stall as the slowest rank's
(:func:`summarize_checkpoints`).
"""

import copy
import os
import shutil
import threading
import time

from ..checkpoint.layout import MODELS, Layout, load_model
from ..checkpoint.run import Job, checkpoint_name, commit, placed
from ..checkpoint.state import empty_state, make_state, tensor_records
from ..checkpoint.writers import WRITERS, make_writer
from ..errors import HpcioError

__all__ = ["MODES", "check_options", "StateCheckpointer", "summarize_checkpoints"]

GIB = float(1 << 30)
#: how the step takes the checkpoint (see the module docstring)
MODES = {"sync": "the step writes the shard and commits it (fsync included)",
         "async": "the step copies the state into a host buffer; a thread writes it"}


def check_options(args):
    """One line, on every rank, for a checkpoint option that does not fit the others."""
    wl = getattr(args, "checkpoint_workload", None)
    if not wl:
        given = [f for f, d in (("--checkpoint-writer", "checkpoint_writer"),
                                ("--checkpoint-mode", "checkpoint_mode"),
                                ("--checkpoint-scale", "checkpoint_scale"))
                 if getattr(args, d, None) is not None]
        if given:
            raise HpcioError(f"{', '.join(given)}: only with --checkpoint-workload MODEL "
                             f"(the model's own checkpoint has no writer, mode or scale)",
                             everywhere=True)
        return
    if not args.checkpoint_every:
        raise HpcioError("--checkpoint-workload needs --checkpoint-every N (N > 0)",
                         everywhere=True)
    if wl not in MODELS and not wl.endswith((".yaml", ".yml")):
        raise HpcioError(f"--checkpoint-workload {wl}: unknown (one of {', '.join(MODELS)}, "
                         f"or a DLIO .yaml)", everywhere=True)
    if args.checkpoint_writer is not None and args.checkpoint_writer not in WRITERS:
        raise HpcioError(f"--checkpoint-writer {args.checkpoint_writer}: unknown (one of "
                         f"{', '.join(WRITERS)})", everywhere=True)
    if args.checkpoint_mode is not None and args.checkpoint_mode not in MODES:
        raise HpcioError(f"--checkpoint-mode {args.checkpoint_mode}: unknown (one of "
                         f"{', '.join(MODES)})", everywhere=True)
    if args.checkpoint_scale is not None and not 0 < args.checkpoint_scale <= 1:
        raise HpcioError(f"--checkpoint-scale {args.checkpoint_scale}: must be in (0, 1]",
                         everywhere=True)
    if getattr(args, "device", None) == "cuda":
        raise HpcioError("--checkpoint-workload with --device cuda: the layout's state is "
                         "host memory here; its device-to-host copy is not modelled",
                         everywhere=True)
    args.checkpoint_writer = args.checkpoint_writer or "coordinated"
    args.checkpoint_mode = args.checkpoint_mode or "sync"
    args.checkpoint_scale = args.checkpoint_scale if args.checkpoint_scale is not None \
        else 0.001


def _layout(args, world):
    try:
        return Layout(load_model(args.checkpoint_workload), world.size, args.checkpoint_scale)
    except HpcioError as e:
        raise HpcioError(f"--checkpoint-workload: {e}", everywhere=True)


def state_bytes(args, world):
    """A checkpoint's bytes over all ranks (for the space check before training)."""
    return _layout(args, world).total_bytes


class StateCheckpointer:
    """The run's checkpoints of a llama3 layout (collective construction: the writer may
    start a gloo group; the coordinated writer's communicators are a duplicate of the
    world's, so that its collectives in the background thread never meet the step's)."""

    def __init__(self, args, world, directory, seed):
        self.world, self.directory = world, directory
        self.mode, self.every = args.checkpoint_mode, args.checkpoint_every
        self.layout = _layout(args, world)
        self.comm = world.comm.Dup()
        w = copy.copy(world)
        w.comm = self.comm
        self.job = Job(w, self.layout, {}, None, world.rank)  # the writers' defaults
        self.writer = make_writer(args.checkpoint_writer, self.job)
        if self.mode == "async" and args.checkpoint_writer == "dcp" and world.size > 1:
            import torch.distributed as td  # torch: loaded by the DCP writer just now
            self.writer.process_group = td.new_group(backend="gloo")  # not the step's
        if world.rank == 0:  # a replaced run's checkpoints (--force): none left to mix with
            for n in os.listdir(directory):
                if n.startswith("global_epoch"):
                    shutil.rmtree(os.path.join(directory, n))
        world.comm.Barrier()
        self.files = self.layout.files(world.rank)
        self.state = make_state(self.files, seed, world.rank)
        self.crcs = tensor_records(self.state, self.files)
        self.bytes = sum(x.numel() * x.element_size() for x in self.state.values())
        self.snapshot = empty_state(self.files) if self.mode == "async" else None
        for x in (self.snapshot or {}).values():  # its pages faulted in now, not in a step
            x.zero_()
        self._thread = None
        self._pending = None  # (record, name, result box) of the write in flight

    def _save(self, path, state, index):
        os.makedirs(path, exist_ok=True)
        return self.writer.save(path, state, self.files, index)

    def _commit(self, rec, path, where):
        """Collective: rank 0 writes the manifest and ``complete`` once every rank's shard
        is durable."""
        t0 = time.perf_counter()
        gathered = self.comm.gather(placed(where, self.crcs, self.world.rank), root=0)
        if self.world.rank == 0:
            commit(path, self.writer, self.layout, [w for ws in gathered for w in ws],
                   mode=self.mode, global_step=rec["global_step"])
        self.comm.Barrier()  # the checkpoint is complete on every rank's clock
        return time.perf_counter() - t0

    def _finish_pending(self):
        """Wait for the write in flight (if any, and its commit): the seconds waited."""
        if self._pending is None:
            return 0.0
        rec, box = self._pending
        t0 = time.perf_counter()
        self._thread.join()
        wait = time.perf_counter() - t0
        self._thread, self._pending = None, None
        if "error" in box:
            raise box["error"]
        rec["write_s"], rec["commit_s"] = box["write_s"], box["commit_s"]
        return wait

    def checkpoint(self, gstep):
        """Checkpoint at global step ``gstep`` (0-based: ``global_epoch1_step<gstep+1>``);
        returns this rank's record (its ``stall_s`` is the step's ``ckpt``)."""
        t0 = time.perf_counter()
        name = checkpoint_name(gstep + 1)
        path = os.path.join(self.directory, name)
        index = (gstep + 1) // self.every
        rec = {"index": index, "name": name, "global_step": gstep + 1, "mode": self.mode,
               "writer": self.writer.name, "bytes": self.bytes,
               "checkpoint_bytes": self.layout.total_bytes}
        if self.mode == "sync":
            t1 = time.perf_counter()
            where = self._save(path, self.state, index)
            rec["write_s"] = time.perf_counter() - t1
            rec["commit_s"] = self._commit(rec, path, where)
            rec.update(copy_s=0.0, wait_s=0.0)
        else:
            rec["wait_s"] = self._finish_pending()
            t1 = time.perf_counter()
            for k, x in self.state.items():
                self.snapshot[k].copy_(x)
            rec["copy_s"] = time.perf_counter() - t1
            rec["write_s"] = rec["commit_s"] = None  # set once the write is joined
            box = {}

            def write():  # its collectives are on self.comm, which the step never uses
                t = time.perf_counter()
                try:
                    where = self._save(path, self.snapshot, index)
                    box["write_s"] = time.perf_counter() - t
                    box["commit_s"] = self._commit(rec, path, where)
                except BaseException as e:  # raised on the training thread at the join
                    box["error"] = e
            self._pending = (rec, box)
            self._thread = threading.Thread(target=write, name=f"ckpt-{index}", daemon=True)
            self._thread.start()
        rec["stall_s"] = time.perf_counter() - t0
        return rec

    def finish(self):
        """After the last step: wait for the last write and commit it; the seconds that
        took (in no step)."""
        t0 = time.perf_counter()
        self._finish_pending()
        return time.perf_counter() - t0

    def close(self):
        if self._thread is not None:
            self._thread.join()
        self.writer.close()
        self.comm.Free()


def summarize_checkpoints(ckpts, ranks):
    """Rank 0: the ranks' records merged per checkpoint, and the run's figures. Per
    checkpoint: size (GiB, over ranks), write wall (the slowest rank's writer save),
    GiB/s (size / wall), stall (the slowest rank's step ``ckpt``: in async mode the copy,
    the wait for the previous write and its commit)."""
    by = {}
    for c in ckpts:
        by.setdefault(c["index"], []).append(c)
    rows = []
    for i in sorted(by):
        cs = by[i]
        size = cs[0]["checkpoint_bytes"] / GIB
        writes = [c["write_s"] for c in cs if c.get("write_s") is not None]
        wall = max(writes) if len(writes) == len(cs) else None
        rows.append({"index": i, "name": cs[0]["name"], "global_step": cs[0]["global_step"],
                     "mode": cs[0]["mode"], "writer": cs[0]["writer"], "size_GiB": size,
                     "write_s": wall, "write_GiB_per_s": size / wall if wall else None,
                     "stall_s": max(c["stall_s"] for c in cs),
                     "copy_s": max(c["copy_s"] for c in cs),
                     "wait_s": max(c["wait_s"] for c in cs),
                     "commit_s": max(c.get("commit_s") or 0.0 for c in cs),
                     "ranks": len(cs)})

    def mean(k):
        v = [r[k] for r in rows if r[k] is not None]
        return sum(v) / len(v) if v else None
    return {"count": len(rows), "mode": rows[0]["mode"] if rows else None,
            "writer": rows[0]["writer"] if rows else None,
            "size_GiB": rows[0]["size_GiB"] if rows else None,
            "stall_s_mean": mean("stall_s"), "write_s_mean": mean("write_s"),
            "write_GiB_per_s_mean": mean("write_GiB_per_s"),
            "seconds": sum(r["stall_s"] for r in rows),
            "per_checkpoint": rows,
            "definitions": {
                "write_s": "slowest rank's writer save of its shard (fsync included); in "
                           "async mode the background thread's, beside training",
                "stall_s": "slowest rank's step ckpt component: sync = write + commit; "
                           "async = wait for the previous write (and its commit) still in "
                           "flight + the copy into the snapshot buffer",
                "commit_s": "manifest.json and complete after every rank's shard is "
                            "durable (rank 0, after a gather); in async mode in the "
                            "background thread",
                "write_GiB_per_s": "checkpoint GiB (all ranks) / write_s"}}
