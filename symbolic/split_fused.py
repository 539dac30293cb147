"""``SplitFused``: a fused linear (``attn/qkv``) computed as separate ops, one per part, as models with
``q_proj``, ``k_proj``, ``v_proj`` do. Used by LoRA's adapters and by quantized checkpoints' per-module bytes, so it
lives apart from ``lora`` (which the cold path does not import)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.ops import linear_flops, matmul_rows
from memderive.symbolic.strategies import Strategy

__all__ = ["SplitFused"]


@dataclass(frozen=True, slots=True)
class SplitFused(Strategy):
    """Compute a fused linear (``attn/qkv``) as separate ops, one per part (``attn/q``, ``attn/k``,
    ``attn/v``), as models with ``q_proj``, ``k_proj``, ``v_proj`` do, so that an adapter can wrap
    one part. Each part saves the same input (stored once); parameters add up to the fused op's.
    ``parts`` are ``(path, width)``; each part's output is the view the fused op's readers use,
    named ``{op}.{part}``."""

    op: str
    parts: tuple[tuple[str, Any], ...]
    block: str = "layer"

    @property
    def name(self) -> str:
        return f"{self.op} as {', '.join(p for p, _ in self.parts)}"

    def __call__(self, graph: Graph) -> Graph:
        def split(blk: Block) -> Block:
            if blk.name != self.block or not any(op.path == self.op for op in blk.ops):
                return blk
            ops: list[Op] = []
            for op in blk.ops:
                ops += self._parts(op) if op.path == self.op else [op]
            return replace(blk, ops=tuple(ops))

        return replace(graph, blocks=tuple(map(split, graph.blocks)))

    def _parts(self, op: Op) -> list[Op]:
        x = op.saved[0]
        has_bias = any(p.role == "bias" for p in op.params)
        out: list[Op] = []
        for path, width in self.parts:
            part = path.rsplit("/", 1)[-1]
            weight = replace(op.params[0], name=f"{path}.weight", shape=(width, x.shape[-1]))
            params = (weight, replace(op.params[1], name=f"{path}.bias", shape=(width,))) if has_bias else (weight,)
            y = replace(op.output, name=f"{self.op}.{part}", shape=(*op.output.shape[:-1], width))
            work = linear_flops(path, matmul_rows(path, x), weight, params[-1] if has_bias else None)
            out.append(Op(path, "linear", params, (x,), y, flops=work, inputs=(x.name,),
                          saved_for=((x.name, (weight.name,)),)))
        return out
