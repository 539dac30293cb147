"""Activations of one MoE layer: what autograd saves for the reference ``MoeLayer`` (experts as a loop of
linears, as transformers' eager experts) equals the graph's exact profile, to the byte, per dtype."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch

from memderive.derivations.models.architectures import LLAMA, Moe, build_graph
from memderive.symbolic.derive import activations, evaluate, saved_tensors
from memderive.symbolic.dims import E, b, f_e, f_s, k, s
from tests.reference_layers import MoeLayer, Sizes
from tests.test_saved_tensors import measured_bytes

Z = Sizes(b=2, s=16, h=64, a=4, a_kv=2, f=160)


def graph_bytes(moe: Moe, z: Sizes, strategies=(), **sizes: int) -> Counter:
    graph = build_graph(replace(LLAMA, moe=moe))
    for strategy in strategies:
        graph = strategy(graph)
    values = {**z.values(), **{symbol: sizes[str(symbol)] for symbol in (E, k, f_e, f_s) if str(symbol) in sizes}}
    by_dtype: Counter = Counter()
    for _, tensor in saved_tensors(graph.block("layer")):
        by_dtype[tensor.dtype.name] += int(evaluate(tensor.nbytes, values))
    total = activations(graph, ignore_roles=(), blocks=["layer"], per_repeat=True).total
    assert sum(by_dtype.values()) == evaluate(total, values)
    return by_dtype


@pytest.mark.parametrize(("experts", "top_k", "width", "shared"), [(4, 2, 48, 0), (8, 1, 32, 0), (6, 3, 40, 56)],
                         ids=["E4-k2", "E8-k1", "E6-k3-shared"])
def test_moe_layer_saves_what_the_graph_says(experts: int, top_k: int, width: int, shared: int) -> None:
    torch.manual_seed(0)
    layer = MoeLayer(Z, experts, top_k, width, shared=shared)
    x = torch.randn(Z.b, Z.s, Z.h, dtype=torch.bfloat16, requires_grad=True)
    got, seen = measured_bytes(lambda: layer(x), layer)
    want = graph_bytes(Moe(shared=bool(shared)), Z, E=experts, k=top_k, f_e=width, f_s=shared or 1)
    assert got == want, f"measured per dtype {dict(got)} != graph {dict(want)}; saved storages:\n{seen}"


# --- how close transformers' own sparse MoE blocks are (eager experts) ------------------------
def moe_op_bytes(config, batch: int, seq: int) -> Counter:
    """The graph's bytes of the ops under ``moe/`` (router and experts) for one layer."""
    from memderive.derivations.models.resolve import resolve_model

    model = resolve_model(config.to_dict())
    values = {**model.values(), b: batch, s: seq}
    by_dtype: Counter = Counter()
    for op, tensor in saved_tensors(model.graph(dropout=False).block("layer")):
        if op.path.startswith("moe/"):
            by_dtype[tensor.dtype.name] += int(evaluate(tensor.nbytes, values))
    return by_dtype


SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1, intermediate_size=48,
             vocab_size=100)


@pytest.mark.parametrize(("model_type", "fields", "fp32_weights"), [
    ("qwen3_moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, norm_topk_prob=True), False),
    ("qwen3_moe", dict(num_experts=6, num_experts_per_tok=3, moe_intermediate_size=32), False),
    ("olmoe", dict(num_experts=4, num_experts_per_tok=2), False),
    # Mixtral keeps the routing weights in fp32: the expert output times them is fp32, cast back before
    # index_add; the (b s k, 1) weights saved are fp32 (4 bytes) where the graph has bf16 (2 bytes)
    ("mixtral", dict(num_local_experts=4, num_experts_per_tok=2), True),
], ids=["qwen3-renormalised", "qwen3", "olmoe", "mixtral"])
def test_transformers_sparse_block_saves_what_the_graph_says(model_type: str, fields: dict,
                                                             fp32_weights: bool) -> None:
    import transformers

    from tests.reference_layers import measure

    transformers.logging.set_verbosity_error()
    config = transformers.AutoConfig.for_model(model_type, **SMALL, **fields)
    config._experts_implementation = "eager"  # the loop of linears (a grouped-mm kernel saves differently)
    torch.manual_seed(0)
    block = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).model.layers[0].mlp
    x = torch.randn(2, 16, 64, dtype=torch.bfloat16, requires_grad=True)
    m = measure(lambda: block(x), block)
    got: Counter = Counter()
    for size, dt, _ in m.storages.values():
        got[{torch.bfloat16: "bf16", torch.float32: "fp32", torch.int64: "int64"}[dt]] += size
    want = moe_op_bytes(config, 2, 16)
    if fp32_weights:
        pairs = 2 * 16 * config.num_experts_per_tok
        want += Counter({"fp32": 4 * pairs})
        want -= Counter({"bf16": 2 * pairs})
    assert got == want, m.describe()


@pytest.mark.parametrize(("experts", "top_k", "factor"), [(4, 2, "1.5"), (8, 2, "2.25")], ids=["c1.5", "c2.25"])
def test_capacity_factor_pads_each_expert(experts: int, top_k: int, factor: str) -> None:
    """Each expert computes on C = ceil(c k b s / E) slots: E=4, k=2, b s = 32, c = 1.5: C = 24 (E=8, c=2.25: 18)."""
    from fractions import Fraction
    from math import ceil

    from memderive.symbolic.experts import ExpertCapacity

    capacity = ceil(Fraction(factor) * top_k * Z.b * Z.s / experts)
    torch.manual_seed(0)
    layer = MoeLayer(Z, experts, top_k, 48, capacity=capacity)
    x = torch.randn(Z.b, Z.s, Z.h, dtype=torch.bfloat16, requires_grad=True)
    index, _ = layer.route(layer.norm2(x))
    assert max(int((index == e).sum()) for e in range(experts)) <= capacity  # no token dropped at these sizes
    got, seen = measured_bytes(lambda: layer(x), layer)
    want = graph_bytes(Moe(), Z, (ExpertCapacity(Fraction(factor)),), E=experts, k=top_k, f_e=48)
    assert got == want, f"measured per dtype {dict(got)} != graph {dict(want)}; saved storages:\n{seen}"
    plain = graph_bytes(Moe(), Z, E=experts, k=top_k, f_e=48)
    assert want["bf16"] > plain["bf16"]  # padding costs memory
