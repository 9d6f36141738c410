"""What each rank of a checkpoint holds, as DLIO computes it for MLPerf Storage's llama3
workloads: the model's shape, TP x PP x DP, the ZeRO stage, fp16 model and fp32 optimizer.

The formulas are DLIO's (``dlio_benchmark/checkpointing/base_checkpointing.py`` of
argonne-lcf/dlio_benchmark at e1919d7b6ccffbe15143cd616517da9e5d7b26a7), so that a size
here is the size DLIO reports, byte for byte (tests/test_checkpoint.py checks llama3-8b and
-70b against the rules' 105 GB and 912 GB; DLIO's "GB" are GiB):

* parameters ``= 2·vocab·h + L·(h + h·(h + 2·dkv) + h² + h + 2·ffn·h + ffn·h) + h``
  (embedding and lm_head, then per layer the input norm, QKV, the dense O matrix, the
  post-attention norm and the gated MLP; ``dkv = h / heads · kv_heads``);
* ranks: ``tp = rank % TP``, ``pp = (rank // TP) % PP``, ``dp = rank // (TP·PP)``, and DP is
  the world size over TP·PP (as DLIO takes it when a config does not fix it);
* layers ``0 .. L+2`` (0 the embedding, L+1 the lm_head, L+2 the final norm) split over the
  pipeline stages, the first stage from 0, the last to L+2; each tensor divided by TP, and
  by DP under ZeRO-3; under ZeRO-1/2 only DP rank 0 holds (and writes) the model;
* optimizer per rank: ``[n, 5h, n, 5h, n, 5h]`` fp32 tensors, ``n = params // (DP·TP·PP)``
  (fp32 master weights and the two Adam moments);
* files per rank, in ``global_epoch{e}_step{s}/``: ``zero_pp_rank_{dp}_mp_rank_{mp}_optim_states``
  for every rank; ZeRO-3 (and 0): ``zero_pp_rank_{dp}_mp_rank_{mp}_model_states``;
  ZeRO-1/2 on DP rank 0: ``layer_{i}-model_{mp}_model_states`` per layer when PP > 1, else
  ``model_{mp}_model_states``; ZeRO-0: only ranks below TP·PP hold anything.

``scale`` multiplies every tensor's element count (rounded, at least one element): the
ranks, their files and their tensors stay as DLIO lays them out, only smaller, so the 8b
layout runs on a workstation (``--scale 0.01`` is 1.05 GiB per checkpoint in all).
"""

import os
from dataclasses import dataclass
from functools import cached_property

from ..errors import HpcioError, lookup
from ..workloads import read_yaml

__all__ = ["MODELS", "DTYPES", "Model", "TensorSpec", "ShardFile", "Layout", "load_model",
           "GIB"]

GIB = float(1 << 30)
_HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")
#: the shipped workloads: name -> mlcommons/storage's config file (see each file's header)
MODELS = {f[:-5]: os.path.join(_HERE, f) for f in sorted(os.listdir(_HERE))
          if f.endswith(".yaml")}
#: DLIO's datatype names -> (numpy/torch name, bytes per element)
DTYPES = {"fp16": ("float16", 2), "bf16": ("bfloat16", 2), "fp32": ("float32", 4),
          "fp64": ("float64", 8), "int8": ("int8", 1), "uint8": ("uint8", 1)}


