"""Fine-tuning: trainable parameters equal PEFT's count; what a LoRA-wrapped or frozen layer saves
equals what autograd saves on CPU; frozen weights carry no gradients or optimizer states.

PEFT (``peft.get_peft_model``) runs on transformers models built on the meta device; the saved-
tensor cases wrap the reference layers of ``tests/reference_layers.py`` with PEFT's own
``lora.Linear`` (``peft.inject_adapter_in_model``).
"""

from __future__ import annotations

from collections import Counter

import peft
import pytest
import torch
import transformers

from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import GPT, LLAMA
from memderive.derivations.models.config import from_config
from memderive.derivations.models.model import Model
from memderive.derivations.models.presets import PRESETS
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.adapters import resolve_adapters
from memderive.derivations.quantities.finetune import finetune_states
from memderive.symbolic.derive import evaluate, saved_tensors
from memderive.symbolic.dims import r as R
from memderive.symbolic.lora import LoRA
from memderive.symbolic.strategies import Freeze, RequiresGrad, Strategy
from tests.reference_layers import GPTLayer, LlamaLayer, cuda_like_norms
from tests.test_saved_tensors import GPT_SIZES, GQA_SIZES, measured_bytes

LLAMA_SIZES = dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, intermediate_size=300,
                   vocab_size=500, pad_token_id=0)


def peft_trainable(model_type: str, fields: dict, **lora) -> tuple[int, int]:
    """PEFT's ``trainable params || all params`` for a model built on the meta device."""
    config = transformers.AutoConfig.for_model(model_type, **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(**lora))
    return wrapped.get_nb_trainable_parameters()


def ours(config: dict, targets: tuple[str, ...], rank: int, dora: bool = False) -> tuple[int, int]:
    est = estimate(from_config(config), Options(lora_rank=rank, lora_targets=targets, dora=dora))
    trainable = est.number("trainable_parameters")
    return trainable, est.number("parameters") + trainable


def test_llama_2_7b_r8_on_q_and_v_is_peft_printout() -> None:
    """PEFT's printout for llama-2-7b, r = 8 on q_proj, v_proj: ``trainable params: 4,194,304 || all
    params: 6,742,609,920``: 32 layers x 2 modules x 8 x (4096 + 4096) = 4,194,304 (hu-2021 §4.1: r(in + out) per adapted linear)."""
    config = PRESETS["llama-2-7b"]
    assert ours(config, ("q_proj", "v_proj"), 8) == (4_194_304, 6_742_609_920)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    assert peft_trainable("llama", fields, r=8, target_modules=["q_proj", "v_proj"]) == (4_194_304, 6_742_609_920)


CASES = [
    ("llama", dict(LLAMA_SIZES, num_key_value_heads=2), ("q_proj", "v_proj")),
    ("llama", dict(LLAMA_SIZES, num_key_value_heads=2), ("all-linear",)),
    ("qwen2", dict(LLAMA_SIZES, num_key_value_heads=4), ("k_proj", "o_proj", "down_proj")),
    ("gemma", dict(LLAMA_SIZES, head_dim=32, num_key_value_heads=2), ("all-linear",)),
    ("phi3", dict(LLAMA_SIZES, num_key_value_heads=2), ("qkv_proj", "gate_up_proj")),
    ("phi3", dict(LLAMA_SIZES, num_key_value_heads=2), ("all-linear",)),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64), ("c_attn",)),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64), ("all-linear",)),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64), ("c_proj",)),
    ("opt", dict(hidden_size=96, num_attention_heads=4, num_hidden_layers=2, ffn_dim=200, vocab_size=500,
                 max_position_embeddings=64), ("q_proj", "v_proj", "fc1")),
    ("falcon", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, vocab_size=500),
     ("all-linear",)),
    ("gpt_neox", dict(hidden_size=128, num_attention_heads=8, num_hidden_layers=2, intermediate_size=300,
                      vocab_size=500), ("query_key_value", "dense_4h_to_h")),
    ("olmo2", dict(LLAMA_SIZES, num_key_value_heads=2), ("all-linear",)),
]


@pytest.mark.parametrize(("model_type", "fields", "targets", "dora"),
                         [(*c, False) for c in CASES] + [(*c, True) for c in CASES[1::3]],
                         ids=[f"{c[0]}-{'+'.join(c[2])}" for c in CASES] + [f"{c[0]}-dora" for c in CASES[1::3]])
