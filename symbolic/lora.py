"""LoRA and DoRA adapters as graph transforms (Hu et al. 2021; Liu et al. 2024).

An adapter wraps one linear op (or several that one fused module computes, e.g. Phi-3's
``gate_up_proj``): ``y = W x + B A dropout(x) * alpha/r`` with ``A`` (r, in) and ``B`` (out, r), as
PEFT's ``lora.Linear`` computes it. Every base parameter is frozen; the adapters are trainable.
The new ops declare what they save and for whose gradient, as ``symbolic.ops`` does, so that
``RequiresGrad`` keeps exactly what autograd keeps:

* ``lora_dropout`` (p > 0): a 1-byte mask of the input, for the input's gradient;
* ``lora_A``: its input (the dropped-out copy, or the layer input itself without dropout), for A's
  gradient; ``lora_B``: A's output ``(b, s, r)``, for B's gradient; the scaling by ``alpha/r`` and the
  add save nothing.
* DoRA adds a magnitude vector ``m`` (out) per wrapped module and computes
  ``(m/||W + BA|| - 1) W x + m/||W + BA|| * B A x * alpha/r`` with the norm detached (PEFT's
  ``DoraLinearLayer``): the division saves the norm ``(out,)``, the two products save ``W x`` and
  ``B A x`` for m's gradient and the scales ``m/n - 1`` and ``m/n`` ``(1, out)`` for theirs. PEFT's
  ``B A`` through an identity matrix is only used detached: freed after forward, never held.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.dims import b, s, h, r
>>> from memderive.symbolic.dtypes import dtype
>>> from memderive.symbolic.derive import parameters
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.linear("attn/q", bb.input, h, bias=False)
>>> g = LoRA(r, (Adapter("q_proj", ("attn/q",)),))(Graph("toy", (bb.build(),)))
>>> parameters(g).where(lambda p: "lora" in p).total
2*h*r
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.graph import Flop
from memderive.symbolic.ops import PARAM_DTYPE, linear_flops, matmul_rows, pointwise_flops
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.split_fused import SplitFused
from memderive.symbolic.tensor import Tensor

__all__ = ["Adapter", "LoRA", "ParamLoRA", "SplitFused", "ADAPTER_MARK"]

#: Adapter parameters carry this in their names; everything else is the frozen base.
ADAPTER_MARK = ".lora_"
BOOL = dtype("bool")


def _adapted(graph: Graph, blocks: tuple[Block, ...], name: str) -> Graph:
    """``graph`` with its adapted ``blocks``, every parameter but the adapters' frozen."""
    frozen = {f"{blk.name}/{x.name}" for blk in blocks for op in blk.ops for x in op.params
              if ADAPTER_MARK not in x.name}
    return replace(graph, blocks=blocks, frozen=graph.frozen | frozenset(frozen), strategies=graph.strategies + (name,))


@dataclass(frozen=True, slots=True)
class Adapter:
    """One PEFT-wrapped module: its ``name`` (``q_proj``), the linear ops it computes, its block;
    ``kind`` ``embedding``: PEFT's ``lora.Embedding`` on an embedding op."""

    name: str
    paths: tuple[str, ...]
    block: str = "layer"
    kind: str = "linear"


