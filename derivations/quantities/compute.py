"""Compute: FLOPs read off the model's graph, per micro-batch, for the whole model and per GPU.

Each op declares its FLOPs (``symbolic.graph.Flop``); ``symbolic.derive.flops`` sums them by phase.
Headline FLOPs are matrix-multiply FLOPs, 2mnk, the convention of Kaplan et al. 2020, Narayanan
et al. 2021 and ``torch.utils.flop_counter.FlopCounterMode`` (tests/test_flops_transformers.py
checks them against it for every supported family); elementwise work is reported apart.

Training (one micro-batch of b sequences of s tokens):

* ``forward_flops``: the forward pass, LM head and loss included.
* ``model_flops``: forward + backward (input and weight gradients), no recompute: what MFU counts
  (Chowdhery et al. 2022, PaLM, App. B).
* ``hardware_flops``: model FLOPs plus what recompute (and FlashAttention's backward) does again:
  what HFU counts.
* ``model_flops_per_token``: model FLOPs over the b s tokens.
* ``*_per_gpu``: the same for one GPU: tensor parallelism divides the products over t ranks,
  a pipeline stage holds its share of the layers (the first stage: embedding and l/p layers).

Inference: ``prefill_flops`` (b prompts of s tokens, logits at every position as a plain forward
computes them) and ``decode_flops_per_token`` (one new token of one sequence attending to its
s + n cached keys, its own included; ``min(s + n, w)`` in sliding-window layers).

>>> from derivations.models.presets import preset
>>> from symbolic.derive import flops
>>> from symbolic.simplify import closed_form
>>> g = preset("gpt2").graph()
>>> closed_form(flops(g, blocks=["layer"], per_repeat=True).total, g.relations)  # 24 b s h^2 + 4 b s^2 h
24*b*h**2*s + 4*b*h*s**2
"""

from __future__ import annotations

from dataclasses import replace

from derivations.options import Options
from symbolic.derive import TRAINING_PHASES
from symbolic.dims import s
from symbolic.expr import Size, const
from symbolic.formula import Citation
from symbolic.graph import Block, Graph

__all__ = ["decode_step", "whole_model", "KAPLAN", "NARAYANAN", "PALM"]

KAPLAN = Citation("Kaplan et al. 2020", "arXiv:2001.08361", "§2.1, Table 1: C ≈ 6N per token")
NARAYANAN = Citation("Narayanan et al. 2021", "arXiv:2104.04473", "§5.1, Eq. 3")
PALM = Citation("Chowdhery et al. 2022 (PaLM)", "arXiv:2204.02311", "App. B: model FLOPs utilization")
FORWARD = ("forward",)
HARDWARE = TRAINING_PHASES + ("recompute",)
ALL_PHASES = HARDWARE


def whole_model(base: Graph, options: Options) -> Graph:
    """The graph one model replica runs without model parallelism (t = p = 1), with the
    options' other transforms (recompute, FlashAttention)."""
    whole = replace(options, tp=1, pp=1, sp=False, virtual_stages=None)
    graph = base
    for strategy in whole.strategies():
        graph = strategy(graph)
    return graph


def decode_step(graph: Graph, length: Size, groups: tuple = ()) -> Graph:
    """The graph of one decode step: one token per sequence (s = 1) whose attention scores span
    ``length`` cached keys; with layer ``groups`` (``inference.layer_groups``) one layer block per
    group, ``repeat * share`` layers holding ``group.length`` keys each."""

    def one_token(length: Size):
        def shrink(x):
            shape = [const(axis).subs({s: 1}) for axis in x.shape]
            if x.role == "scores":
                shape[-1] = length
            return replace(x, shape=tuple(shape))
        return shrink

    blocks: list[Block] = []
    for blk in graph.blocks:
        if blk.name == "layer" and groups:
            blocks += [replace(blk.map_tensors(one_token(g.length)), name=f"layer/{g.name}" if g.name else "layer",
                               repeat=blk.repeat * g.share) for g in groups]
        else:
            blocks.append(blk.map_tensors(one_token(length)))
    return replace(graph, blocks=tuple(blocks))
