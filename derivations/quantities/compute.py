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

>>> from memderive.derivations.models.presets import preset
>>> from memderive.symbolic.simplify import closed_form
>>> g = preset("gpt2").graph()
>>> closed_form(flops(g, blocks=["layer"], per_repeat=True).total, g.relations)  # 24 b s h^2 + 4 b s^2 h
24*b*h**2*s + 4*b*h*s**2
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memderive.derivations.memo import applied, per_graph
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, derived
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import TRAINING_PHASES, Breakdown, flops
from memderive.symbolic.dims import b, s
from memderive.symbolic.expr import Size, const
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph
from memderive.derivations.quantities.inference import inference_graph, layer_groups

__all__ = ["train_flops", "graph_flops", "infer_flops", "decode_step", "decode_graph", "whole_model", "KAPLAN", "KAPLAN_FORWARD",
           "MLA_ABSORBED", "NARAYANAN", "PALM", "HARDWARE"]

KAPLAN = Citation("kaplan-2020", "§2.1, Table 1: C ≈ 6N per token")
#: Inference is forward only: Kaplan et al.'s forward pass, 2N + 2 n_layer n_ctx d_attn FLOPs per token.
KAPLAN_FORWARD = Citation("kaplan-2020", "§2.1, Table 1: C_forward ≈ 2N + 2 n_layer n_ctx d_attn per token")
#: MLA's decode step as serving engines run it (``--mla-decode absorbed``, the default).
MLA_ABSORBED = Citation("vllm-mla-common", "module docstring, 'Data-Movement Friendly Approach (i.e. "
                        "\"_forward_decode\")': ql_nope = q_nope W_UK, MQA over [kv_c, k_pe], o = spda_o W_UV")
NARAYANAN = Citation("narayanan-2021", "§5.1, Eq. 3")
PALM = Citation("chowdhery-2022", "App. B: model FLOPs utilization")
FORWARD = ("forward",)
HARDWARE = TRAINING_PHASES + ("recompute",)
ALL_PHASES = HARDWARE


def whole_model(base: Graph, options: Options, transform: Callable[[Graph, Options], Graph] | None = None) -> Graph:
    """The graph one model replica runs without model parallelism (t = p = 1), with the
    options' other transforms (recompute, FlashAttention; fine-tuning through ``transform``, the
    estimate's own pipeline of transforms, when given)."""
    whole = derived(options, tp=1, pp=1, cp=1, sp=False, first_stage_layers=None, last_stage_layers=None)  # v kept:
    # a block recompute's share of the layers is N of each of the p v chunks' (``Options.recompute_share``)
    if transform is not None:
        return transform(base, whole)
    return applied(base, whole.strategies())


def decode_step(graph: Graph, length: Size, groups: tuple = ()) -> Graph:
    """The graph of one decode step: one token per sequence (s = 1) whose attention scores (and
    products over the cache, role ``cached-rows``) span ``length`` cached keys; with layer ``groups`` (``inference.layer_groups``) one layer block per
    group, ``repeat * share`` layers holding ``group.length`` keys each."""

    def one_token(length: Size):
        def shrink(x):
            shape = [const(axis).subs({s: 1}) for axis in x.shape]
            if x.role == "scores":
                shape[-1] = length
            elif x.role == "cached-rows":  # a product over every cached position (MLA's latent)
                shape[1] = length
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


MATMUL = ("matrix-multiply FLOPs, 2mnk (FlopCounterMode's convention); eager attention's full s x s products "
          "(causal kernels that skip masked blocks do about half of them)")


def _q(key: str, title: str, breakdown: Breakdown, graph: Graph, notes: tuple[str, ...],
       citation: Citation | None = None) -> Quantity:
    return Quantity(key, title, breakdown, graph.relations, citation, notes)


#: ``flops`` once per graph object and keywords: structures that share a graph (the ZeRO stages of a layout) share
#: its FLOPs.
graph_flops = per_graph(flops)