@dataclass(frozen=True, slots=True)
class LoRA(Strategy):
    """Wrap ``adapters`` with rank-``rank`` LoRA (DoRA with ``dora``); freeze every base parameter.

    Under tensor parallelism the adapter follows its base: a column-parallel base splits B's
    output features, a row-parallel one A's input features.
    """

    rank: Any
    adapters: tuple[Adapter, ...]
    dropout: bool = False
    dora: bool = False

    @property
    def name(self) -> str:
        kind = "DoRA" if self.dora else "LoRA"
        rank = f" (r={self.rank})" if isinstance(self.rank, int) else ""
        return f"{kind}{rank} on {', '.join(dict.fromkeys(x.name for x in self.adapters))}"

    def __call__(self, graph: Graph) -> Graph:
        return _adapted(graph, tuple(self._wrap(blk) for blk in graph.blocks), self.name)

    def _wrap(self, blk: Block) -> Block:
        mine = [x for x in self.adapters if x.block == blk.name]
        if not mine:
            return blk
        last = {x.paths[-1]: x for x in mine}
        wrapped = {p for x in mine for p in x.paths}
        by_path = {op.path: op for op in blk.ops}
        ops: list[Op] = []
        for op in blk.ops:
            ops.append(_renamed(op, f"{op.path}.base.out") if op.path in wrapped else op)
            if op.path in last:
                ops += self._adapter(last[op.path], [by_path[p] for p in last[op.path].paths])
        return replace(blk, ops=tuple(ops))

    def _adapter(self, adapter: Adapter, bases: list[Op]) -> list[Op]:
        if adapter.kind == "embedding":
            return self._embedding(adapter, bases[0])
        x, prefix = bases[0].saved[0], bases[0].path.rsplit("/", 1)[0] + "/" + adapter.name
        outs = [op.output for op in bases]
        width = sum((o.shape[-1] for o in outs[1:]), outs[0].shape[-1])
        if bases[0].kind == "router":  # an nn.Linear router (Phi-MoE): its logits are (.., E), the weight's rows
            width = bases[0].params[0].shape[0]
        row = outs[0].tp_axis is None and bases[0].params[0].tp_axis == 1
        ops: list[Op] = []
        h_in = x
        if self.dropout:
            mask = replace(x, name=f"{prefix}.lora_dropout.mask", dtype=BOOL, role="dropout-mask")
            h_in = replace(x, name=f"{prefix}.lora_dropout.out", role="activation")
            ops.append(Op(f"{prefix}.lora_dropout", "dropout", (), (mask,), h_in, inputs=(x.name,),
                          flops=pointwise_flops(f"{prefix}.lora_dropout", "dropout", h_in)))
        w_a = Tensor(f"{prefix}.lora_A.weight", (self.rank, x.shape[-1]), PARAM_DTYPE, "weight", 1 if row else None)
        a_out = replace(x, name=f"{prefix}.lora_A.out", shape=(*x.shape[:-1], self.rank), tp_axis=None)
        ops.append(Op(f"{prefix}.lora_A", "linear", (w_a,), (h_in,), a_out, inputs=(h_in.name,),
                      saved_for=((h_in.name, (w_a.name,)),),
                      flops=linear_flops(f"{prefix}.lora_A", matmul_rows(prefix, h_in), w_a, None)))
        w_b = Tensor(f"{prefix}.lora_B.weight", (width, self.rank), PARAM_DTYPE, "weight", None if row else 0)
        b_out = replace(outs[0], name=f"{prefix}.lora_B.out", shape=(*outs[0].shape[:-1], width))
        ops.append(Op(f"{prefix}.lora_B", "linear", (w_b,), (a_out,), b_out, inputs=(a_out.name,),
                      saved_for=((a_out.name, (w_b.name,)),),
                      flops=linear_flops(f"{prefix}.lora_B", matmul_rows(prefix, a_out), w_b, None)))
        for op in bases:
            base_out = replace(op.output, name=f"{op.path}.base.out")
            ops.append(self._dora(op, base_out, b_out, w_a, w_b) if self.dora else
                       Op(f"{op.path}.lora_add", "add", (), (), op.output, inputs=(base_out.name, b_out.name),
                          flops=pointwise_flops(f"{op.path}.lora_add", "add", op.output)))
        return [replace(o, share=bases[0].share) for o in ops]

    def _embedding(self, adapter: Adapter, op: Op) -> list[Op]:
        """PEFT's ``lora.Embedding``: ``embedding(ids, A^T) @ B^T * alpha/r`` with ``lora_embedding_A``
        (r, V) and ``lora_embedding_B`` (h, r); A's gradient needs the ids, B's the gathered rows (b, s, r)."""
        ids, prefix = op.saved[0], f"{op.path.rsplit('/', 1)[0]}/{adapter.name}" if "/" in op.path else adapter.name
        vocab = op.params[0].shape[0]
        w_a = Tensor(f"{prefix}.lora_embedding_A.weight", (self.rank, vocab), PARAM_DTYPE, "weight")
        a_out = replace(op.output, name=f"{prefix}.lora_embedding_A.out",
                        shape=(*op.output.shape[:-1], self.rank), tp_axis=None)
        w_b = Tensor(f"{prefix}.lora_embedding_B.weight", (op.output.shape[-1], self.rank), PARAM_DTYPE, "weight")
        b_out = replace(op.output, name=f"{prefix}.lora_embedding_B.out")
        base_out = replace(op.output, name=f"{op.path}.base.out")
        ops = [Op(f"{prefix}.lora_embedding_A", "embedding", (w_a,), (ids,), a_out, inputs=(ids.name,),
                  saved_for=((ids.name, (w_a.name,)),)),
               Op(f"{prefix}.lora_embedding_B", "linear", (w_b,), (a_out,), b_out, inputs=(a_out.name,),
                  saved_for=((a_out.name, (w_b.name,)),),
                  flops=linear_flops(f"{prefix}.lora_embedding_B", matmul_rows(prefix, a_out), w_b, None)),
               Op(f"{op.path}.lora_add", "add", (), (), op.output, inputs=(base_out.name, b_out.name),
                  flops=pointwise_flops(f"{op.path}.lora_add", "add", op.output))]
        return [replace(o, share=op.share) for o in ops]

    def _dora(self, op: Op, base_out: Tensor, lora_out: Tensor, w_a: Tensor, w_b: Tensor) -> Op:
        """PEFT's DoRA: ``(m/n - 1) * W x + (m/n) * (B A x) * scale`` with ``n`` detached (Liu et al. 2024 §4.3)."""
        width = op.output.shape[-1]
        tp = op.output.tp_axis
        magnitude = Tensor(f"{op.path}{ADAPTER_MARK}magnitude", (width,), PARAM_DTYPE, "weight",
                           0 if tp is not None else None)
        norm = Tensor(f"{op.path}.dora.weight_norm", (width,), op.output.dtype, "dora-scale", 0 if tp is not None else None)
        scale, less_one = (Tensor(f"{op.path}.dora.{name}", (1, width), op.output.dtype, "dora-scale",
                                  1 if tp is not None else None) for name in ("scale", "scale_minus_one"))
        saved = (norm, base_out, lora_out, less_one, scale)
        needs = ((norm.name, (magnitude.name,)), (base_out.name, (magnitude.name,)), (lora_out.name, (magnitude.name,)),
                 (less_one.name, (base_out.name,)), (scale.name, (lora_out.name,)))
        # PEFT forms B A as lora_B(lora_A(I)) with an in x in identity each forward (detached: no backward).
        eye = Tensor(f"{op.path}.dora.eye", (w_a.shape[1],), op.output.dtype, "rows")
        work = (Flop(f"{op.path} B(A(I))", (eye, w_a)), Flop(f"{op.path} B(A(I))", (eye, w_b)),
                *pointwise_flops(f"{op.path}.dora", "add", op.output))
        return Op(f"{op.path}.dora", "dora", (magnitude,), saved, op.output, inputs=(base_out.name, lora_out.name),
                  saved_for=needs, flops=work)


