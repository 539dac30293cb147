"""What autograd saves, measured on CPU, equals what the graph says, to the byte.

Each reference layer (``tests/reference_layers.py``) runs forward inside
``saved_tensors_hooks``; saved tensors are deduplicated by storage, parameters and buffers
excluded, and the bytes are compared per dtype with the graph's exact profile
(``activations(graph, ignore_roles=())``) at the same sizes, strategies applied.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

from memderive.derivations.models.architectures import GPT, LLAMA, Arch, build_graph, with_arch
from memderive.symbolic.derive import activations, evaluate, saved_tensors
from memderive.symbolic.dims import t
from memderive.symbolic.strategies import (FlashAttention, fused_swiglu, FullRecompute, SelectiveRecompute, SequenceParallel, Strategy,
                                 TensorParallel)
from tests.reference_layers import (GPTEmbedding, GPTLayer, Head, LayerNorm, LlamaEmbedding, LlamaLayer, RMSNorm,
                                    Sizes, cuda_like_norms, measure)

TORCH_DTYPE = {"bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAME = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.bool: "bool", torch.int64: "int64"}
GPT_SIZES = Sizes()  # b=2, s=16, h=64, a=4, f=256, V=96
GQA_SIZES = Sizes(a=4, a_kv=2, f=160)  # two query heads per KV head, f != 4h
LLAMA_DROPOUT = with_arch(LLAMA, dropout=True)


def graph_bytes(arch: Arch, block: str, z: Sizes, act: str = "bf16", strategies: tuple[Strategy, ...] = (),
                **degrees: int) -> Counter:
    """Bytes per dtype of one ``block`` repeat, exact profile, evaluated at ``z``."""
    graph = build_graph(arch, activation_dtype=act)
    for strategy in strategies:
        graph = strategy(graph)
    values = z.values(**degrees)
    total = activations(graph, ignore_roles=(), blocks=[block], per_repeat=True).total
    by_dtype: Counter = Counter()
    for _, tensor in saved_tensors(graph.block(block)):
        by_dtype[tensor.dtype.name] += int(evaluate(tensor.nbytes, values))
    assert sum(by_dtype.values()) == evaluate(total, values)  # the breakdown is the same sum
    return by_dtype


def measured_bytes(run: Callable[[], torch.Tensor], *modules: torch.nn.Module) -> tuple[Counter, str]:
    with cuda_like_norms():
        m = measure(run, *modules)
        m.output.float().sum().backward()  # the reference must also run backward
    by_dtype: Counter = Counter()
    for size, dt, _ in m.storages.values():
        by_dtype[DTYPE_NAME[dt]] += size
    return by_dtype, m.describe()


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], torch.nn.Module]
    arch: Arch
    z: Sizes
    act: str = "bf16"
    strategies: tuple[Strategy, ...] = ()
    t: int = 1  # the layer is one of t tensor-parallel ranks
    sp: bool = False  # ... with sequence parallelism: its input is a (b, s/t, h) shard


def _gpt(z: Sizes = GPT_SIZES, act: str = "bf16", **kw) -> Callable[[], torch.nn.Module]:
    return lambda: GPTLayer(z, TORCH_DTYPE[act], **kw)


def _llama(z: Sizes = GQA_SIZES, act: str = "bf16", **kw) -> Callable[[], torch.nn.Module]:
    return lambda: LlamaLayer(z, TORCH_DTYPE[act], **kw)


FLASH, SELECTIVE, FULL, TP = (FlashAttention(),), (SelectiveRecompute(),), (FullRecompute(),), (TensorParallel(t),)
SP = TP + (SequenceParallel(t),)
LAYER_CASES = [
    Case("gpt", _gpt(), GPT, GPT_SIZES),
    Case("gpt-fp32", _gpt(act="fp32"), GPT, GPT_SIZES, "fp32"),
    Case("gpt-no-dropout", _gpt(dropout=False), with_arch(GPT, dropout=False), GPT_SIZES),
    Case("gpt-flash", _gpt(core="flash"), GPT, GPT_SIZES, strategies=FLASH),
    Case("gpt-selective", _gpt(recompute="selective"), GPT, GPT_SIZES, strategies=SELECTIVE),
    Case("gpt-full", _gpt(recompute="full"), GPT, GPT_SIZES, strategies=FULL),
    Case("gpt-tp2", _gpt(GPT_SIZES.rank(2)), GPT, GPT_SIZES, strategies=TP, t=2),
    Case("gpt-tp4-flash", _gpt(GPT_SIZES.rank(4), core="flash"), GPT, GPT_SIZES, strategies=FLASH + TP, t=4),
    Case("gpt-tp2-sp", _gpt(GPT_SIZES.rank(2), sp=2), GPT, GPT_SIZES, strategies=SP, t=2, sp=True),
    Case("gpt-tp4-sp-selective", _gpt(GPT_SIZES.rank(4), sp=4, recompute="selective"), GPT, GPT_SIZES,
         strategies=SELECTIVE + SP, t=4, sp=True),
    Case("llama-gqa", _llama(), LLAMA, GQA_SIZES),
    Case("llama-mha-fp32", _llama(GPT_SIZES, "fp32"), LLAMA, GPT_SIZES, "fp32"),
    Case("llama-dropout", _llama(dropout=True), LLAMA_DROPOUT, GQA_SIZES),
    Case("llama-flash", _llama(core="flash", fused_qkv=False), LLAMA, GQA_SIZES, strategies=FLASH),
    Case("llama-selective", _llama(recompute="selective", fused_qkv=False), LLAMA, GQA_SIZES, strategies=SELECTIVE),
    Case("llama-full", _llama(recompute="full"), LLAMA, GQA_SIZES, strategies=FULL),
    Case("llama-tp2", _llama(GQA_SIZES.rank(2), fused_qkv=False), LLAMA, GQA_SIZES, strategies=TP, t=2),
    Case("llama-tp2-sp-flash", _llama(GQA_SIZES.rank(2), fused_qkv=False, core="flash", sp=2), LLAMA, GQA_SIZES,
         strategies=FLASH + SP, t=2, sp=True),
    # Megatron-LM's fused SwiGLU (issue 37 item 3): an autograd function that saves only gate and up.
    Case("llama-fused-swiglu", _llama(fused_swiglu=True), LLAMA, GQA_SIZES, strategies=(fused_swiglu,)),
    Case("llama-fused-swiglu-flash", _llama(fused_swiglu=True, core="flash", fused_qkv=False), LLAMA, GQA_SIZES,
         strategies=(fused_swiglu, *FLASH)),
]


@pytest.mark.parametrize("case", LAYER_CASES, ids=lambda c: c.id)
def test_layer_saves_what_the_graph_says(case: Case) -> None:
    torch.manual_seed(0)
    layer, z = case.make(), case.z
    seq = z.s // case.t if case.sp else z.s
    x = torch.randn(z.b, seq, z.h, dtype=TORCH_DTYPE[case.act], requires_grad=True)
    got, seen = measured_bytes(lambda: layer(x), layer)
    want = graph_bytes(case.arch, "layer", z, case.act, case.strategies, t=case.t)
    assert got == want, f"measured per dtype {dict(got)} != graph {dict(want)}; saved storages:\n{seen}"


@pytest.mark.parametrize(("make", "arch"), [(GPTEmbedding, GPT), (LlamaEmbedding, LLAMA)], ids=["gpt", "llama"])
def test_embedding_saves_token_and_position_ids_and_mask(make, arch) -> None:
    z = GPT_SIZES
    embed = make(z, dropout=arch.dropout)
    ids = torch.randint(0, z.V, (z.b, z.s))
    got, seen = measured_bytes(lambda: embed(ids), embed)
    assert got == graph_bytes(arch, "embed", z), seen


@pytest.mark.parametrize("arch", [GPT, LLAMA], ids=["gpt-tied", "llama"])
def test_head_saves_norm_input_logits_and_labels(arch: Arch) -> None:
    z, bf16 = GPT_SIZES, torch.bfloat16
    tied = torch.nn.Embedding(z.V, z.h, dtype=bf16).weight if arch.tied_embeddings else None
    head = Head(z, LayerNorm(z.h) if arch.norm == "layernorm" else RMSNorm(z.h, bf16), bf16, tied=tied)
    x = torch.randn(z.b, z.s, z.h, dtype=bf16, requires_grad=True)
    labels = torch.randint(0, z.V, (z.b, z.s))
    got, seen = measured_bytes(lambda: head(x, labels), head)
    assert got == graph_bytes(arch, "head", z), seen


# --- where the CPU run or an implementation choice departs from the graph ----------------------
@pytest.mark.parametrize(("core", "z"), [("flash", GQA_SIZES), ("eager", Sizes(a=4, a_kv=1, f=160))],
                         ids=["flash-gqa", "eager-mqa"])
def test_fused_qkv_with_rotary_keeps_the_whole_projection(core: str, z: Sizes) -> None:
    """With one fused qkv linear and RoPE, q and k become new tensors but v stays a view of the
    fused output; where that view is saved as is (SDPA; eager matmul when a_kv = 1 makes the
    reshape a view), the q and k parts of the projection stay alive too. The graph counts v
    alone, which is exact for separate q/k/v projections (Hugging Face) and for eager GQA/MHA,
    where matmul saves a copy of v."""
    torch.manual_seed(0)
    layer = LlamaLayer(z, core=core, fused_qkv=True)
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=True)
    got, seen = measured_bytes(lambda: layer(x), layer)
    q_and_k_parts = 2 * z.b * z.s * (z.a + z.a_kv) * z.d_h  # bf16
    strategies = FLASH if core == "flash" else ()
    assert got == graph_bytes(LLAMA, "layer", z, strategies=strategies) + Counter({"bf16": q_and_k_parts}), seen


def test_cpu_layer_norm_keeps_stats_in_the_parameter_dtype() -> None:
    """Why the reference LayerNorm has fp32 weights: with bf16 weights CPU returns bf16 mean/rstd
    (CUDA returns fp32, the accumulation type, which is what the graph counts)."""
    z = GPT_SIZES
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=True)
    w, bias = (torch.nn.Parameter(torch.ones(z.h, dtype=torch.bfloat16)) for _ in range(2))
    m = measure(lambda: torch.nn.functional.layer_norm(x, (z.h,), w, bias))
    owned = {w.untyped_storage().data_ptr(), bias.untyped_storage().data_ptr()}
    stats = [dt for ptr, (_, dt, shapes) in m.storages.items() if ptr not in owned and shapes[0][-1] == 1]
    assert stats == [torch.bfloat16, torch.bfloat16]


def test_cpu_rms_norm_is_decomposed_without_the_fused_kernel() -> None:
    """Why ``cuda_like_norms`` exists: plain CPU F.rms_norm records fp32 copies of its input
    (4sbh for the upcast input, 4sbh for the normalized product, 4bs rstd) instead of the fused
    node's bf16 input and fp32 rstd."""
    z = GPT_SIZES
    norm = RMSNorm(z.h, torch.bfloat16)
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=True)
    plain = measure(lambda: norm(x), norm).nbytes
    with cuda_like_norms():
        fused = measure(lambda: norm(x), norm).nbytes
    sbh, bs = z.s * z.b * z.h, z.b * z.s
    assert (plain, fused) == (4 * sbh + 4 * sbh + 4 * bs, 2 * sbh + 4 * bs)


# --- the references compute what they claim to -----------------------------------------------
@pytest.mark.parametrize("z", [GPT_SIZES, GQA_SIZES], ids=["mha", "gqa"])
def test_eager_attention_matches_sdpa(z: Sizes) -> None:
    torch.manual_seed(0)
    eager = LlamaLayer(z, torch.float32, core="eager")
    flash = LlamaLayer(z, torch.float32, core="flash")
    flash.load_state_dict(eager.state_dict())
    x = torch.randn(z.b, z.s, z.h)
    torch.testing.assert_close(eager(x), flash(x))


def test_cuda_like_rms_norm_has_the_same_gradients() -> None:
    z = GPT_SIZES
    x = torch.randn(z.b, z.s, z.h, dtype=torch.float64)
    norm = RMSNorm(z.h, torch.float64)
    grads = []
    for context in (cuda_like_norms, contextlib.nullcontext):
        xr = x.clone().requires_grad_()
        with context():
            norm(xr).pow(2).sum().backward()
        grads.append(xr.grad)
    torch.testing.assert_close(*grads)

