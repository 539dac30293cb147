"""Measure what a whole transformers model saves for backward, attributed to the module that saved it.

``measure_model`` builds a small ``*ForCausalLM`` from its config class (random weights, no downloads),
casts it to bf16, runs ``model(ids, labels=ids)`` in training mode under
``torch.autograd.graph.saved_tensors_hooks`` and counts every saved storage the graph still holds
when the forward ends once (a branch freed during the forward, whose result needs no gradient,
frees what it saved), parameters and buffers excluded (as ``tests/reference_layers.measure`` does
for single layers). Each storage is
attributed to the innermost module running when it was first saved (forward pre/post hooks keep a
stack), with its dtype and shapes, so a test can compare one decoder layer op group by op group.
"""

from __future__ import annotations

import math
import weakref
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import transformers

__all__ = ["Shape", "FAMILIES", "SavedModel", "config_for", "build_model", "measure_model", "measure_config", "to_float8"]


@dataclass(frozen=True)
class Shape:
    b: int
    s: int


#: Small configs: GQA and MHA LLaMA, Mistral (GQA, head_dim != h/a), one-KV-head Mistral, Qwen2 (GQA, qkv bias),
#: GPT-2 (MHA, LayerNorm, gelu_new, dropout 0.1).
FAMILIES: dict[str, tuple[str, dict]] = {
    "llama-gqa": ("LlamaConfig", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=160, num_hidden_layers=2, vocab_size=128)),
    "llama-mha": ("LlamaConfig", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                      intermediate_size=160, num_hidden_layers=2, vocab_size=128)),
    "mistral": ("MistralConfig", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=192, num_hidden_layers=2, vocab_size=128, head_dim=32)),
    "mqa": ("MistralConfig", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                                  intermediate_size=192, num_hidden_layers=2, vocab_size=128)),
    "qwen2": ("Qwen2Config", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                  intermediate_size=160, num_hidden_layers=2, vocab_size=128)),
    "gpt2": ("GPT2Config", dict(n_embd=64, n_head=4, n_layer=2, vocab_size=128, n_positions=128)),
}


def config_for(family: str, attention: str) -> transformers.PretrainedConfig:
    cls_name, kwargs = FAMILIES[family]
    config = getattr(transformers, cls_name)(**kwargs)
    config._attn_implementation = attention
    return config