def _renamed(op: Op, name: str) -> Op:
    """The base layer's output under a new name, in its program too (the kernel making it: the step
    timeline follows the program's names)."""
    old = op.output.name
    rename = lambda t: replace(t, name=name) if t.name == old else t  # noqa: E731
    return replace(op, output=rename(op.output), program=tuple(k.map_tensors(rename) for k in op.program))


@dataclass(frozen=True, slots=True)
class ParamLoRA(Strategy):
    """PEFT's ``ParamWrapper`` (``target_parameters``): LoRA on a parameter itself, 2-D ``(out, in)`` or a
    3-D expert stack ``(E, out, in)``, with A ``(m r E, in)`` and B ``(out, m r E)`` (E = 1 for 2-D; ``m``
    the rank multiple PEFT's rank pattern gives a fused ``gate_up_proj``). Each forward PEFT forms
    ``W' = W + (alpha/r) B A`` per expert (``torch.baddbmm``, or ``W + B A`` in 2-D) under
    ``nn.utils.parametrize.cached()`` and the module runs on ``W'``: a new tensor the size of the whole
    parameter, which the module's op saves for its input gradient where it saved nothing for the frozen
    ``W``. The factors are views of A and B (adapters in the parameter's dtype), saved at no cost. Every
    base parameter is frozen; the op's weight gradient (now of ``W'``) is computed for A's and B's.

    ``targets`` are ``(block, op path, parameter name, rank multiple)``.
    """

    rank: Any
    targets: tuple[tuple[str, str, str, int], ...]

    @property
    def name(self) -> str:
        rank = f" (r={self.rank})" if isinstance(self.rank, int) else ""
        return f"LoRA{rank} on parameters {', '.join(dict.fromkeys(t[2] for t in self.targets))}"

    def __call__(self, graph: Graph) -> Graph:
        return _adapted(graph, tuple(self._wrap(blk) for blk in graph.blocks), self.name)

    def _wrap(self, blk: Block) -> Block:
        mine = [t for t in self.targets if t[0] == blk.name]
        if not mine:
            return blk
        ops: list[Op] = []
        for op in blk.ops:
            wrapped = [t for t in mine if t[1] == op.path]
            for _, _, param, multiple in wrapped:
                delta, op = self._delta(op, param, multiple)
                ops.append(delta)
            ops.append(op)
        return replace(blk, ops=tuple(ops))

    def _delta(self, op: Op, name: str, multiple: int) -> tuple[Op, Op]:
        w = next(x for x in op.params if x.name == name)
        experts, (out, inp) = (w.shape[0], w.shape[1:]) if len(w.shape) == 3 else (1, w.shape)
        rank = multiple * self.rank * experts
        w_a = Tensor(f"{name}{ADAPTER_MARK}A.weight", (rank, inp), PARAM_DTYPE, "weight")
        w_b = Tensor(f"{name}{ADAPTER_MARK}B.weight", (out, rank), PARAM_DTYPE, "weight")
        adapted = Tensor(f"{name}.adapted", w.shape, op.output.dtype, "adapted-weight")
        product = Tensor(f"{name}.delta", w.shape, op.output.dtype, "rows")
        r_each = Tensor(f"{name}.rank", (multiple * self.rank,), op.output.dtype, "rows")
        work = (Flop(f"{name} W+BA", (product, r_each)),
                Flop(f"{name} W+BA", (product, r_each), phase="weight-grad", param=w_a.name),
                Flop(f"{name} W+BA", (product, r_each), phase="weight-grad", param=w_b.name))
        delta = Op(f"{name}.lora", "lora_delta", (w_a, w_b), (), adapted, share=op.share, flops=work)
        # the module's op now saves W' for its input's gradient, and computes W''s gradient for A and B
        needs = tuple((t, tuple(w_a.name if g == w.name else g for g in grads)) for t, grads in op.saved_for)
        needs += ((adapted.name, op.inputs or (w_a.name,)),)
        flops = tuple(replace(f, param=w_a.name) if f.param == w.name else f for f in op.flops)
        return delta, replace(op, saved=(*op.saved, adapted), saved_for=needs, flops=flops)