def test_trainable_parameters_equal_peft(model_type: str, fields: dict, targets: tuple[str, ...], dora: bool) -> None:
    want = peft_trainable(model_type, fields, r=4, target_modules=targets[0] if targets == ("all-linear",)
                          else list(targets), use_dora=dora)
    assert ours({"model_type": model_type, **fields}, targets, 4, dora) == want


def test_unknown_module_is_a_clear_error() -> None:
    with pytest.raises(OptionsError, match="no module named 'c_attn'.*q_proj"):
        estimate("llama-2-7b", lora_rank=8, lora_targets=("c_attn",))
    with pytest.raises(OptionsError, match="go together"):
        Options(lora_rank=8)


# --- what a wrapped or frozen layer saves ------------------------------------------------------------
TINY_LLAMA = Model("tiny-llama", LLAMA, {"h": GQA_SIZES.h, "a": GQA_SIZES.a, "a_kv": GQA_SIZES.a_kv,
                                         "f": GQA_SIZES.f, "l": 2, "V": GQA_SIZES.V})
HF_TO_REFERENCE = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "proj", "gate_proj": "gate",
                   "up_proj": "up", "down_proj": "down"}
ALL = tuple(HF_TO_REFERENCE)


class NativeDropout(torch.nn.Module):
    """What ``nn.Dropout`` runs on CUDA (``native_dropout``: a bool mask). On CPU ``F.dropout`` multiplies
    by a 16-bit noise tensor instead (saved at 2 bytes per element), so PEFT's dropout is swapped for it."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.native_dropout(x, self.p, True)[0]


def graph_bytes(steps: list[Strategy], arch_model: Model, z, live_in: bool, rank: int = 0) -> Counter:
    graph = arch_model.graph()  # with the family's dropout layers, as the reference layers run
    for step in [*steps, RequiresGrad()]:
        graph = step(graph)
    block = "first_layer" if not live_in and graph.has_block("first_layer") else "layer"
    values = {**z.values(), R: rank}
    by_dtype: Counter = Counter()
    for _, tensor in saved_tensors(graph.block(block)):
        by_dtype[tensor.dtype.name] += int(evaluate(tensor.nbytes, values))
    return by_dtype


def wrapped_llama(targets: tuple[str, ...], rank: int, dropout: float) -> torch.nn.Module:
    torch.manual_seed(0)
    layer = LlamaLayer(GQA_SIZES, fused_qkv=False)
    config = peft.LoraConfig(r=rank, target_modules=[HF_TO_REFERENCE[t] for t in targets], lora_dropout=dropout)
    layer = peft.inject_adapter_in_model(config, layer)
    for name, param in layer.named_parameters():
        param.requires_grad_("lora_" in name)
    for module in layer.modules():
        for key, drop in getattr(module, "lora_dropout", {}).items():
            if isinstance(drop, torch.nn.Dropout):
                module.lora_dropout[key] = NativeDropout(drop.p)
    return layer.to(torch.bfloat16)


@pytest.mark.parametrize("live_in", [True, False], ids=["later-layer", "first-layer"])
@pytest.mark.parametrize(("targets", "dropout"), [(("q_proj", "v_proj"), 0.0), (ALL, 0.0), (ALL, 0.1)],
                         ids=["qv", "all", "all-dropout"])
def test_lora_layer_saves_what_autograd_saves(targets: tuple[str, ...], dropout: float, live_in: bool) -> None:
    """PEFT's ``lora.Linear`` inside the reference LLaMA layer, base frozen. ``first-layer``: the layer
    input does not require grad (frozen embeddings), so ops before the first adapter save nothing."""
    z, rank = GQA_SIZES, 4
    layer = wrapped_llama(targets, rank, dropout)
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=live_in)
    got, seen = measured_bytes(lambda: layer(x), layer)
    splits, adapters = resolve_adapters(TINY_LLAMA, targets)
    want = graph_bytes([*splits, LoRA(R, tuple(adapters), dropout=dropout > 0)], TINY_LLAMA, z, live_in, rank)
    assert got == want, f"measured {dict(got)} != graph {dict(want)}:\n{seen}"


TINY_GPT = Model("tiny-gpt", GPT, {"h": GPT_SIZES.h, "a": GPT_SIZES.a, "f": GPT_SIZES.f, "l": 2, "V": GPT_SIZES.V,
                                   "n_ctx": GPT_SIZES.n_ctx})
FROZEN_CASES = [  # (model, reference layer, trainable reference modules, graph prefixes kept trainable)
    (TINY_LLAMA, lambda: LlamaLayer(GQA_SIZES, fused_qkv=False), ("down",), ("layer/mlp/fc2.",)),
    (TINY_LLAMA, lambda: LlamaLayer(GQA_SIZES, fused_qkv=False), ("norm2",), ("layer/norm2.",)),
    (TINY_LLAMA, lambda: LlamaLayer(GQA_SIZES, fused_qkv=False), ("gate", "up", "down"), ("layer/mlp/",)),
    (TINY_GPT, lambda: GPTLayer(GPT_SIZES), ("fc1",), ("layer/mlp/fc1.",)),
    (TINY_GPT, lambda: GPTLayer(GPT_SIZES), ("attn.proj",), ("layer/attn/proj.",)),
    (TINY_GPT, lambda: GPTLayer(GPT_SIZES), ("attn.qkv",), ("layer/attn/qkv.",)),
]


@pytest.mark.parametrize("live_in", [True, False], ids=["later-layer", "first-layer"])
@pytest.mark.parametrize(("model", "make", "train", "keep"), FROZEN_CASES,
                         ids=[f"{c[0].name}-{'+'.join(c[2])}" for c in FROZEN_CASES])
def test_frozen_layer_saves_what_autograd_saves(model: Model, make, train: tuple[str, ...], keep: tuple[str, ...],
                                                live_in: bool) -> None:
    """Only some modules trainable: a frozen linear keeps no input for its weight, a norm keeps its input
    only when something before it requires grad, attention keeps k for q's gradient and not q when k
    needs none."""
    z = GQA_SIZES if model is TINY_LLAMA else GPT_SIZES
    torch.manual_seed(0)
    layer = make()
    for name, param in layer.named_parameters():
        param.requires_grad_(name.startswith(train))
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=live_in)
    got, seen = measured_bytes(lambda: layer(x), layer)
    assert got == graph_bytes([Freeze(("",), keep)], model, z, live_in), seen


# --- model states ---------------------------------------------------------------------------------
def test_frozen_model_has_no_gradients_or_optimizer_states() -> None:
    graph = Freeze()(TINY_LLAMA.graph())
    states, offloaded, trainable = finetune_states(graph, Options(mode="train", batch=1, seq=8, train_only=("lm_head",)))
    by_path = {t.path: t.expr for t in states.terms}
    assert (trainable.total, by_path["model_states/gradients"], by_path["model_states/optimizer"]) == (0, 0, 0)
    assert not offloaded.terms


def test_lora_states_are_the_adapters_only() -> None:
    """llama-2-7b, r = 8 on q, v, bf16 mixed precision with AdamW: 16-bit weights for all
    6,742,609,920 parameters; 2 (gradient) + 12 (fp32 master, momentum, variance) bytes for each of the
    4,194,304 trainable ones."""
    est = estimate("llama-2-7b", mode="train", batch=1, seq=512, lora_rank=8, lora_targets=("q_proj", "v_proj"))
    assert est.number("weight_bytes") == 2 * 6_742_609_920
    assert est.number("model_state_bytes") == 2 * 6_742_609_920 + 14 * 4_194_304


# --- FLOPs: frozen weights drop their weight-gradient products, adapters add theirs ----------------
FLOP_CASES = [
    ("llama", dict(LLAMA_SIZES, num_key_value_heads=2), dict(lora_rank=4, lora_targets=("all-linear",))),
    ("gpt2", dict(n_embd=96, n_head=4, n_layer=2, vocab_size=500, n_positions=64),
     dict(lora_rank=4, lora_targets=("c_attn", "c_fc"))),
    ("llama", dict(LLAMA_SIZES, num_key_value_heads=2), dict(train_only=("down_proj",))),
]


@pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")
@pytest.mark.parametrize(("model_type", "fields", "tuning"), FLOP_CASES,
                         ids=[f"{c[0]}-{'+'.join(c[2].get('lora_targets', c[2].get('train_only')))}"
                              for c in FLOP_CASES])
def test_step_flops_equal_flop_counter(model_type: str, fields: dict, tuning: dict) -> None:
    """Forward + backward of a whole PEFT model (fp32, CPU, eager) under FlopCounterMode: no weight
    gradient for frozen weights, no input gradient before the first trainable op (frozen embeddings)."""
    from memderive.derivations.quantities.finetune import finetune_steps
    from memderive.symbolic.derive import TRAINING_PHASES, flops
    from memderive.symbolic.dims import b, s
    from tests.hf_flops import build, measure_training
    from tests.test_params_families import _config

    config = _config(model_type, fields)
    torch_model = build(config)
    model = from_config(config.to_dict())
    if "lora_rank" in tuning:
        targets = tuning["lora_targets"]
        torch_model = peft.get_peft_model(torch_model, peft.LoraConfig(
            r=tuning["lora_rank"], target_modules=targets[0] if targets == ("all-linear",) else list(targets)))
    else:
        for name, param in torch_model.named_parameters():
            param.requires_grad_(".down_proj." in name)
    options = Options(**tuning)
    graph = model.graph(activation_dtype="fp32", dropout=False)
    for step in [*finetune_steps(model, options), RequiresGrad()]:
        graph = step(graph)
    measured = measure_training(torch_model, 2, 12, config.vocab_size)
    values = {**model.values(), b: 2, s: 12, R: tuning.get("lora_rank", 1)}
    assert evaluate(flops(graph).total, values) == measured.forward
    assert evaluate(flops(graph, phases=TRAINING_PHASES).total, values) == measured.step


@pytest.mark.parametrize("live_in", [True, False], ids=["later-layer", "first-layer"])
@pytest.mark.parametrize("targets", [("c_attn",), ("c_attn", "c_fc", "c_proj")], ids=["c_attn", "all"])
def test_lora_on_fused_qkv_saves_what_autograd_saves(targets: tuple[str, ...], live_in: bool) -> None:
    """GPT-2's fused ``c_attn``: the adapter's sum is the q, k, v the attention reads (all three then
    need gradients, even in the first layer). PEFT wraps the reference GPT layer's linears."""
    z, rank = GPT_SIZES, 4
    names = {"c_attn": ["attn.qkv"], "c_fc": ["fc1"], "c_proj": ["attn.proj", "fc2"]}
    torch.manual_seed(0)
    layer = peft.inject_adapter_in_model(
        peft.LoraConfig(r=rank, target_modules=[n for t in targets for n in names[t]]), GPTLayer(GPT_SIZES))
    for name, param in layer.named_parameters():
        param.requires_grad_("lora_" in name)
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=live_in)
    got, seen = measured_bytes(lambda: layer(x), layer)
    splits, adapters = resolve_adapters(TINY_GPT, targets)
    want = graph_bytes([*splits, LoRA(R, tuple(adapters))], TINY_GPT, z, live_in, rank)
    assert got == want, f"measured {dict(got)} != graph {dict(want)}:\n{seen}"