@dataclass(frozen=True)
class Model:
    """A transformer as DLIO's checkpoint workload describes it."""

    name: str
    num_layers: int
    vocab_size: int
    hidden_size: int
    ffn_hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    tp: int = 1
    pp: int = 1
    zero_stage: int = 0
    model_datatype: str = "fp16"
    optimizer_datatype: str = "fp32"
    source: str = ""

    @classmethod
    def from_config(cls, cfg, name, source=""):
        """From a DLIO workload mapping (its ``model:`` section)."""
        try:
            m = cfg["model"]
            t, par = m["transformer"], m.get("parallelism") or {}
            model = cls(name=name, num_layers=int(m["num_layers"]),
                        vocab_size=int(t["vocab_size"]), hidden_size=int(t["hidden_size"]),
                        ffn_hidden_size=int(t["ffn_hidden_size"]),
                        num_attention_heads=int(t["num_attention_heads"]),
                        num_kv_heads=int(t["num_kv_heads"]),
                        tp=int(par.get("tensor", 1)), pp=int(par.get("pipeline", 1)),
                        zero_stage=int(par.get("zero_stage", 0)),
                        model_datatype=str(m.get("model_datatype", "fp16")),
                        optimizer_datatype=str(m.get("optimizer_datatype", "fp32")),
                        source=source)
        except (KeyError, TypeError, ValueError) as e:
            raise HpcioError(f"{source or name}: not a DLIO transformer checkpoint config "
                             f"(model.num_layers, model.transformer.*: {e})", everywhere=True)
        for dt in (model.model_datatype, model.optimizer_datatype):
            lookup(DTYPES, dt, f"datatype in {source or name}")
        if min(model.num_layers, model.hidden_size, model.tp, model.pp,
               model.num_attention_heads) < 1 or model.zero_stage not in (0, 1, 2, 3):
            raise HpcioError(f"{source or name}: layers, hidden size, heads, TP and PP must "
                             f"be >= 1 and zero_stage 0..3", everywhere=True)
        return model

    @property
    def mp(self):
        """Model-parallel ranks: TP x PP."""
        return self.tp * self.pp

    def num_parameters(self):
        """DLIO's ``get_num_parameters``."""
        h, f, L = self.hidden_size, self.ffn_hidden_size, self.num_layers
        dkv = h // self.num_attention_heads * self.num_kv_heads
        embedding = self.vocab_size * h
        per_layer = h + h * (h + 2 * dkv) + h * h + h + 2 * f * h + f * h
        return embedding + per_layer * L + h + embedding

    def layer_parameters(self, index, dp):
        """Element counts of layer ``index``'s tensors on one rank (DLIO's
        ``get_layer_parameters``)."""
        h, f, L, tp = self.hidden_size, self.ffn_hidden_size, self.num_layers, self.tp
        dkv = h // self.num_attention_heads * self.num_kv_heads
        shard = dp if self.zero_stage >= 3 else 1
        if index in (0, L + 1):  # embedding, lm_head
            return [h * self.vocab_size // tp // shard]
        if index == L + 2:  # final norm
            return [h // shard]
        return [h // shard, h * (h + 2 * dkv) // tp // shard, h * h // tp // shard,
                h // shard, h * 2 * f // tp // shard, h * f // tp // shard]

    def layer_range(self, pp_rank):
        """(first, last) layer index of pipeline stage ``pp_rank`` (DLIO's
        ``get_layer_index``)."""
        per, rem = divmod(self.num_layers, self.pp)
        if pp_rank < rem:
            start = pp_rank * (per + 1) + 1
            end = start + per
        else:
            start = rem * (per + 1) + (pp_rank - rem) * per + 1
            end = start + per - 1
        if pp_rank == self.pp - 1:
            end = self.num_layers + 2
        if pp_rank == 0:
            start = 0
        return start, end


def load_model(name):
    """A shipped workload by name (``llama3_8b``), or a DLIO config file's path."""
    if name in MODELS or not (os.sep in name or name.endswith((".yaml", ".yml"))):
        path = lookup(MODELS, name, "--model")
        label = name
    else:
        path, label = name, os.path.splitext(os.path.basename(name))[0]
    cfg = read_yaml(path, f"--model {name}")
    return Model.from_config(cfg if isinstance(cfg, dict) else {}, label, path)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a rank's state: its name (unique in the job), DLIO datatype, elements."""

    key: str
    dtype: str
    numel: int

    @property
    def nbytes(self):
        return self.numel * DTYPES[self.dtype][1]


@dataclass(frozen=True)
class ShardFile:
    """One of DLIO's files of a rank, and the tensors it holds."""

    name: str  # DLIO's name without ".pt", unique in the checkpoint
    tensors: tuple

    @property
    def nbytes(self):
        return sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class Layout:
    """Model x world size x scale: every rank's files and tensors (pure: every rank
    computes it alike, and a restore checks a checkpoint's against its own)."""

    model: Model
    world: int
    scale: float = 1.0

    def __post_init__(self):
        mp = self.model.mp
        if self.world < 1 or self.world % mp:
            raise HpcioError(f"{self.model.name} needs a multiple of TP x PP = "
                             f"{self.model.tp} x {self.model.pp} = {mp} ranks, not "
                             f"{self.world}", everywhere=True)
        if not 0 < self.scale <= 1:
            raise HpcioError(f"--scale {self.scale}: must be in (0, 1]", everywhere=True)

    @property
    def dp(self):
        return self.world // self.model.mp

    def coords(self, rank):
        """(tp, pp, dp) rank of ``rank``."""
        m = self.model
        return rank % m.tp, (rank // m.tp) % m.pp, rank // m.mp

    def _n(self, numel):
        return numel if self.scale == 1 else max(1, int(round(numel * self.scale)))

    def files(self, rank):
        """Rank ``rank``'s files (DLIO's names and order: model states, then optimizer)."""
        m = self.model
        tp, pp, dp = self.coords(rank)
        mp = rank % m.mp
        if m.zero_stage == 0 and rank >= m.mp:  # DLIO: only the first DP replica saves
            return []
        out = []
        if not (m.zero_stage in (1, 2) and dp != 0):
            first, last = m.layer_range(pp)
            layers = {i: [n for n in m.layer_parameters(i, self.dp) if n > 0]
                      for i in range(first, last + 1)}

            def tensors(prefix, idx):
                return tuple(TensorSpec(f"{prefix}/layer.{i}.{j}", m.model_datatype,
                                        self._n(n))
                             for i in idx for j, n in enumerate(layers[i]))
            if m.zero_stage in (1, 2) and m.pp > 1:
                for i in layers:
                    name = f"layer_{i}-model_{mp}_model_states"
                    out.append(ShardFile(name, tensors(name, [i])))
            else:
                name = (f"model_{mp}_model_states" if m.zero_stage in (1, 2)
                        else f"zero_pp_rank_{dp}_mp_rank_{mp}_model_states")
                out.append(ShardFile(name, tensors(name, layers)))
        n = m.num_parameters() // (self.dp * m.mp if m.zero_stage > 0 else m.mp)
        if n > 0:
            name = f"zero_pp_rank_{dp}_mp_rank_{mp}_optim_states"
            groups = [n, m.hidden_size * 5] * 3
            out.append(ShardFile(name, tuple(
                TensorSpec(f"{name}/optim.{k}", m.optimizer_datatype, self._n(g))
                for k, g in enumerate(groups))))
        return out

    def rank_bytes(self, rank):
        return sum(f.nbytes for f in self.files(rank))

    @cached_property
    def total_bytes(self):
        """Bytes of one checkpoint, all ranks (DLIO's ``checkpoint_size`` x 2^30)."""
        return sum(self.rank_bytes(r) for r in range(self.world))

    def split_bytes(self):
        """(model bytes, optimizer bytes) of one checkpoint, as DLIO reports them."""
        model = opt = 0
        for r in range(self.world):
            for f in self.files(r):
                if f.name.endswith("_optim_states"):
                    opt += f.nbytes
                else:
                    model += f.nbytes
        return model, opt

    def describe(self):
        """``llama3_8b: TP1 x PP1 x DP4, ZeRO-3, 4 ranks, scale 0.01``."""
        m = self.model
        return (f"{m.name}: TP{m.tp} x PP{m.pp} x DP{self.dp}, ZeRO-{m.zero_stage}, "
                f"{self.world} ranks, scale {self.scale:g}")

    def record(self):
        """What a checkpoint's manifest records of its layout (compared on restore)."""
        m = self.model
        return {"model": m.name, "world": self.world, "tp": m.tp, "pp": m.pp,
                "dp": self.dp, "zero_stage": m.zero_stage, "scale": self.scale,
                "num_parameters": m.num_parameters(), "hidden_size": m.hidden_size,
                "num_layers": m.num_layers, "vocab_size": m.vocab_size,
                "model_datatype": m.model_datatype,
                "optimizer_datatype": m.optimizer_datatype}