def train_flops(model: Model, options: Options, base: Graph, graph: Graph,
                transform: Callable[[Graph, Options], Graph] | None = None) -> list[Quantity]:
    """Training FLOPs of one micro-batch: whole model (t = p = 1) and per GPU (``graph``, the
    layout's graph: a tensor-parallel rank of the first pipeline stage); ``transform`` is the
    estimate's pipeline of transforms (fine-tuning's adapters and frozen weights included)."""
    whole = whole_model(base, options, transform)
    flops = graph_flops
    notes = (MATMUL, "one micro-batch of b sequences of s tokens")
    gpu_notes = notes + graph.assumptions
    model_flops = flops(whole, phases=TRAINING_PHASES)
    return [
        _q("forward_flops", "Forward FLOPs per micro-batch", flops(whole), whole, notes),
        _q("model_flops", "Model FLOPs per micro-batch (forward + backward)", model_flops, whole, notes, PALM),
        _q("hardware_flops", "Hardware FLOPs per micro-batch (with recompute)", flops(whole, phases=HARDWARE),
           whole, notes, NARAYANAN),
        _q("model_flops_per_token", "Model FLOPs per token", model_flops.scaled(1 / (b * s)), whole, notes, KAPLAN),
        _q("elementwise_flops", "Elementwise (non-matmul) FLOPs per micro-batch",
           flops(whole, kinds=("elementwise",), phases=HARDWARE), whole, (ELEMENTWISE_NOTE,)),
        _q("forward_flops_per_gpu", "Forward FLOPs per GPU per micro-batch", flops(graph), graph, gpu_notes),
        _q("model_flops_per_gpu", "Model FLOPs per GPU per micro-batch", flops(graph, phases=TRAINING_PHASES), graph,
           gpu_notes),
        _q("hardware_flops_per_gpu", "Hardware FLOPs per GPU per micro-batch", flops(graph, phases=HARDWARE), graph,
           gpu_notes),
    ]


ELEMENTWISE_NOTE = ("elementwise FLOPs by convention (symbolic.ops.ELEMENTWISE: one per arithmetic operation per "
                    "element, softmax 3 after Hoffmann et al. 2022 App. F, backward twice the forward)")


def last_logits(graph: Graph) -> Graph:
    """The graph with the output layer's product over the last position of each sequence only."""
    def last(x: Any) -> Any:
        return replace(x, shape=tuple(const(axis).subs({s: 1}) for axis in x.shape)) if x.role == "rows" else x

    def head(blk: Block) -> Block:
        return blk if blk.name != "head" else blk.map_ops(
            lambda op: replace(op, flops=tuple(f.map_tensors(last) for f in op.flops)) if op.path == "lm_head" else op)

    return replace(graph, blocks=tuple(map(head, graph.blocks)))


def absorbed(model: Model, options: Options) -> bool:
    """Whether a decode step runs MLA in its absorbed form (``--mla-decode``: absorbed unless expanded)."""
    return model.arch.attention == "mla" and options.mla_decode != "expanded"


def decode_graph(model: Model, options: Options, graph: Graph) -> Graph:
    """The graph a decode step runs on one GPU: ``graph`` (the inference graph of ``options``), or for
    multi-head latent attention decoded absorbed (``absorbed``) the same model with ``kv_b`` absorbed
    (``models.moe_mla.mla_attention``: the same parameters, no cached position expanded)."""
    if not absorbed(model, options):
        return graph
    return inference_graph(replace(model, arch=replace(model.arch, mla_absorbed=True)), options)


def infer_flops(model: Model, options: Options, graph: Graph) -> list[Quantity]:
    """Prefill and decode FLOPs, whole model and per GPU (``graph``: one tensor-parallel rank): a forward
    pass, 2N-style (``KAPLAN_FORWARD``); an MLA decode step absorbed unless ``--mla-decode expanded``."""
    whole = inference_graph(model, replace(options, tp=1))
    groups = layer_groups(model)
    notes = (MATMUL,)
    decode = ("one decode step: one token per sequence attending to its s + n cached keys (its own included)"
              + ("; min(s + n, w) in sliding-window layers" if model.window is not None else ""),)
    if model.arch.attention == "mla":
        decode += ((ABSORBED_NOTE if absorbed(model, options) else EXPANDED_NOTE),)
    prefill_note = ("prefill: b prompts of s tokens, logits of the last position only (generate's "
                    "logits_to_keep = 1)",)

    def per_token(g: Graph) -> Breakdown:
        return flops(decode_step(decode_graph(model, options, g), groups[0].length, groups)).scaled(1 / b)

    return [
        _q("prefill_flops", "Prefill FLOPs", flops(last_logits(whole)), whole, notes + prefill_note, KAPLAN_FORWARD),
        _q("decode_flops_per_token", "Decode FLOPs per generated token", per_token(whole), whole, notes + decode,
           KAPLAN_FORWARD),
        _q("prefill_flops_per_gpu", "Prefill FLOPs per GPU", flops(last_logits(graph)), graph, notes + prefill_note),
        _q("decode_flops_per_token_per_gpu", "Decode FLOPs per generated token per GPU", per_token(graph), graph,
           notes + decode),
    ]


ABSORBED_NOTE = ("multi-head latent attention decoded absorbed, as vLLM and SGLang run it (--mla-decode absorbed): "
                 "q_nope W_UK into the latent space, attention over the cached latent and rotary key (d_c + d_hR wide, "
                 "values d_c), each head's output through W_UV; no cached position expanded")
EXPANDED_NOTE = ("multi-head latent attention decoded expanded, as transformers runs it (--mla-decode expanded): "
                 "every cached latent through kv_b at each step")