def held_after_forward(run, *modules: torch.nn.Module) -> tuple[Counter, str]:
    """Bytes per dtype of the saved tensors still held when forward returns (storages once, parameters
    and buffers excluded): DoRA builds ``B A`` through an identity matrix and uses it only detached, so
    that small graph and what it saved are freed before backward; ``measured_bytes`` would count them."""
    import gc
    import weakref

    owned = {t.untyped_storage().data_ptr() for m in modules for t in (*m.parameters(), *m.buffers())}
    packed: list = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        packed.append((weakref.ref(tensor), tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes(),
                       tensor.dtype))
        return tensor

    with cuda_like_norms():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            out = run()
        gc.collect()
        held = {ptr: (size, dt) for ref, ptr, size, dt in packed if ptr not in owned and ref() is not None}
        out.float().sum().backward()
    names = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.bool: "bool"}
    by_dtype: Counter = Counter()
    for size, dt in held.values():
        by_dtype[names[dt]] += size
    return by_dtype, "\n".join(f"  {size:>8} B {dt}" for size, dt in held.values())


@pytest.mark.parametrize("live_in", [True, False], ids=["later-layer", "first-layer"])
@pytest.mark.parametrize("targets", [("q_proj", "v_proj"), ALL], ids=["qv", "all"])
def test_dora_layer_holds_what_autograd_holds(targets: tuple[str, ...], live_in: bool) -> None:
    z, rank = GQA_SIZES, 4
    torch.manual_seed(0)
    config = peft.LoraConfig(r=rank, target_modules=[HF_TO_REFERENCE[t] for t in targets], use_dora=True)
    layer = peft.inject_adapter_in_model(config, LlamaLayer(GQA_SIZES, fused_qkv=False))
    for name, param in layer.named_parameters():
        param.requires_grad_("lora_" in name)
    layer = layer.to(torch.bfloat16)
    x = torch.randn(z.b, z.s, z.h, dtype=torch.bfloat16, requires_grad=live_in)
    got, seen = held_after_forward(lambda: layer(x), layer)
    splits, adapters = resolve_adapters(TINY_LLAMA, targets)
    want = graph_bytes([*splits, LoRA(R, tuple(adapters), dora=True)], TINY_LLAMA, z, live_in, rank)
    assert got == want, f"held {dict(got)} != graph {dict(want)}:\n{seen}"
