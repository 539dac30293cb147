"""``--precision autocast``: the tensors autograd saves when an fp32 model runs under ``torch.autocast``, to the
byte against transformers on CPU, and the CUDA variant's difference by hand.

The measured side (``tests/hf_saved.measure_config(autocast=True)``): transformers' ``BertModel`` (eager
attention, dropout on) in fp32, its forward under ``torch.autocast("cpu", torch.bfloat16)`` inside
``saved_tensors_hooks``, every saved storage once (the bf16 casts of the weights are counted: they are not
the parameters' storages). The derived side: memderive's graph of the same config built in fp32 under
transformers' CPU layers, then ``symbolic.autocast.Autocast("cpu")``.
"""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from memderive.derivations.estimate import estimate
from memderive.derivations.models.implementations import hf_layers
from memderive.derivations.models.resolve import resolve_model
from memderive.symbolic.autocast import FP32_OPS, Autocast
from memderive.symbolic.derive import activations, evaluate
from memderive.symbolic.dims import b, s
from memderive.symbolic.dtypes import dtype
from tests.hf_families import config
from tests.hf_saved import Shape, measure_config

SHAPES = (Shape(2, 24), Shape(3, 40))


@functools.cache
def _measured(shape: Shape) -> int:
    return measure_config(config("bert", "eager"), shape, autocast=True).nbytes


def _derived(shape: Shape, device: str) -> int:
    model = resolve_model(config("bert", "eager").to_dict())
    graph = hf_layers(model, "eager", device)(model.graph("fp32", dropout=True))
    graph = Autocast(device, dtype("bf16"), separate_qkv=True, attention="eager")(graph)
    values = {**model.values(), b: shape.b, s: shape.s}
    return sum(int(evaluate(t.expr, values)) for t in activations(graph).terms)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda z: f"b{z.b}s{z.s}")
def test_bert_under_cpu_autocast_saves_what_the_graph_says(shape: Shape) -> None:
    assert _derived(shape, "cpu") == _measured(shape)


def test_the_casts_are_saved_beside_the_fp32_tensors() -> None:
    """More than the same model saves in bf16 (a bf16 model: 235,456 B at b2 s24, measured the same way):
    the fp32 embeddings, residual stream and layer norms, and the bf16 copies of the weights and of the
    inputs the linears cast (three of the layer input for query, key and value)."""
    bf16 = measure_config(config("bert", "eager"), SHAPES[0]).nbytes
    assert bf16 == 235_456
    assert _measured(SHAPES[0]) == 414_848


def test_cpu_and_cuda_autocast_lists_differ() -> None:
    """CPU autocast runs softmax, log_softmax and layer_norm in their inputs' dtype (measured here); CUDA's
    list makes them fp32 ops (autocast_mode.cpp), which ``FP32_OPS`` says."""
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ran = {"softmax": F.softmax(x, -1).dtype, "log_softmax": F.log_softmax(x, -1).dtype,
               "layer_norm": F.layer_norm(x, (8,)).dtype, "linear": F.linear(x.float(), x.float()).dtype}
    assert set(ran.values()) == {torch.bfloat16}
    assert FP32_OPS["cpu"] == frozenset() and FP32_OPS["cuda"] == {"softmax", "log_softmax", "layer_norm"}


def test_the_cuda_variant_differs_by_hand() -> None:
    """b 2, s 24, h 64, a 4, l 2 (tests/hf_families.TINY['bert']). Per layer on CUDA: the softmax's output
    in fp32 (+2 B x b a s^2 = +9,216 B), the attention dropout's mask bool instead of a bf16 float mask
    (-1 B x b a s^2 = -4,608 B), the two hidden dropouts' masks bool instead of bf16 (-1 B x b s h twice =
    -6,144 B): -1,536 B per layer, -3,072 B for two; the embeddings' dropout mask bool instead of fp32 (-3 B x
    b s h = -9,216 B). In all -12,288 B."""
    assert _derived(SHAPES[0], "cuda") - _derived(SHAPES[0], "cpu") == -12_288


def test_estimate_runs_bert_under_autocast_and_says_where_it_cannot() -> None:
    """Eager BERT runs under ``Autocast`` (saving more than the 16-bit graph); LLaMA's layers (RMSNorm,
    rotary) are not written out: its activations in 16 bits stand in, and its assumptions say so."""
    bert = config("bert", "eager").to_dict()
    e = estimate(bert, mode="train", batch=2, seq=24, dtype="fp16", precision="autocast", implementation="hf",
                 attention="eager")
    assert any(x.startswith("torch.autocast('cuda', fp16)") for x in e.graph.strategies)
    plain = estimate(bert, mode="train", batch=2, seq=24, dtype="fp16", precision="master", implementation="hf",
                     attention="eager")
    assert e.number("activation_bytes") > plain.number("activation_bytes")
    llama = estimate("llama-2-7b", mode="train", batch=1, seq=64, dtype="bf16", precision="autocast",
                     implementation="hf")
    assert not any(x.startswith("torch.autocast") for x in llama.graph.strategies)
    assert any("are not written out" in x for x in llama.graph.assumptions)
