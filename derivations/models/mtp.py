"""Multi-token prediction (MTP) layers as Megatron-Core builds and runs them (``--mtp-num-layers N``).

Each MTP layer (DeepSeek-V3, arXiv:2412.19437 §2.2; Megatron-LM d98e8a64
megatron/core/transformer/multi_token_prediction.py ``MultiTokenPredictionLayer``) takes the main model's hidden
states ``h`` (or the previous MTP layer's) and the embedding of the tokens shifted by one more position:
``enorm`` and ``hnorm`` (the model's norm, width h each, L1157-1167), their concatenation ``(b, s, 2h)`` into
``eh_proj`` (a column-parallel linear 2h -> h, no bias, ``gather_output=False``, its output gathered over the
tensor-parallel ranks, L1174-1187, L1331-1359), one transformer layer of the model's own kind (the spec of the
model's last layer: a MoE layer where the model has them, MLA where it has it; ``transformer_layer`` built from
``mtp_model_layer``, L1216-1229), its ``final_layernorm`` (L1247), then the main model's output layer and a
cross-entropy on the labels shifted again (``process_mtp_loss``, L1012-1047: ``output_layer(hidden_states_list[k
+ 1])``, the loss times ``mtp_loss_scaling_factor / mtp_num_layers``, which changes no byte and no FLOP).

The output layer's weight is the main model's (no parameter of its own here: ``weight=`` the head's). The shifted
tokens' embedding is the model's embedding: Megatron-Core builds ``LanguageModelEmbedding`` on every rank that
runs MTP (models/gpt/gpt_model.py L173: ``if self.pre_process or self.mtp_process``), so under pipeline
parallelism the last stage holds a copy of the embedding weights, its gradients all-reduced with the first
stage's (distributed/finalize_model_grads.py L146); ``symbolic.strategies.PipelineParallel`` keeps the ``embed``
block on the MTP rank. On one stage the embedding is the same module: counted once.

>>> from memderive.derivations.models.architectures import LLAMA, build_graph
>>> from memderive.symbolic.derive import parameters
>>> g = build_graph(LLAMA, mtp_layers=1)
>>> [blk.name for blk in g.blocks]
['embed', 'layer', 'mtp', 'head']
>>> parameters(g, blocks=["mtp"]).total - parameters(g, blocks=["layer"], per_repeat=True).total
2*h**2 + 3*h
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memderive.symbolic.dims import V, b, h, s
from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Block
from memderive.symbolic.mtp_layer import EH_PROJ, ENORM, FINAL_NORM, HNORM, MTP_BLOCK
from memderive.symbolic.ops import BlockBuilder
from memderive.symbolic.tensor import Tensor

__all__ = ["mtp_block", "mtp_note", "MTP_SOURCE"]

MTP_SOURCE = ("Megatron-LM d98e8a64 megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer "
              "L1157-1247 (enorm, hnorm, eh_proj 2h -> h column-parallel, the model's layer, final_layernorm), "
              "process_mtp_loss L1012-1047 (the main output layer over each MTP layer's hidden states); "
              "models/gpt/gpt_model.py L173 (the embedding built on the MTP rank)")


def mtp_note(layers: int) -> str:
    """What the graph assumes of its ``layers`` MTP layers, citing ``MTP_SOURCE`` (a graph assumption: the memory
    and time notes print it).

    >>> mtp_note(2)[:75]
    '2 multi-token prediction layers (--mtp-layers) after the decoder layers, ea'
    """
    return (f"{layers} multi-token prediction layer{'s' if layers > 1 else ''} (--mtp-layers) after the decoder "
            f"layers, each as Megatron-Core builds and runs it: {MTP_SOURCE}")


#: ``architectures.Arch`` by name only (``architectures`` imports this module).
Arch = Any


def mtp_block(arch: Arch, act: DType, dropout: frozenset[str], layers: int,
              decoder: Callable[[BlockBuilder, Arch, Tensor, frozenset[str]], Tensor],
              norm: Callable[[BlockBuilder, Arch, str, Tensor], Tensor]) -> Block:
    """The ``mtp`` block, repeated ``layers`` times: one MTP layer's ops, its transformer layer built by
    ``decoder`` (``architectures``' decoder layer) over an ``Arch`` whose layers are all of its last layer's kind
    (no dense share: DeepSeek-V3's first ``l_d`` dense layers are not the last)."""
    bb = BlockBuilder(MTP_BLOCK, (b, s, h), act)  # ``in``: the hidden states of the layer before
    embedded = Tensor("embed.out", (b, s, h), act, seq_axis=1)  # the shifted tokens' embedding (``embed`` block)
    joined = bb.concat("concat", norm(bb, arch, ENORM, embedded), norm(bb, arch, HNORM, bb.input))
    x = bb.linear(EH_PROJ, joined, h, bias=False, parallel="column")
    last = arch if arch.moe is None else replace(arch, moe=replace(arch.moe, dense_layers=False))
    x = replace(x, tp_axis=None)  # gathered over the tensor-parallel ranks (L1353), the layer's whole-h input
    x = norm(bb, arch, FINAL_NORM, decoder(bb, last, x, dropout))
    tied = arch.tied_embeddings  # the output layer's weight: the head's own, or the embedding's where tied
    weight = Tensor("embed/tokens.weight" if tied else "head/lm_head.weight", (V, h), dtype("fp32"), role="weight",
                    tp_axis=0)
    bb.cross_entropy("loss", bb.linear("lm_head", x, V, bias=False, parallel="vocab", weight=weight,
                                       note="the main model's output layer"))
    return bb.build(repeat=layers)
