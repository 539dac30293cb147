"""``--compile``: the activations a ``torch.compile``d training step saves, from the min-cut partitioner.

``symbolic.compile_partition`` runs AOTAutograd's partitioner rules on the ATen calls of transformers'
code (``symbolic.hf_programs``) at the step's sizes; here its saved storages become the estimate's
activation breakdown, one term per (block, op, tensor) with its count over layers. The activations per
layer are those of the layer that saves the most (the cut may differ at the first and last layer).

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-3-8b", mode="train", batch=1, seq=8, implementation="hf", compile=True)
>>> e.number("activation_bytes") < estimate("llama-3-8b", mode="train", batch=1, seq=8,
...                                         implementation="hf").number("activation_bytes")
True
"""

from __future__ import annotations

from collections import Counter

from memderive.derivations.models.model import Model
from memderive.derivations.option_table import symbol_values
from memderive.derivations.options import Options, OptionsError
from memderive.symbolic.compile_partition import partition_covered, saved_by_partitioner
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.program import LAYER_BLOCKS

__all__ = ["compiled_activations", "COMPILE_CITATION", "COMPILE_NOTES"]

COMPILE_CITATION = Citation("pytorch-min-cut-partitioner", "min_cut_rematerialization_partition, solve_min_cut, "
                            "get_default_op_list")
COMPILE_NOTES = (
    "torch.compile: activations are what AOTAutograd's min-cut partitioner saves (torch 2.13 defaults: "
    "activation_memory_budget 1.0; matmuls, the attention kernel, embedding, cat and pad never recomputed; "
    "operands of backward matmuls, reductions 4x smaller than their inputs and residual sums used far apart "
    "saved; pointwise ops and views recomputed in backward; the cut weighs bytes x 1.1^distance to backward, "
    "doubled where every user could fuse), chosen at the step's sizes, each storage counted once; Inductor's "
    "passes as it runs them (no-op casts removed, the loss's scatter made pointwise)",
    "torch.compile: not modelled: graph breaks (one graph per model; transformers' loss in a graph of its own "
    "saves the same logits), the ban of fusible chains longer than 100 ops, the buffers Inductor's generated "
    "kernels allocate, the memory of the recompute in backward",
)


def compiled_activations(graph: Graph, opts: Options, model: Model) -> tuple[Breakdown, Breakdown]:
    """The saved activations of the compiled step (all blocks) and of its heaviest layer."""
    why = partition_covered(graph)
    if why is not None:
        raise OptionsError("--compile is derived from transformers' ATen calls, spelled out for LLaMA-style and "
                           f"GPT-2 code without dropout (--no-dropout); here {why}")
    values = {**model.values(), **symbol_values(opts)}
    saved = saved_by_partitioner(graph, values, opts.dtype)
    counts: Counter = Counter()
    sample = {}
    layers: Counter = Counter()
    for x in saved:
        scope, _, path = x.where.partition(" ")
        block = scope.rstrip("0123456789") or scope
        label = f"activations/{block}/{path}:{x.tensor.name}" if path else f"activations/{block}:{x.tensor.name}"
        counts[label] += 1
        sample[label] = x.tensor
        if block in LAYER_BLOCKS:
            layers[scope] += x.nbytes
    total = Breakdown(tuple(Term(label, n * sample[label].nbytes) for label, n in counts.items()), "bytes")
    heaviest = max(layers, key=lambda k: layers[k]) if layers else None
    one = []
    for x in saved:
        scope, _, path = x.where.partition(" ")
        if scope == heaviest:
            one.append(Term(f"activations/layer/{path}:{x.tensor.name}", x.tensor.nbytes))
    return total, Breakdown(tuple(one), "bytes")
