"""``--offload-params``: FSDP CPU offload of the parameters themselves.

torch FSDP2's ``CPUOffloadPolicy`` (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``, class
``CPUOffloadPolicy``: "offloads parameters, gradients, and optimizer states to CPU. Sharded parameters are copied
host-to-device before all-gather. The all-gathered parameters are freed according to ``reshard_after_forward``.
Sharded gradients are copied device-to-host in backward, and the optimizer step runs on CPU"), FSDP1's
``CPUOffload(offload_params=True)`` (``torch/distributed/fsdp/api.py``) and DeepSpeed ZeRO-3's ``offload_param``
(``deepspeed/runtime/zero/offload_config.py``, ``DeepSpeedZeroOffloadParamConfig``: "valid only with stage 3").

What lives where, per GPU, with every transformer layer its own FSDP unit and the root holding the rest
(torchtune's and torchtitan's wrapping, ``fully_shard`` on each layer, then on the model):

* host: the sharded parameters (fp32 under mixed precision: FSDP's ``MixedPrecisionPolicy`` casts them to
  ``param_dtype`` when it all-gathers, so the sharded fp32 parameters are the master copy), their sharded
  gradients and the optimizer states, each 1/d. The gradients are in the sharded parameters' dtype
  (``_fsdp_collectives.py`` ``foreach_reduce``: ``reduce_output = _to_dtype_if_needed(reduce_output, orig_dtype)``,
  then ``new_sharded_grad.to(torch.device("cpu"))``) and torch's optimizers make their states ``zeros_like`` the
  parameter: all fp32, except under ``--precision pure`` (a 16-bit model, no ``MixedPrecisionPolicy``), where all
  three are in the weights' dtype;
* GPU: the gathered 16-bit weights of the root (embeddings, final norm, head: the root is not resharded after
  forward, ``fully_shard``'s docstring) and of the one layer computing.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=8, offload_params=True)
>>> [t.path for t in e.quantity("model_state_bytes").breakdown.terms]
['model_states/gathered_weights/root', 'model_states/gathered_weights/layer']
>>> e.number("offloaded_bytes") == 16 * e.number("parameters")
True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from memderive.derivations.options import Options
from memderive.derivations.quantities.model_states import (OPTIMIZERS, factored_state_bytes, factored_state_elements,
                                                           master_bytes, optimizer_state_bytes, zero_ranks)
from memderive.symbolic.derive import Breakdown, Term, parameters
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.dims import l, l_a, l_d, l_e, l_f, l_m
from memderive.symbolic.expr import Max, Min, const, prod, total
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph
from memderive.symbolic.mtp_layer import MTP_BLOCK

__all__ = ["offload_params_states", "gathered_weights", "largest_kind", "PARAM_OFFLOAD_CITATION", "PARAM_OFFLOAD_NOTES",
           "MTP_UNIT_NOTE"]

PARAM_OFFLOAD_CITATION = Citation("pytorch-fsdp-offload", "CPUOffloadPolicy; fully_shard: the root not resharded "
                                  "after forward", also=(Citation("deepspeed-offload-config",
                                                                  "DeepSpeedZeroOffloadParamConfig"),))
PARAM_OFFLOAD_NOTES = (
    "--offload-params (FSDP CPUOffloadPolicy, DeepSpeed ZeRO-3 offload_param): parameters, gradients and "
    "optimizer states in CPU memory, each sharded over the d ranks, reported as offloaded_bytes; the GPU holds "
    "the gathered weights of the root (embeddings, final norm, head) and of the one layer computing",
    "each layer its own FSDP unit (torchtune, torchtitan); a layer's unsharded gradient before its "
    "reduce-scatter and copy to the host, and a next layer prefetched on another CUDA stream, are not counted",
)


def _own_unit(block: Block) -> bool:
    """Whether ``block`` is gathered one repeat at a time while it runs, then resharded: the decoder layers, and the
    multi-token prediction layers however many (each a ``MultiTokenPredictionLayer`` around a ``TransformerLayer``,
    Megatron-FSDP's unit module: ``MTP_UNIT``); the rest is the root. Megatron-FSDP keeps an MTP layer's projection
    and norms (2h^2 + 3h) in its root: counted here with the MTP layer's unit, the peak is the same where that unit is
    the largest (an MTP layer of the model's largest kind, DeepSeek-V3's MoE layer), 2h^2 + 3h short where a decoder
    layer outweighs it."""
    return block.name == MTP_BLOCK or block.repeat != const(1)


#: Megatron-FSDP's unit modules: each gathered while it runs and resharded after; the rest of the model one root unit.
MTP_UNIT = Citation("megatron-core-fsdp-adapter", "FullyShardedDataParallel.__init__: fsdp_unit_modules "
                    "defaults to [TransformerLayer] under optim_grads_params")
#: What ``gathered_weights`` assumes of a model with multi-token prediction layers (``--mtp-layers``).
MTP_UNIT_NOTE = ("each multi-token prediction layer its own unit too, gathered while it runs, its projection and "
                 f"norms with it (Megatron-FSDP wraps each TransformerLayer, the MTP layer's among them: {MTP_UNIT})")


def largest_kind(unit: Any) -> Any:
    """The largest layer of a block whose l layers mix kinds by counts (``l_d`` dense layers among MoE ones,
    DeepSeek-V3's first three; ``l_a`` attention layers among a hybrid's state space ones; a Mamba hybrid's
    ``l_m``, ``l_a``, ``l_f``, ``l_e``, each kind's layer alone): the block's per-layer
    count is their average, linear in the count over l, so each kind is that count at l (every layer of it) or at 0
    (none), present where the model has one (an indicator ``Min(count, 1)``, the counts whole numbers)."""
    kinds = [d for d in (l_m, l_a, l_f, l_e) if d in unit.free_symbols]
    if any(d in kinds for d in (l_m, l_f, l_e)):  # a hybrid's kinds (architectures.HYBRID_KINDS): each one's layer
        return Max(*(unit.subs({d: l if d is kind else 0 for d in kinds}) * Min(kind, 1) for kind in kinds))
    mixed = [d for d in (l_d, l_a) if d in unit.free_symbols]
    if not mixed:
        return unit
    return Max(*(unit.subs(dict(zip(mixed, at))) * prod(Min(d, 1) if v is l else Min(l - d, 1)
                                                         for d, v in zip(mixed, at))
                 for at in itertools.product((l, 0), repeat=len(mixed))))


def gathered_weights(graph: Graph, width: int, prefix: str = "model_states",
                     fewer: Callable[[Any], Any] | None = None) -> Breakdown:
    """The unsharded weights one GPU holds while computing, ``width`` bytes each: the root's (embeddings, final
    norm, head: not resharded after forward) and one unit's (the largest), each layer and each multi-token
    prediction layer its own FSDP unit (``_own_unit``); ``fewer``: the bytes a unit's gathered weights hold fewer
    than that (8-bit weights)."""
    root = total(parameters(graph, blocks=[b.name]).total for b in graph.blocks if not _own_unit(b))
    layers = [largest_kind(parameters(graph, blocks=[b.name], per_repeat=True).total * width - (fewer(b) if fewer else 0))
              for b in graph.blocks if _own_unit(b)]
    layer = layers[0] if len(layers) == 1 else Max(*layers) if layers else const(0)
    return Breakdown((Term(f"{prefix}/gathered_weights/root", root * width),
                      Term(f"{prefix}/gathered_weights/layer", layer)), "bytes")


def offload_params_states(graph: Graph, opts: Options) -> tuple[Breakdown, Breakdown]:
    """``(GPU model states, host bytes)`` under ``--offload-params``."""
    width = dtype(opts.dtype).nbytes
    gpu = gathered_weights(graph, width)
    n = parameters(graph).total
    own = OPTIMIZERS[opts.optimizer]
    factored = factored_state_elements(graph) if own.factored else 0
    d = zero_ranks(opts.cp)  # d, or d x cp under context parallelism
    # the sharded parameters: fp32 (the master copy, or the fp32 model itself), the 16-bit model under pure; the
    # gradients in their dtype (foreach_reduce casts to orig_dtype); the states without the master copy
    sharded = width if opts.precision == "pure" else dtype("fp32").nbytes
    states = (optimizer_state_bytes(opts.optimizer, opts.dtype, opts.precision)
              - master_bytes(opts.dtype, opts.precision))
    host = Breakdown((Term("offload/parameters", n * sharded / d),
                      Term("offload/gradients", n * sharded / d),
                      Term("offload/optimizer", (n * states + factored * factored_state_bytes(opts.dtype, opts.precision))
                           / d)), "bytes")
    return gpu, host