@dataclass
class SavedModel:
    """Saved storages: ``storages`` maps data_ptr -> (bytes, dtype, module path, shapes)."""

    storages: dict[int, tuple[int, torch.dtype, str, list[tuple[int, ...]]]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(size for size, _, _, _ in self.storages.values())

    def by_module(self, prefix: str = "") -> Counter:
        """Bytes per (module path relative to ``prefix``, dtype) for modules under ``prefix``."""
        out: Counter = Counter()
        for size, dt, path, _ in self.storages.values():
            if path.startswith(prefix):
                out[(path[len(prefix):], str(dt).removeprefix("torch."))] += size
        return out

    def describe(self) -> str:
        return "\n".join(f"  {size:>9} B {str(dt):15} {path:40} {shapes}"
                         for size, dt, path, shapes in self.storages.values())


def measure_model(family: str, attention: str, shape: Shape, seed: int = 0,
                  dtype: torch.dtype = torch.bfloat16, lora: Any = None, cast_first: bool = False,
                  fp8: str = "none") -> SavedModel:
    """Forward of a ``family`` model (``FAMILIES``) in ``dtype`` (bf16), training mode (dropout on where
    the config has it); see ``measure_config``."""
    return measure_config(config_for(family, attention), shape, seed, dtype, lora, cast_first, fp8=fp8)


def build_model(config: transformers.PretrainedConfig) -> torch.nn.Module:
    """``AutoModelForCausalLM`` of ``config`` (random weights); an encoder without a causal-LM head
    (BERT, as memderive models it: ``BertModel`` with its pooler) is built with ``AutoModel``; T5 as
    ``T5ForConditionalGeneration``, Whisper as ``WhisperForConditionalGeneration`` (encoder and decoder)."""
    transformers.logging.set_verbosity_error()
    if config.model_type == "bert":
        return transformers.AutoModel.from_config(config)
    if config.model_type in ("qwen2_vl", "qwen2_5_vl"):
        return transformers.AutoModelForImageTextToText.from_config(config)
    if getattr(config, "vision_config", None) is not None and config.model_type != "gemma3":  # LLaVA
        return transformers.LlavaForConditionalGeneration(config)
    if config.model_type == "gemma3" and getattr(config, "vision_config", None) is not None:
        return transformers.Gemma3ForConditionalGeneration(config)
    if config.model_type == "t5":
        return transformers.T5ForConditionalGeneration(config)
    if config.model_type == "whisper":
        return transformers.WhisperForConditionalGeneration(config)
    return transformers.AutoModelForCausalLM.from_config(config)


def need_torchao() -> None:
    """torchao is in the test extra (pyproject.toml): under CI (a fresh install) its absence fails the test; a
    local venv installed before it joined the extra skips, saying what to run."""
    import importlib.util
    import os

    import pytest

    if importlib.util.find_spec("torchao") is None:
        if os.environ.get("CI"):
            pytest.fail("torchao is missing: pip install -e '.[test]' installs it (see .ci/run)")
        pytest.skip("torchao is in the test extra: pip install -e '.[test]'")


def to_float8(model: torch.nn.Module, recipe: str) -> torch.nn.Module:
    """torchao's ``convert_to_float8_training`` with ``Float8LinearConfig.from_recipe_name(recipe)``:
    every ``nn.Linear`` whose in and out features are multiples of 16 becomes a ``Float8Linear``
    (torchtitan's filter: "nn.Linear modules with any dim size not divisible by 16 are always skipped")."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    return convert_to_float8_training(
        model, config=Float8LinearConfig.from_recipe_name(recipe),
        module_filter_fn=lambda m, fqn: m.in_features % 16 == 0 and m.out_features % 16 == 0)


def _loss(model: torch.nn.Module, ids: torch.Tensor, image_tokens: int = 0) -> torch.Tensor:
    """The LM loss; an encoder's outputs summed (a sum saves nothing for backward), given the
    token type ids (b, s) its tokenizer returns. ``image_tokens``: a vision-language model's
    sequences start with one image's that many tokens, its pixels random at the config's size."""
    if image_tokens:
        config = model.config
        vision = config.vision_config
        image = config.image_token_id
        ids = ids % (image - 2) + 1  # text tokens away from the image's (and Gemma 3's boi/eoi) ids
        ids[:, :image_tokens] = image
        dtype = next(model.parameters()).dtype
        if config.model_type in ("qwen2_vl", "qwen2_5_vl"):
            # a square still image of image_tokens merged patches: (side x side) patches, (side / merge)**2 tokens;
            # its patches flattened as Qwen2VLImageProcessor gives them, its grid (1, side, side); transformers
            # computes the 3-D rope positions itself from the token types
            side = math.isqrt(image_tokens) * vision.spatial_merge_size
            width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
            b = ids.shape[0]
            return model(input_ids=ids, pixel_values=torch.randn(b * side * side, width, dtype=dtype),
                         image_grid_thw=torch.tensor([[1, side, side]] * b), mm_token_type_ids=(ids == image).int(),
                         labels=ids).loss
        pixels = torch.randn(ids.shape[0], 3, vision.image_size, vision.image_size, dtype=dtype)
        extra = {"token_type_ids": (ids == image).long()} if config.model_type == "gemma3" else {}
        return model(input_ids=ids, pixel_values=pixels, labels=ids, **extra).loss
    if isinstance(model, transformers.BertModel):
        out = model(input_ids=ids, token_type_ids=torch.zeros_like(ids))
        return out.last_hidden_state.sum() + out.pooler_output.sum()
    if isinstance(model, transformers.WhisperForConditionalGeneration):
        # 30 s of log-mel features, as WhisperFeatureExtractor pads every clip: (b, mel bins, 2 x encoder positions)
        config = model.config
        features = torch.randn(ids.shape[0], config.num_mel_bins, 2 * config.max_source_positions,
                               dtype=next(model.parameters()).dtype)
        return model(input_features=features, labels=ids).loss
    if isinstance(model, transformers.T5ForConditionalGeneration):
        # the encoder reads the ids; the decoder the labels shifted right (T5's _shift_right)
        return model(input_ids=ids, labels=ids.flip(1)).loss
    return model(input_ids=ids, labels=ids).loss


def measure_config(config: transformers.PretrainedConfig, shape: Shape, seed: int = 0,
                   dtype: torch.dtype = torch.bfloat16, lora: Any = None, cast_first: bool = False,
                   autocast: bool = False, fp8: str = "none", image_tokens: int = 0,
                   checkpointing: bool = False, freeze: Any = None) -> SavedModel:
    """Forward of the model of ``config`` in ``dtype`` (bf16), training mode (dropout on where the config
    has it), under ``saved_tensors_hooks``; the backward runs too (the graph is a real one).

    ``lora``: a ``peft.LoraConfig`` to wrap the model with (``peft.get_peft_model``: base frozen). PEFT
    keeps the adapters of a model it wraps in 16 bits in fp32 (``autocast_adapter_dtype``), so by
    default the model is wrapped first and cast whole (adapters in ``dtype``); ``cast_first`` casts
    the model first, as loading it with ``dtype=torch.bfloat16`` does, and leaves fp32 adapters.
    ``autocast``: the model stays fp32 and its forward runs under ``torch.autocast("cpu", dtype)`` (the
    16-bit casts of the weights it saves are counted: they are not the parameters' storages).
    ``fp8``: a torchao recipe (``to_float8``) the model's linears are converted with first.
    ``image_tokens``: a vision-language model's image tokens at the start of each sequence (``_loss``).
    ``checkpointing``: transformers' ``activation_checkpointing_enable()`` on the built model, before PEFT wraps it.
    ``freeze``: called with the built model to freeze some of its parameters (``requires_grad_(False)``)."""
    torch.manual_seed(seed)
    model = build_model(config)
    if checkpointing:
        model.activation_checkpointing_enable()
    if freeze is not None:
        freeze(model)
    if fp8 != "none":
        model = to_float8(model, fp8)
    if cast_first:
        model = model.to(dtype)
    if lora is not None:
        import peft

        model = peft.get_peft_model(model, lora)
    model = model.train() if cast_first or autocast else model.to(dtype).train()
    owned = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    stack: list[str] = [""]
    handles = []
    for name, module in model.named_modules():
        handles.append(module.register_forward_pre_hook(lambda _m, _a, name=name: stack.append(name)))
        handles.append(module.register_forward_hook(lambda _m, _a, _o: None if stack.pop() else None))
    held: list[tuple[weakref.ref, str]] = []

    def pack(tensor: torch.Tensor) -> _Held:
        box = _Held(tensor)
        held.append((weakref.ref(box), stack[-1]))
        return box

    ids = torch.randint(0, config.get_text_config().vocab_size, (shape.b, shape.s))
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.tensor), \
                torch.autocast("cpu", dtype=dtype, enabled=autocast):
            loss = _loss(model, ids, image_tokens)
    finally:
        for handle in handles:
            handle.remove()
    result = SavedModel()
    for ref, module in held:  # what the graph still holds when the backward starts
        box = ref()
        if box is None:
            continue
        storage = box.tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in owned:
            entry = result.storages.setdefault(ptr, (storage.nbytes(), box.tensor.dtype, module, []))
            entry[3].append(tuple(box.tensor.shape))
    loss.backward()  # the graph is a real one
    return result


class _Held:
    """A saved tensor as the graph holds it: a node freed during the forward (a branch whose result
    needs no gradient, such as a router's top-k over scores used only for their indices) frees it,
    and with it this box, so only tensors alive at the end of the forward are counted (a freed
    storage's address may be reused by a later tensor: counting by address alone would merge them)."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
