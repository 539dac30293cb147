"""Any model transformers can build: parameters, cache and saved activations traced from its own modeling code.

The hand-written families (``derivations.models.families``) derive a readable symbolic graph; every other
causal-LM ``model_type`` transformers knows is *traced*: its ``AutoModelForCausalLM`` (an encoder-decoder's
``AutoModelForSeq2SeqLM`` or ``AutoModelForSpeechSeq2Seq``: T5, BART, Whisper; ``model_class``) is built under PyTorch's
``FakeTensorMode`` (fake CPU tensors: shapes, dtypes and the CPU kernels' choices, no weights, no memory), and

* the parameters are read from the module tree (``named_parameters``: a tied weight once, as transformers'
  ``num_parameters`` counts it), grouped by module path: each ``ModuleList`` of layers by layer class, the
  rest by top-level module;
* the cache is the object the model returns after a prefill of ``s`` tokens and one decode step
  (``DynamicCache`` layers, sliding-window layers, Mamba conv/SSM states, RWKV's ``state``, hybrids' per-layer mix):
  every tensor reachable from it, each storage once;
* the saved activations are what autograd's ``saved_tensors_hooks`` see during a training forward
  (``model(ids, labels=ids)``), each storage once, parameters and buffers excluded, only what the graph still
  holds when the forward ends (as ``tests/hf_saved.py`` measures real CPU runs).

An encoder-decoder's encoder reads ``s`` tokens (T5, BART: the encoder length is the sequence length) or a fixed
input (Whisper: ``(b, num_mel_bins, 2 * max_source_positions)`` log-mel features, ``max_source_positions`` encoder
positions, ``encoder_length``); its decoder reads ``s`` tokens (training: ``labels``; inference: a prefill of ``s``
decoder tokens, then one decode step on the encoder's output, the cache an ``EncoderDecoderCache`` of the
self-attention KV of ``s + 1`` tokens and the cross-attention KV of the encoder length).

A forward whose shapes follow values of its inputs (Qwen2.5-VL's image grid, a mask's ``nonzero``) runs again with
the inputs and every small tensor made from them holding real values beside their fake shapes
(``_valued_mode_class``); Qwen2-VL's and Qwen2.5-VL's 3-D rope positions are computed by their own ``get_rope_index``
on real tensors and passed in.

Every count is exact at the (b, s) traced. As functions of b and s, ``polynomial`` evaluates at a grid of
points and solves for the coefficients of a polynomial of degree 1 in b and 2 in s (rational arithmetic), then
checks it at points it was not fitted on: a family whose bytes are not such a polynomial (padding to a chunk,
a window shorter than the points) fails the check and says so instead of giving a formula.

torch and transformers are imported only here, and only when a traced model is asked for.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses as dc
import functools
import importlib
import inspect
import json
import os
import sys
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from memderive.derivations.models.config import by_architecture, config_name
from memderive.derivations.models.config_fields import ConfigError
from memderive.derivations.models.hf_import import quiet_import
from memderive.derivations.models.families import ADAPTERS, REFUSED
from memderive.derivations.models.presets import PRESETS
from memderive.derivations.models.quantization import read_quantization
from memderive.derivations.options import Options
from memderive.derivations.quantities import traced_fold, traced_strategies
from memderive.derivations.quantities.traced_stored import stored_weights
from memderive.symbolic.dtypes import dtype as dtype_of
from memderive.symbolic.lazy import lazy

torch = lazy("torch")
transformers = lazy("transformers")
modeling_auto = lazy("transformers.models.auto.modeling_auto")
fake_tensor = lazy("torch._subclasses.fake_tensor")
mode_utils = lazy("torch.utils._mode_utils")
pytree = lazy("torch.utils._pytree")
logging = lazy("logging")  # on a cold estimate's path (this module is imported by estimate.py), used on traced runs only

__all__ = ["TracedError", "TracedParameters", "HAND_WRITTEN_FOR_MEGATRON", "unsupported_options", "hf_config", "known_model_type", "parameters", "cache_bytes",
           "cache_total", "saved_bytes", "polynomial", "checked_fit", "Polynomial", "Fit", "transformers_version",
           "build"]

#: Bytes per element of the dtypes memderive names.
_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


class TracedError(ConfigError):
    """transformers cannot build or run this config, said in one line."""


def traced_config(model: Any, implementation: str = "megatron", mode: str = "train") -> tuple[dict[str, Any], str] | None:
    """The parsed config and name of a ``--model`` argument that takes the traced path, else None: a
    ``config.json`` (or folder holding one) whose model_type no hand-written family takes, or whose hand-written
    graph is Megatron-Core's training step alone (``HAND_WRITTEN_FOR_MEGATRON``) under ``implementation`` hf
    (transformers' own code) or in ``mode`` infer (transformers' cache), or a bare model_type transformers knows that is no bundled name (its config class's defaults). Reads
    JSON only: torch and transformers are imported only for a bare name, which no other path answers."""
    if not isinstance(model, (str, Path)):
        return None
    text = str(model)
    if len(text) > 4096 or "\0" in text:
        return None
    path = Path(text)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None  # load_config says what is wrong
        config, note = by_architecture(config)  # an unknown model_type read by its architectures class
        model_type = config.get("model_type") if isinstance(config, dict) else None
        transformers_code = model_type in HAND_WRITTEN_FOR_MEGATRON and (implementation.split("-")[0] == "hf"
                                                                          or mode == "infer")
        if not isinstance(model_type, str) or (model_type in ADAPTERS and not transformers_code) or (
                model_type in REFUSED and model_type not in TRACED_REFUSED):
            return None
        return config, config_name(config, path) + (f" [{note}]" if note else "")
    if text.lower() in PRESETS or text.endswith(".json") or "/" in text or text in ADAPTERS:
        return None
    if known_model_type(text):
        return {"model_type": text}, text
    return None


#: Families whose hand-written graph is Megatron-Core's training step alone (the Mamba hybrids: ``symbolic.mamba``):
#: under ``--implementation hf`` or ``--mode infer`` a config.json of one is traced from transformers' code instead.
HAND_WRITTEN_FOR_MEGATRON = ("nemotron_h",)

#: Families the hand-written path refuses (``REFUSED``) that a config.json takes to the traced path instead: Gemma 3
#: with its vision tower (tower, projector and text model traced with one image: ``image_tokens``).
TRACED_REFUSED = ("gemma3",)


def transformers_version() -> str:
    return transformers.__version__


def known_model_type(model_type: str) -> bool:
    """Whether the installed transformers has a config class for ``model_type`` (False without transformers)."""
    try:
        mapping = transformers.CONFIG_MAPPING  # the first read imports transformers
    except ImportError:
        return False
    return model_type in mapping


def hf_config(config: Mapping[str, Any], label: str = "config") -> Any:
    """transformers' config object of a parsed ``config.json`` (its config class's defaults for what it omits)."""
    model_type = config.get("model_type")
    try:  # imported here, where a missing torch or transformers is said in one line
        importlib.import_module("torch")
        importlib.import_module("transformers")
    except ImportError:
        raise TracedError(f"{label}: model_type {model_type!r} is not one of memderive's families; tracing it from "
                          "transformers' modeling code needs torch and transformers: pip install 'memderive[traced]'"
                          ) from None
    transformers.logging.set_verbosity_error()
    _import_modeling()
    if model_type not in transformers.CONFIG_MAPPING:
        raise TracedError(f"{label}: model_type {model_type!r} is unknown to transformers {transformers.__version__} "
                          "and to memderive's families; check the name or upgrade transformers")
    cls = transformers.CONFIG_MAPPING[model_type]
    try:
        return cls.from_dict({k: v for k, v in config.items() if k != "model_type"})
    except Exception as exc:  # noqa: BLE001 - any validation error of the config class, in one line
        raise TracedError(f"{label}: transformers {transformers.__version__} cannot build a {cls.__name__} from it: "
                          f"{_one_line(exc)}") from None


def _import_modeling() -> None:
    """Import transformers' modeling code (and through its quantizers torchao, where installed) once, with the
    warnings those imports log muted (``hf_import.quiet_import``): they would print on every traced estimate, and
    none is about the model."""
    if "transformers.modeling_utils" not in sys.modules:  # imported now, while its loggers are muted
        quiet_import("transformers.modeling_utils")


def _one_line(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    text = " ".join(str(cause).split()) or type(cause).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _torch_dtype(name: str) -> Any:
    return getattr(torch, _DTYPES.get(name, name))


def model_class(cfg: Any, task: str | None = None) -> Any:
    """The transformers auto class a traced ``cfg`` is built with: an encoder-decoder (``is_encoder_decoder``) that
    transformers maps to a speech or text sequence-to-sequence LM is built whole (encoder, decoder, LM head); any other
    config, or ``task`` "causal", as ``AutoModelForCausalLM`` (an encoder-decoder's causal LM is its decoder alone)."""
    if task != "causal" and getattr(cfg, "vision_config", None) is not None \
            and cfg.model_type in modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES:
        return transformers.AutoModelForImageTextToText
    if task != "causal" and getattr(cfg, "is_encoder_decoder", False):
        if cfg.model_type in modeling_auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES:
            return transformers.AutoModelForSpeechSeq2Seq
        if cfg.model_type in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
            return transformers.AutoModelForSeq2SeqLM
    return transformers.AutoModelForCausalLM


def build(cfg: Any, attention: str = "sdpa", dtype: str = "bf16", fake: bool = True,
          task: str | None = None, prepare: Callable[[Any], Any] | None = None, images: int = 1,
          mode: Any = None) -> tuple[Any, Any]:
    """``model_class(cfg, task).from_config(cfg)`` in ``dtype`` with ``attention`` as its attention implementation, in
    training mode. ``fake``: built on the meta device (no initialization runs), its parameters and buffers then
    made fake CPU tensors of a ``FakeTensorMode`` (returned, to run the model in: CPU's kernels are chosen as
    for real CPU tensors); else real CPU weights (mode None). ``prepare``: what a training script does to the model
    once built (``traced_strategies.prepare``: checkpointing, PEFT), before its tensors are made fake. ``images``: the
    images per sequence a vision-language model runs with (``_image_inputs``; 0: text only). ``mode``: the fake mode
    to make them in (``traced_symbolic``'s, with a ``ShapeEnv``)."""
    transformers.logging.set_verbosity_error()
    cfg = copy.deepcopy(cfg)
    auto = model_class(cfg, task)
    try:
        with torch.device("meta") if fake else torch.device("cpu"):
            model = auto.from_config(cfg, dtype=_torch_dtype(dtype), attn_implementation=attention)
    except Exception as exc:  # noqa: BLE001
        raise TracedError(f"{cfg.model_type}: transformers cannot build {auto.__name__} with "
                          f"{attention} attention: {_one_line(exc)}") from None
    if prepare is not None:
        model = prepare(model)
    model.train()
    model._traced_images = images if auto.__name__ == "AutoModelForImageTextToText" else 0
    return (model, _to_fake(model, mode)) if fake else (model, None)


def _to_fake(model: Any, mode: Any = None) -> Any:
    """Replace a meta model's parameters and buffers by fake CPU tensors of ``mode`` (None: one new valued
    ``FakeTensorMode``; a tied weight stays one parameter)."""
    mode = _valued_mode_class()(allow_non_fake_inputs=True) if mode is None else mode
    cpu = torch.device("cpu")
    made: dict[int, Any] = {}
    for module in model.modules():
        for table, wrap in ((module._parameters, True), (module._buffers, False)):
            for name, t in list(table.items()):
                if t is None:
                    continue
                if id(t) not in made:  # a tensor an __init__ made on the CPU explicitly is copied as it is
                    fake = traced_strategies.sharded(t, lambda x: (
                        mode.fake_tensor_converter.from_meta_and_device(mode, x, cpu) if x.is_meta
                        else mode.from_tensor(x, static_shapes=True)))  # its sizes, never symbolic
                    made[id(t)] = torch.nn.Parameter(fake, requires_grad=t.requires_grad) if wrap else fake
                table[name] = made[id(t)]
    return mode


#: Most elements a tensor computed for real under a valued fake mode may have (``_valued_mode_class``): every
#: index, mask and position tensor of the sizes traced (b * s positions, an image's patches) is far smaller.
VALUE_LIMIT = 1 << 20
_VALUED: list[Any] = []


def _valued_mode_class() -> Any:
    """A ``FakeTensorMode`` that, once its ``values`` is set (``_run``: after a forward read a value a fake tensor
    has not), also holds values: a factory (``arange``, ``zeros``, ``torch.tensor``) of at most ``VALUE_LIMIT``
    elements runs for real, and an op whose inputs all hold values does too (PyTorch's own constant propagation,
    limited to one element by ``may_turn_const``, raised to ``VALUE_LIMIT``). Values come from the inputs and
    factories only, never from the weights: a forward whose shapes follow the token ids or an image grid (Qwen2.5-VL's
    rope index and vision windows) runs; one whose shapes follow the weights' outputs (a router's choices) still
    cannot. Before ``values`` is set it is PyTorch's FakeTensorMode unchanged."""
    if _VALUED:
        return _VALUED[0]

    class ValuedFakeTensorMode(fake_tensor.FakeTensorMode):
        values = False

        def may_turn_const(self, t: Any) -> bool:
            return super().may_turn_const(t) or (self.values and t.numel() <= VALUE_LIMIT
                                                 and t.device.type != "meta" and not self.is_our_fake(t)
                                                 and t.layout == torch.strided)

        def dispatch(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if (self.values and isinstance(func, torch._ops.OpOverload)
                    and torch.Tag.nondeterministic_seeded not in func.tags
                    and not any(isinstance(x, torch.Tensor) for x in pytree.tree_leaves((args, kwargs)))
                    and str(kwargs.get("device", "cpu")) == "cpu"):
                with mode_utils.no_dispatch():
                    out = func(*args, **kwargs)
                made = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
                if made and all(self.may_turn_const(t) for t in made):
                    converter = self.fake_tensor_converter
                    return pytree.tree_map_only(torch.Tensor,
                                                lambda t: converter.from_real_tensor(self, t, make_constant=True), out)
            return super().dispatch(func, types, args, kwargs)

    _VALUED.append(ValuedFakeTensorMode)
    return ValuedFakeTensorMode


def _fake_copies() -> Any:
    """A ``TorchFunctionMode`` under which ``copy.deepcopy`` of a fake tensor is a fake copy (``detach().clone()``, a
    storage of its own): ``Tensor.__deepcopy__`` copies a storage's bytes, which a fake tensor has none of (Dory
    deep-copies its looped layers' cache layers, each holding a window-size tensor)."""

    class FakeCopies(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if func is torch.Tensor.__deepcopy__ and isinstance(args[0], fake_tensor.FakeTensor):
                tensor, memo = args
                if id(tensor) not in memo:
                    memo[id(tensor)] = tensor.detach().clone().requires_grad_(tensor.requires_grad)
                return memo[id(tensor)]
            return func(*args, **(kwargs or {}))

    return FakeCopies()


@dataclass(frozen=True)
class TracedParameters:
    """Parameters by module path: ``groups`` rows (path, what, count, each) whose ``count * each`` add to ``total``;
    ``tied``: parameter names that are another's weight (counted once)."""

    total: int
    groups: tuple[tuple[str, str, int, int], ...]
    tied: tuple[tuple[str, str], ...] = ()
    positions: tuple[str, int] | None = None  # the text's learned position table (module, positions), if it has one


def parameters(cfg: Any, task: str | None = None) -> TracedParameters:
    """The parameters of ``cfg``'s model (``model_class``), from its module tree on the meta device."""
    transformers.logging.set_verbosity_error()
    auto = model_class(cfg, task)
    try:
        with torch.device("meta"):
            model = auto.from_config(cfg)
    except Exception as exc:  # noqa: BLE001
        raise TracedError(f"{cfg.model_type}: transformers cannot build {auto.__name__}: {_one_line(exc)}") from None
    return module_parameters(model)


def module_parameters(model: Any) -> TracedParameters:
    """Group ``model``'s parameters: a parameter under ``<list>.<i>`` of a ``ModuleList`` belongs to layer i of that
    list (grouped by the layer's class and its own parameter count); any other to its top-level module."""
    modules = dict(model.named_modules())
    first: dict[int, str] = {}
    tied: list[tuple[str, str]] = []
    for name, p in model.named_parameters(remove_duplicate=False):
        key = id(p)
        if key in first:
            tied.append((name, first[key]))
        else:
            first[key] = name
    layer_of: dict[str, str] = {}  # layer module path -> its list path
    for path, module in modules.items():
        if isinstance(module, torch.nn.ModuleList):
            for i in range(len(module)):
                layer_of[f"{path}.{i}" if path else str(i)] = path
    per_layer: dict[str, int] = {}
    rest: dict[str, int] = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        owner = None
        for cut in range(len(parts) - 1, 0, -1):  # innermost ModuleList item wins? outermost: layers of a model
            prefix = ".".join(parts[:cut])
            if prefix in layer_of:
                owner = prefix
        if owner is not None:
            per_layer[owner] = per_layer.get(owner, 0) + p.numel()
        else:
            top = ".".join(parts[:-1]) or parts[0]
            rest[top] = rest.get(top, 0) + p.numel()
    rows: dict[tuple[str, str, int], int] = {}
    for layer, count in per_layer.items():
        key = (layer_of[layer], type(modules[layer]).__name__, count)
        rows[key] = rows.get(key, 0) + 1
    groups = [(path, what, n, each) for (path, what, each), n in rows.items()]
    groups += [(path, type(modules[path]).__name__ if path in modules else "Parameter", 1, count)
               for path, count in rest.items()]
    total = sum(p.numel() for p in model.parameters())
    assert total == sum(n * each for _, _, n, each in groups), "groups must add up to the module tree's parameters"
    return TracedParameters(total, tuple(groups), tuple(tied), learned_positions(model))


#: Where a model's towers that read no text tokens live (their position tables count patches or audio frames).
_NOT_TEXT = ("vision", "visual", "image", "audio", "encoder")


def learned_positions(model: Any) -> tuple[str, int] | None:
    """The learned position table the text tokens index (``nn.Embedding`` named ``embed_positions``, ``wpe`` or
    ``position_embeddings`` outside the vision, audio and encoder towers): its module path and the positions it
    holds (less its ``offset``: BART's table keeps 2 rows more); None where positions are computed (RoPE, ALiBi,
    T5's relative buckets). A real forward past it fails on the lookup; fake tensors do not check indices."""
    found = [(name, module.num_embeddings - int(getattr(module, "offset", 0) or 0))
             for name, module in model.named_modules() if isinstance(module, torch.nn.Embedding)
             and name.rsplit(".", 1)[-1] in ("embed_positions", "wpe", "position_embeddings")
             and not any(part in name.lower() for part in _NOT_TEXT)]
    return min(found, key=lambda x: x[1]) if found else None


def _ids(cfg: Any, b: int, s: int) -> Any:
    vocab = getattr(cfg.get_text_config(), "vocab_size", None) or 2
    # token ids away from any special image/audio token ids a multimodal model scans for: 1..min(vocab, 100)
    return (torch.arange(b * s).reshape(b, s) % max(1, min(vocab - 1, 97))) + 1


def _seq2seq(model: Any) -> bool:
    """Whether ``model`` is a whole encoder-decoder (its causal LM, the decoder alone, is not)."""
    return bool(getattr(model.config, "is_encoder_decoder", False)) and callable(getattr(model, "get_encoder", None))


def encoder_length(cfg: Any, s: int) -> int:
    """Positions the encoder of an encoder-decoder ``cfg`` holds for a sequence length ``s``: Whisper's
    ``max_source_positions`` (its features are padded to 30 s of audio: ``WhisperEncoder`` refuses any other
    length), else ``s`` (the encoder reads the ``s`` tokens the decoder is trained or prompted on)."""
    return cfg.max_source_positions if cfg.model_type == "whisper" else s


def _encoder_inputs(model: Any, b: int, s: int) -> dict[str, Any]:
    """The encoder's inputs: Whisper's log-mel features ``(b, num_mel_bins, 2 * max_source_positions)`` in the
    model's dtype (its first convolution halves them to ``max_source_positions``), else ``s`` token ids."""
    cfg = model.config
    if model.main_input_name == "input_ids":
        return {"input_ids": _ids(cfg, b, s)}
    if cfg.model_type != "whisper":
        raise TracedError(f"{cfg.model_type}: the encoder reads {model.main_input_name}; memderive traces token and "
                          "Whisper's log-mel inputs only")
    dtype = next(model.parameters()).dtype
    return {"input_features": torch.zeros(b, cfg.num_mel_bins, 2 * cfg.max_source_positions, dtype=dtype)}


def image_tokens(cfg: Any) -> int:
    """Tokens one image takes in the text of a vision-language ``cfg`` at the config's resolution: LLaVA's
    ``(image_size / patch_size)**2`` patches (+1, the CLS token, when ``vision_feature_select_strategy`` is "full";
    ``LlavaModel.get_image_features`` drops it for "default"), Gemma 3's ``mm_tokens_per_image`` (its projector pools
    the patches to that many)."""
    vision = cfg.vision_config
    if cfg.model_type == "llava":
        full = getattr(cfg, "vision_feature_select_strategy", "default") == "full"
        return (vision.image_size // vision.patch_size) ** 2 + (1 if full else 0)
    if cfg.model_type == "gemma3":
        return cfg.mm_tokens_per_image
    if cfg.model_type in QWEN_VL:
        _, h, w = _image_grid(cfg)
        return h * w // vision.spatial_merge_size ** 2
    raise _untraced_images(cfg.model_type)


def _untraced_images(model_type: str) -> TracedError:
    """The one-line refusal of images for a vision-language model memderive does not trace them for."""
    return TracedError(f"{model_type}: memderive traces images for {', '.join(IMAGES_TRACED)} only so far: give "
                       "--images 0 for text-only prompts through the whole model (--mode params counts it; for the "
                       "text model alone give its text_config)")


#: Qwen2-VL and Qwen2.5-VL: dynamic resolution, patches flattened with an ``image_grid_thw``, 3-D rope positions from
#: ``get_rope_index`` (the same API in both)
QWEN_VL = ("qwen2_vl", "qwen2_5_vl")
#: The vision-language model types whose images memderive traces (``image_tokens``); another one's text-only prompts
#: (``--images 0``) run through its whole model, the vision tower's weights held and not run.
IMAGES_TRACED = ("llava", "gemma3", *QWEN_VL)


#: Qwen2-VL's and Qwen2.5-VL's image side in pixels: their resolution is dynamic (the processor's min_pixels and
#: max_pixels bound it, config.json gives none), so memderive measures the low end of the model cards' recommended 256
#: to 1,280 tokens, ``min_pixels = 256 * 28 * 28`` (Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct READMEs):
#: 448 x 448 pixels, 32 x 32 patches of 14, 256 tokens after the 2 x 2 merge.
QWEN_IMAGE_SIDE = 448


def image_span(cfg: Any) -> int:
    """Tokens one image takes in the text as the model's processor writes it: Gemma 3's ``boi``, its
    ``mm_tokens_per_image`` image tokens and ``eoi`` (Gemma3Processor's ``full_image_sequence``; the ``\\n\\n`` around
    them are text); LLaVA's and Qwen2(.5)-VL's image tokens alone (``image_tokens``)."""
    return image_tokens(cfg) + IMAGE_MARKERS.get(cfg.model_type, 0)


#: Tokens a processor writes around each image's tokens: Gemma 3's boi and eoi (Gemma3Processor.full_image_sequence)
IMAGE_MARKERS = {"gemma3": 2}


def image_size(cfg: Any) -> int:
    """The side in pixels of the square image a vision-language ``cfg`` is measured with: its vision config's
    ``image_size`` (LLaVA, Gemma 3: fixed), else ``QWEN_IMAGE_SIDE`` (Qwen2-VL's and Qwen2.5-VL's dynamic resolution)."""
    return getattr(cfg.vision_config, "image_size", None) or QWEN_IMAGE_SIDE


def _image_grid(cfg: Any) -> tuple[int, int, int]:
    """Qwen2(.5)-VL's ``image_grid_thw`` row of one still image: 1 frame (the processor repeats a still image to
    ``temporal_patch_size`` frames, one temporal patch), ``image_size / patch_size`` patches a side."""
    side = image_size(cfg) // cfg.vision_config.patch_size
    return 1, side, side


def _image_inputs(model: Any, b: int, s: int) -> dict[str, Any]:
    """``n`` images per sequence (``build``'s ``images``) at the config's ``image_size``, then ``s`` text tokens:
    ``pixel_values`` (b * n, channels, size, size) in the model's dtype, and ``input_ids`` (b, n * span + s), each
    image's span as its processor writes it (``image_span``: LLaVA's k placeholders; Gemma 3's boi, k image tokens,
    eoi, with ``token_type_ids`` 1 on the image tokens, which its training forward requires; Qwen2(.5)-VL: one
    ``image_grid_thw`` row per image, its patches flattened)."""
    cfg = model.config
    n, k = model._traced_images, image_tokens(cfg)
    vision = cfg.vision_config
    image = getattr(cfg, "image_token_index", None)
    image = getattr(cfg, "image_token_id", None) if image is None else image
    one = [image] * k
    if cfg.model_type == "gemma3":
        one = [cfg.boi_token_index, *one, cfg.eoi_token_index]
    ids = torch.cat([torch.tensor([one * n] * b, dtype=torch.long), _ids(cfg, b, s)], dim=1)
    dtype = next(model.parameters()).dtype
    if cfg.model_type in QWEN_VL:  # patches flattened: (b * n * t * h * w, channels * temporal * patch * patch)
        t, h, w = _image_grid(cfg)
        width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
        out = {"input_ids": ids, "pixel_values": torch.zeros(b * n * t * h * w, width, dtype=dtype),
               "image_grid_thw": torch.tensor([[t, h, w]] * (b * n)), "mm_token_type_ids": (ids == image).int()}
        out["position_ids"] = _rope_index(model, b, s, n * k, (t, h, w), n)
        return out
    out = {"input_ids": ids, "pixel_values": torch.zeros(b * n, getattr(vision, "num_channels", 3), vision.image_size,
                                                         vision.image_size, dtype=dtype)}
    if cfg.model_type == "gemma3":
        out["token_type_ids"] = (ids == image).long()
    return out


def _rope_index(model: Any, b: int, s: int, k: int, grid: tuple[int, int, int], n: int = 1) -> Any:
    """Qwen2.5-VL's 3-D rope positions (3, b, k + s) of ``_image_inputs``' sequences, computed by its own
    ``get_rope_index`` on real tensors outside the fake mode (it reads the token types and the grid, no weights, and
    builds its result with ``torch.tensor`` of per-sequence values, which fake tensors cannot give); its
    ``rope_deltas`` kept on the model for the decode steps, as ``generate`` keeps them."""
    cfg = model.config
    with fake_tensor.unset_fake_temporarily():
        types = torch.cat([torch.ones(b, k, dtype=torch.int), torch.zeros(b, s, dtype=torch.int)], dim=1)
        ids = torch.where(types.bool(), cfg.image_token_id, 1)
        positions, deltas = model.model.get_rope_index(ids, image_grid_thw=torch.tensor([grid] * (b * n)),
                                                       mm_token_type_ids=types)
    model.model.rope_deltas = deltas
    return positions


def _vision(model: Any) -> bool:
    """Whether ``model`` was built as a whole vision-language model (``build``: ``AutoModelForImageTextToText``) with
    images (``build``'s ``images`` > 0); built as a causal LM (task "causal": Gemma 3's, the same class) or with
    ``images`` 0 it reads text only."""
    return getattr(model, "_traced_images", 0) > 0


def _run(model: Any, mode: Any, fn: Callable[[], Any]) -> Any:
    # a multimodal model checks its image tokens against its image features with a tensor comparison that fake
    # tensors cannot answer (no data): transformers' documented switch TRANSFORMERS_DISABLE_TORCH_CHECK skips its
    # torch_compilable_check on fake tensors (the inputs are made to match: _image_inputs)
    before = os.environ.get("TRANSFORMERS_DISABLE_TORCH_CHECK")
    if mode is not None:
        os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = "1"
    # transformers' mask code reads a fake tensor as a graph being exported (is_tracing) and keeps a mask a real eager
    # run drops (BART's all-ones padding mask: SDPA then saves it for backward); these fake runs stand for real eager
    # ones, so their tensors are read as a real run reads them (the valued pass gives the values)
    masking = sys.modules.get("transformers.masking_utils")
    tracing = getattr(masking, "is_tracing", None)
    if mode is not None and tracing is not None:
        masking.is_tracing = lambda tensor=None: tracing(None if getattr(tensor, "fake_mode", None) is mode else tensor)
    try:
        with mode if mode is not None else contextlib.nullcontext(), \
                _fake_copies() if mode is not None else contextlib.nullcontext(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' deprecation notes are not the user's to act on
            try:
                return fn()
            except (fake_tensor.DataDependentOutputException, fake_tensor.DynamicOutputShapeException):
                if mode is None or getattr(mode, "values", True):
                    raise
                # the forward read a value (a .tolist() of positions, a nonzero of a mask): again, the inputs and
                # factories holding values from now on (_valued_mode_class)
                mode.values = True
                return fn()
    except TracedError:
        raise
    except (fake_tensor.DataDependentOutputException, fake_tensor.DynamicOutputShapeException) as exc:
        raise TracedError(f"{model.config.model_type}: transformers' forward reads a value computed from the weights "
                          f"({exc.func}: e.g. a router's tokens per expert), which fake tensors do not hold; memderive "
                          "cannot trace it (--mode params counts it)") from None
    except Exception as exc:  # noqa: BLE001
        raise TracedError(f"{model.config.model_type}: transformers' forward failed on "
                          f"{'fake' if mode is not None else 'CPU'} tensors: {type(exc).__name__}: {_one_line(exc)}") from None
    finally:
        if tracing is not None:
            masking.is_tracing = tracing
        if before is None:
            os.environ.pop("TRANSFORMERS_DISABLE_TORCH_CHECK", None)
        else:
            os.environ["TRANSFORMERS_DISABLE_TORCH_CHECK"] = before


def _tensors(obj: Any, where: str = "", depth: int = 0, seen: set[int] | None = None, prefix: str = ""):
    """Every tensor reachable from a cache object (attributes, lists, tuples, dicts), with the attribute that holds
    it (``Class.attribute``: a list or dict of states is named by the attribute holding it; a cache held by another,
    as ``EncoderDecoderCache`` holds two, prefixes its tensors' names with the attribute holding it)."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        yield where, obj
        return
    if isinstance(obj, (list, tuple)):
        items = ((where, value, prefix) for value in obj)
    elif isinstance(obj, dict):
        items = ((where, value, prefix) for value in obj.values())
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("transformers"):
        items = ((f"{prefix}{type(obj).__name__}.{key}", value,
                  f"{prefix}{key} " if type(value).__name__.endswith("Cache") else prefix)
                 for key, value in vars(obj).items())
    else:
        return
    for name, value, inner in items:
        yield from _tensors(value, name, depth + 1, seen, inner)


@dataclass(frozen=True)
class CacheBytes:
    """A cache's bytes after a prefill and ``decoded`` decode steps; ``parts``: bytes per (holder, dtype)."""

    total: int
    parts: tuple[tuple[str, str, int], ...]
    kind: str


def cache_bytes(model: Any, mode: Any, b: int, s: int, decoded: int = 1) -> CacheBytes:
    """Prefill ``s`` tokens of a batch of ``b`` with ``use_cache=True``, then ``decoded`` steps of one token each;
    the bytes of every storage the returned cache holds."""
    cfg = model.config
    # the cache argument: ``cache`` in transformers 5 (``past_key_values`` a deprecated alias that some forwards, Dory's,
    # do not map: passed under that name the cache went into **kwargs and each step began a new one)
    past = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def go() -> Any:
        model.eval()
        try:
            with torch.no_grad():
                ids = _ids(cfg, b, s)
                if _seq2seq(model):  # the encoder once, then the decoder's prefill and steps on its output
                    out = model(**_encoder_inputs(model, b, s), decoder_input_ids=ids, use_cache=True)
                    cache, encoded = out.past_key_values, (out.encoder_last_hidden_state,)
                    for _ in range(decoded):
                        cache = model(encoder_outputs=encoded, decoder_input_ids=ids[:, -1:], **{past: cache},
                                      use_cache=True).past_key_values
                    return cache
                if _vision(model):  # the image and the text in the prefill, then text tokens
                    inputs = _image_inputs(model, b, s)
                    out = model(**inputs, use_cache=True)
                    cache = out.past_key_values
                    for _ in range(decoded):
                        cache = model(input_ids=ids[:, -1:], **{past: cache}, use_cache=True).past_key_values
                    return cache
                out = model(input_ids=ids, use_cache=True)
                # Mamba-style models take and return ``cache_params``, RWKV its ``state`` (ModelOutput answers any
                # name, so ask the forward's signature), the others ``past_key_values``
                names = inspect.signature(model.forward).parameters
                params = next((name for name in ("cache_params", "state") if name in names), None)
                cache = getattr(out, params or "past_key_values", None)
                if cache is None and params is None and past == "cache":
                    # a forward that fills the cache it is given and returns none (XLM; RecurrentGemma, whose
                    # recurrent states stay on its modules): given one, as generate() gives it
                    cache = transformers.DynamicCache(config=cfg)
                    try:
                        model(input_ids=ids, cache=cache, use_cache=True)
                        for _ in range(decoded):
                            model(input_ids=ids[:, -1:], cache=cache, use_cache=True)
                    except Exception:  # noqa: BLE001 - it takes another kind (XLM an EncoderDecoderCache): none, as before
                        return None
                    given.append(cache)
                    return cache
                for _ in range(decoded):
                    if cache is None:
                        break
                    step = ids[:, -1:]
                    if params:
                        where = {"cache_position": torch.tensor([s])} if "cache_position" in names else {}
                        out = model(input_ids=step, **{params: cache}, use_cache=True, **where)
                        cache = getattr(out, params)
                    else:
                        out = model(input_ids=step, **{past: cache}, use_cache=True)
                        cache = out.past_key_values
                return cache
        finally:
            model.train()

    given: list[Any] = []
    cache = _run(model, mode, go)
    if cache is None:
        return CacheBytes(0, (), "none")
    owned = {_storage_key(t) for t in (*model.parameters(), *model.buffers())}
    seen: set[int] = set()
    parts: dict[tuple[str, str], int] = {}
    held = [] if not given else [(f"{type(m).__name__}.{name}", t) for m in model.modules()
                                 for name, t in vars(m).items() if isinstance(t, torch.Tensor)]
    for path, t in [*_tensors(cache), *held]:
        key = _storage_key(t)
        if key in seen or key in owned:
            continue
        seen.add(key)
        name = (path, str(t.dtype).removeprefix("torch."))
        parts[name] = parts.get(name, 0) + traced_strategies.local(t).untyped_storage().nbytes()
    rows = tuple((p, d, n) for (p, d), n in sorted(parts.items()))
    return CacheBytes(sum(n for _, _, n in rows), rows, type(cache).__name__)


def _storage_key(t: Any) -> int:
    """The address of ``t``'s StorageImpl, kept alive by the weak reference taken (so never reused for another
    storage while we count); fake tensors have storages too, but no data pointer."""
    return traced_strategies.local(t).untyped_storage()._weak_ref()


class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


def _train_inputs(model: Any, b: int, s: int) -> dict[str, Any]:
    """The keyword arguments of a training forward of ``b`` sequences of ``s`` tokens: ``input_ids`` and
    ``labels=ids``; a vision-language model's image inputs; an encoder-decoder's encoder inputs and labels."""
    cfg = model.config
    ids = labels = _ids(cfg, b, s)
    inputs = {"input_ids": ids}
    if _vision(model):
        inputs = _image_inputs(model, b, s)
        labels = inputs["input_ids"]
    if _seq2seq(model):  # the encoder's input and the decoder's labels are two texts: two tensors
        inputs, labels = _encoder_inputs(model, b, s), ids.clone()
        if getattr(cfg, "decoder_start_token_id", None) is None:
            # a config class without a default start token (T5Config; t5-small's config.json gives 0): the
            # decoder reads a (b, s) tensor of its own, as the labels shifted right would be
            inputs["decoder_input_ids"] = ids.clone()
    return {**inputs, "labels": labels}


def cache_total(model: Any, mode: Any, b: Any, s: Any) -> Any:
    """``cache_bytes``' total: the count the cache's fits and symbolic runs take."""
    return cache_bytes(model, mode, b, s).total


def flops(model: Any, mode: Any, b: int, s: int, train: bool = True, use_cache: bool = False) -> tuple[int, int]:
    """``(forward, backward)`` FLOPs of a training forward of ``b`` sequences of ``s`` tokens and its backward
    (``traced_strategies.count_flops``); ``train`` False: a prefill's forward alone, no gradients (backward 0),
    ``use_cache``: writing a cache (as generate's prefill does; the symbolic route's, training too: transformers'
    packed-sequence check, run without a cache, reads the position values, which symbolic sizes do not hold)."""
    def go() -> tuple[int, int]:
        if train:
            more = {"use_cache": True} if use_cache else {}
            counted = traced_strategies.count_flops(lambda: model(**_train_inputs(model, b, s), **more).loss,
                                                    backward=True)
            model.zero_grad(set_to_none=True)
            return counted
        model.eval()
        # FlopCounterMode's module tracker hooks the gradients of inputs that require them: an inference forward
        # needs none (a kernel module handed a parameter's view under no_grad has no grad_fn to hook)
        wanted = [(p, p.requires_grad) for p in model.parameters()]
        model.requires_grad_(False)
        try:
            with torch.no_grad():
                inputs = _train_inputs(model, b, s)
                ids = inputs.pop("labels")
                if _seq2seq(model):
                    inputs.setdefault("decoder_input_ids", ids)
                if "logits_to_keep" in inspect.signature(model.forward).parameters:
                    inputs["logits_to_keep"] = 1  # as generate's prefill asks: the last position's logits
                return traced_strategies.count_flops(lambda: model(**inputs, use_cache=use_cache), backward=False)
        finally:
            for p, flag in wanted:
                p.requires_grad_(flag)
            model.train()

    return _run(model, mode, go)


def saved_bytes(model: Any, mode: Any, b: int, s: int) -> int:
    """Bytes of the storages autograd holds for backward at the end of a training forward ``model(ids, labels=ids)``
    (an encoder-decoder: its encoder's inputs, ``labels=ids``; each storage once; parameters and buffers excluded; a saved tensor freed during the forward not counted)."""
    cfg = model.config

    def go() -> int:
        owned = {_storage_key(t) for t in (*model.parameters(), *model.buffers())}
        held: list[weakref.ref] = []

        def pack(t: Any) -> _Held:
            box = _Held(t)
            held.append(weakref.ref(box))
            return box

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.tensor):
            out = model(**_train_inputs(model, b, s))
        if getattr(out, "loss", None) is None:
            raise TracedError(f"{cfg.model_type}: the forward returned no loss for labels=ids")
        # the loss alone is kept for backward: the output's other fields (LLaVA's unused last vision layer, whose
        # graph the loss does not reach) are freed with what they saved, as a training step drops them
        loss, out = out.loss, None  # noqa: F841 - held until the count is done
        seen: dict[int, int] = {}
        for ref in held:
            box = ref()
            if box is None:
                continue
            key = _storage_key(box.tensor)
            if key not in owned:
                seen.setdefault(key, traced_strategies.local(box.tensor).untyped_storage().nbytes())
        del loss
        return sum(seen.values())

    return _run(model, mode, go)


@dataclass(frozen=True)
class Polynomial:
    """sum of ``coeffs[(i, j)] * b**i * s**j``, exact rationals."""

    coeffs: Mapping[tuple[int, int], Fraction]

    def __call__(self, b: int, s: int) -> Fraction:
        return sum((c * b ** i * s ** j for (i, j), c in self.coeffs.items()), Fraction(0))

    def __str__(self) -> str:
        terms = []
        for (i, j), c in sorted(self.coeffs.items(), key=lambda kv: (-kv[0][1], -kv[0][0])):
            if c == 0:
                continue
            mono = "*".join(x for x in ("b" if i == 1 else "", "s" if j == 1 else f"s**{j}" if j else "") if x)
            coef = str(c) if c.denominator == 1 else f"({c})"
            terms.append(coef if not mono else mono if c == 1 else f"{coef}*{mono}")
        return " + ".join(terms).replace("+ -", "- ") or "0"


@dataclass(frozen=True)
class Fit:
    """Bytes as a function of b and s: ``general`` for b >= 2 and, where b = 1 differs from it (a kernel that
    copies a size-1 batch differently), ``one`` for b = 1; ``checked``: the (b, s) points it was checked at."""

    general: Polynomial
    one: Polynomial | None = None
    checked: tuple[tuple[int, int], ...] = field(default=())

    def __call__(self, b: int, s: int) -> int:
        value = (self.one if b == 1 and self.one is not None else self.general)(b, s)
        return int(value) if value.denominator == 1 else value

    def __str__(self) -> str:
        return str(self.general) if self.one is None else f"{self.general} (b >= 2); {self.one} (b = 1)"


#: Fit points: b in (2, 3) (and b = 1 alone) times three sequence lengths, and points checked after fitting.
FIT_S = (4, 6, 8)
CHECK = ((4, 5), (1, 10))


def polynomial(f: Callable[[int, int], int], s_points: tuple[int, ...] = FIT_S,
               check: tuple[tuple[int, int], ...] = CHECK, s_degree: int = 2) -> Fit | None:
    """The polynomial of degree 1 in b and ``s_degree`` in s through ``f`` at b in (2, 3) and ``s_points`` (and the
    one in s through b = 1 where b = 1 is off it), or None when the fit misses ``f`` at any ``check`` point (``f``
    is not such a polynomial in that range)."""
    cache: dict[tuple[int, int], int] = {}

    def value(bb: int, ss: int) -> int:
        if (bb, ss) not in cache:
            cache[(bb, ss)] = f(bb, ss)
        return cache[(bb, ss)]

    ss_ = s_points[:s_degree + 1]
    monos = [(i, j) for i in (0, 1) for j in range(s_degree + 1)]
    rows = [[Fraction(bb ** i * ss ** j) for i, j in monos] + [Fraction(value(bb, ss))] for bb in (2, 3) for ss in ss_]
    general = Polynomial(dict(zip(monos, _solve(rows))))
    one = None
    if any(general(1, ss) != value(1, ss) for ss in ss_):
        rows = [[Fraction(ss ** j) for j in range(s_degree + 1)] + [Fraction(value(1, ss))] for ss in ss_]
        one = Polynomial({(0, j): c for j, c in enumerate(_solve(rows))})
    fit = Fit(general, one, tuple(check))
    return fit if all(fit(bb, ss) == value(bb, ss) for bb, ss in check) else None


def checked_fit(count: Callable[[Any, Any, int, int], Any], model: Any, mode: Any, b: int, s: int, measured: int,
                s_degree: int = 2) -> Fit | None:
    """``polynomial`` of ``count(model, mode, b, s)``, None unless it gives ``measured`` (the whole model's count) at
    the user's (b, s). A deep stack's small points are counted on a few of its layers (``traced_fold``); where that
    fit misses ``measured``, on the whole stack."""
    folded = traced_fold.fold(model)
    if folded is not None:
        try:
            fit = polynomial(lambda bb, ss: folded.count(count, model, mode, bb, ss), s_degree=s_degree)
        except Exception:  # noqa: BLE001 - any failure of a folded run (an index past the cut stack) unfolds
            fit = None
        if fit is not None and fit(b, s) == measured:
            return fit
    fit = polynomial(lambda bb, ss: count(model, mode, bb, ss), s_degree=s_degree)
    return fit if fit is not None and fit(b, s) == measured else None


def _solve(rows: list[list[Fraction]]) -> list[Fraction]:
    """Gauss-Jordan elimination over the rationals of an augmented square system."""
    n = len(rows)
    for col in range(n):
        pivot = next(r for r in range(col, n) if rows[r][col] != 0)
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                k = rows[r][col] / rows[col][col]
                rows[r] = [x - k * y for x, y in zip(rows[r], rows[col])]
    return [rows[i][n] / rows[i][i] for i in range(n)]


#: Options a traced model answers (and ``traced_strategies.STRATEGY_OPTIONS``; the rest must keep their defaults:
#: ``traced_strategies.NOT_YET`` names them).
TRACED_OPTIONS = ("mode", "batch", "seq", "new_tokens", "dtype", "precision", "grad_buffer", "optimizer", "attention",
                  "weight_dtype", "kv_dtype", "images")


@dataclass(frozen=True)
class TracedEstimate:
    """A traced model's exact figures at the options' (b, s): parameters by module path, model states (training),
    the cache after a prefill of s tokens and one decode step (inference), saved activations (training), each
    with its polynomial in b and s where one fits (``Fit``; None: not a polynomial of that degree, or not asked)."""

    name: str
    model_type: str
    version: str
    mode: str
    batch: int | None
    seq: int | None
    attention: str
    parameters: TracedParameters
    states: tuple[tuple[str, int], ...] = ()
    cache: CacheBytes | None = None
    cache_fit: Fit | None = None
    saved: int | None = None
    saved_fit: Fit | None = None
    weights: int | None = None
    weight_scheme: str | None = None  # the checkpoint's quantization_config in words (None: --weight-dtype or 16-bit)
    weight_parts: tuple[tuple[str, int], ...] = ()
    encoder_length: int | None = None
    image_tokens: int | None = None
    image_size: int | None = None
    images_per_sequence: int = 0
    strategies: traced_strategies.Strategies = traced_strategies.Strategies()

    @property
    def parts(self) -> tuple[tuple[str, int], ...]:
        """A vision-language model's parameters per part (vision tower, projector, text model, LM head): the groups
        added by their path's first component under ``model.``; () for any other model."""
        if self.image_tokens is None:
            return ()
        out: dict[str, int] = {}
        for path, _, n, each in self.parameters.groups:
            parts = path.split(".")
            part = parts[1] if parts[0] == "model" and len(parts) > 1 else parts[0]
            out[part] = out.get(part, 0) + n * each
        return tuple(out.items())

    @property
    def images(self) -> str | None:
        """The images a vision-language model is measured with (``--images``), in words; None for any other model."""
        if self.image_tokens is None:
            return None
        n = self.images_per_sequence
        if n == 0:
            return (f"no image (--images 0): the {self.seq:,} text tokens alone, the vision tower's weights held and "
                    "not run")
        span = self.image_span or self.image_tokens
        marks = f" ({self.image_tokens:,} image tokens between boi and eoi)" if span != self.image_tokens else ""
        return (f"{'one image' if n == 1 else f'{n:,} images'} per sequence at {self.image_size} x {self.image_size} "
                f"pixels = {n:,} x {span:,} = {n * span:,} image tokens{marks} before the {self.seq:,} text tokens "
                "(--images N)")

    @property
    def image_span(self) -> int | None:
        """Tokens one image takes in the text (``traced.image_span``: Gemma 3's boi and eoi too)."""
        return None if self.image_tokens is None else self.image_tokens + IMAGE_MARKERS.get(self.model_type, 0)

    @property
    def encoder(self) -> str | None:
        """What an encoder-decoder's encoder reads at this (b, s), in words; None for a decoder alone."""
        if self.encoder_length is None:
            return None
        if self.model_type == "whisper":
            return (f"{self.encoder_length:,} positions (log-mel features of {2 * self.encoder_length:,} frames, 30 s "
                    f"of audio as Whisper pads every clip), the decoder {self.seq:,} tokens")
        return f"{self.encoder_length:,} tokens (the encoder length is --seq), the decoder {self.seq:,} tokens"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.name, "model_type": self.model_type, "traced_from": f"transformers "
                               f"{self.version}", "mode": self.mode, "parameters": self.parameters.total,
                               "parameter_groups": [dict(path=p, module=w, count=n, each=e)
                                                    for p, w, n, e in self.parameters.groups],
                               "tied": [list(t) for t in self.parameters.tied]}
        if self.mode != "params":
            out.update(batch=self.batch, seq=self.seq, attention=self.attention)
            if self.encoder_length is not None:
                out.update(encoder_length=self.encoder_length, encoder_input=self.encoder)
            if self.image_tokens is not None:
                out.update(images_per_sequence=self.images_per_sequence, image_size=self.image_size,
                           image_tokens=self.image_tokens, image_span=self.image_span, image_input=self.images)
        if self.parts:
            out["parameter_parts"] = dict(self.parts)
        if self.states:
            out["model_states_bytes"] = sum(v for _, v in self.states)
            out["model_states"] = dict(self.states)
        if self.saved is not None:
            out["activation_bytes"] = self.saved
            out["activation_formula"] = str(self.saved_fit) if self.saved_fit else None
            out["train_total_bytes"] = self.saved + sum(v for _, v in self.states)
        out.update(self.strategies.to_json())
        if self.cache is not None:
            out["weight_bytes"] = self.weights
            if self.weight_scheme is not None:
                out["weight_scheme"] = self.weight_scheme
                out["weight_parts"] = dict(self.weight_parts)
            out["cache_bytes"] = self.cache.total
            out["cache_kind"] = self.cache.kind
            out["cache_parts"] = [dict(holder=p, dtype=d, bytes=n) for p, d, n in self.cache.parts]
            out["cache_formula"] = str(self.cache_fit) if self.cache_fit else None
        return out


def unsupported_options(options: Any) -> list[str]:
    """The options set away from their defaults that the traced path does not take (``TRACED_OPTIONS`` and the
    strategies it applies aside). ``--implementation hf`` (and the exact profile it implies) is taken: transformers'
    code is what a traced model runs."""
    defaults = Options()
    said = ("implementation", "profile") if options.implementation_kind == "hf" and options.profile in (
        None, "exact") else ()
    return [f.name for f in dc.fields(Options) if f.name not in TRACED_OPTIONS + traced_strategies.STRATEGY_OPTIONS
            + said and getattr(options, f.name) != getattr(defaults, f.name)]


def traced_estimate(config: Mapping[str, Any], name: str, options: Any,
                    formula: Callable[..., Any] | None = None) -> TracedEstimate:
    """The traced figures of ``config`` (a parsed ``config.json`` whose model_type no hand-written family takes)
    under ``options`` (``derivations.options.Options``; only ``TRACED_OPTIONS`` may differ from their defaults)."""
    changed = unsupported_options(options)
    if changed:
        raise TracedError(f"{name}: {', '.join('--' + c.replace('_', '-') for c in changed)} not yet supported for a "
                          f"traced model (model_type {config.get('model_type')!r}); a traced model takes "
                          f"{traced_strategies.APPLIES}; not yet: {traced_strategies.NOT_YET}")
    traced_strategies.check(name, options)
    cfg = hf_config(config, name)
    params = parameters(cfg)
    attention = options.attention or ("eager" if options.mode == "train" else "sdpa")
    if attention not in ("eager", "sdpa"):
        raise TracedError(f"{name}: --attention {attention} is not traced (no CUDA kernels on fake CPU tensors); "
                          "give eager or sdpa")
    est = TracedEstimate(name, cfg.model_type, transformers_version(), options.mode, options.batch, options.seq,
                         attention, params)
    if options.mode == "params":
        return est
    b, s = options.batch or 1, options.seq
    if s is None:
        raise TracedError(f"{name}: --mode {options.mode} needs --seq")
    if params.positions is not None:  # a prefill of s tokens then one decode step reads position s too
        table, limit = params.positions
        need = s if options.mode == "train" else s + max(options.new_tokens, 1)
        if need > limit:
            raise TracedError(f"{name} has {limit:,} learned positions ({table}): --seq {s:,}"
                              + ("" if options.mode == "train" else " plus the tokens generated")
                              + f" needs {need:,}; give --seq {limit - (0 if options.mode == 'train' else max(options.new_tokens, 1)):,} or less")
    if getattr(cfg, "is_encoder_decoder", False) and model_class(cfg).__name__ != "AutoModelForCausalLM":
        est = dc.replace(est, encoder_length=encoder_length(cfg, s))
    images = _images(cfg, name, options)
    if model_class(cfg).__name__ == "AutoModelForImageTextToText":
        est = (dc.replace(est, image_tokens=image_tokens(cfg), image_size=image_size(cfg), images_per_sequence=images)
               if images or cfg.model_type in IMAGES_TRACED else dc.replace(est, image_tokens=0))  # text only
    if options.mode == "train":
        with traced_strategies.fake_group(options.tp):  # --tp: rank 0 of a tensor-parallel model
            model, mode = build(cfg, attention, options.dtype, prepare=traced_strategies.prepare(options),
                                images=images)
            saved = saved_bytes(model, mode, b, s)
            if formula is not None and options.tp == 1 and traced_strategies.prepare(options) is None:
                fit = formula(cfg, attention, options.dtype, "saved", b, s, saved, model, mode)
            else:
                fit = checked_fit(saved_bytes, model, mode, b, s, saved)  # fitted at small s: must hold here too
            trainable, total = traced_strategies.trainable_parameters(model)
        rows = traced_strategies.state_rows(total, trainable, options, traced_strategies.adapter_dtype(model, options))
        done = _traced_strategies(options, trainable, total)
        if options.tp > 1:
            done = dc.replace(_traced_tp(est, cfg, options).strategies, recompute=options.recompute)
        est = dc.replace(est, states=rows, saved=saved, saved_fit=fit, strategies=done)
        return _traced_flops(est, cfg, options, (model, mode) if attention == "eager" and options.tp == 1 else None,
                             b, s, formula)
    weight = options.weight_dtype or "bf16"
    stored = _stored(config, cfg, name, options)  # before the traces: a checkpoint refused is refused at once
    with traced_strategies.fake_group(options.tp):  # --tp: rank 0's cache
        model, mode = build(cfg, attention, options.kv_dtype or weight, prepare=traced_strategies.prepare(options),
                            images=images)
        cache = cache_bytes(model, mode, b, s)
        if formula is not None and options.tp == 1 and traced_strategies.prepare(options) is None:
            fit = formula(cfg, attention, options.kv_dtype or weight, "cache", b, s, cache.total, model, mode)
        else:
            fit = checked_fit(cache_total, model, mode, b, s, cache.total, s_degree=1)
    est = dc.replace(est, cache=cache, cache_fit=fit, weights=params.total * dtype_of(weight).nbytes)
    if stored is not None:
        est = dc.replace(est, weights=stored[0], weight_scheme=stored[1], weight_parts=stored[2])
    if options.tp > 1:
        est = _traced_tp(est, cfg, options)
    return _traced_flops(est, cfg, options, (model, mode) if attention == "eager" and options.tp == 1 else None,
                         b, s, formula)


def _stored(config: Mapping[str, Any], cfg: Any, name: str,
            options: Options) -> tuple[int, str, tuple[tuple[str, int], ...]] | None:
    """The weights as the checkpoint's ``quantization_config`` stores them (``traced_stored``): bytes, the scheme in
    words, the parts; None without one or under ``--weight-dtype`` (which overrides the checkpoint). A config
    memderive cannot store exactly is refused in one line."""
    if options.weight_dtype is not None or config.get("quantization_config") is None:
        return None
    q = read_quantization(config["quantization_config"])
    if q.reason:
        raise TracedError(f"{name}: quantization_config: {q.reason}")
    if options.tp > 1:
        raise TracedError(f"{name}: --tp {options.tp} with the checkpoint's quantization_config ({q.method}) is not "
                          "traced yet; give --weight-dtype, or leave out --tp")
    model, _ = build(cfg, "eager", fake=True, images=0)
    total, parts = stored_weights(model, q, name)
    return total, q.label, parts


def _images(cfg: Any, name: str, options: Options) -> int:
    """Images per sequence (``--images``): a vision-language model's, 1 unless given (0: text only); any other
    model's 0, and more refused in one line."""
    vision = model_class(cfg).__name__ == "AutoModelForImageTextToText"
    n = options.images if options.images is not None else (1 if vision else 0)
    if n and vision and cfg.model_type not in IMAGES_TRACED:
        raise _untraced_images(cfg.model_type)
    if n and not vision:
        raise TracedError(f"{name}: --images {n}: {cfg.model_type} reads no images (no vision tower traced); "
                          "leave out --images, or give a vision-language model's config.json")
    if n > 1 and cfg.model_type in QWEN_VL:
        raise TracedError(f"{name}: --images {n}: more than one image is not traced for {cfg.model_type} yet (each "
                          "image's vision_start/vision_end and 3-D rope positions); give --images 0 or 1")
    return n


def _traced_strategies(options: Options, trainable: int, total: int) -> traced_strategies.Strategies:
    """The strategies a training estimate was traced under (recompute, LoRA's parameters, data parallelism)."""
    lora = None
    if options.lora_rank is not None:
        on = ",".join((*options.lora_targets, *options.lora_target_parameters))
        lora = (f"{'DoRA' if options.dora else 'LoRA'} rank {options.lora_rank} on {on}"
                + (f", dropout {options.lora_dropout}" if options.lora_dropout else ""))
    frozen = ", ".join(([f"--train-only {','.join(options.train_only)}"] if options.train_only else [])
                       + (["--freeze-embeddings"] if options.freeze_embeddings else [])) or None
    tuned = lora or frozen
    return traced_strategies.Strategies(options.recompute, lora, trainable if tuned else None,
                                        total if tuned else None, options.dp, options.zero, frozen=frozen)


def _traced_tp(est: TracedEstimate, cfg: Any, options: Options) -> TracedEstimate:
    """Under ``--tp``: rank 0's parameters under the model's ``tp_plan``, and from them its model states (training)
    or weights (inference)."""
    model, _ = build(cfg, "eager", fake=True)
    per_rank, rows = traced_strategies.tp_rank_parameters(model, options.tp)
    done = traced_strategies.Strategies(options.recompute, dp=options.dp, zero=options.zero, tp=options.tp,
                                        tp_parameters=per_rank, tp_rows=rows)
    if options.mode == "train":
        return dc.replace(est, strategies=done, states=traced_strategies.state_rows(per_rank, per_rank, options))
    return dc.replace(est, strategies=done, weights=per_rank * dtype_of(options.weight_dtype or "bf16").nbytes)


def _traced_flops(est: TracedEstimate, cfg: Any, options: Options, built: tuple[Any, Any] | None, b: int,
                  s: int, formula: Callable[..., Any] | None = None) -> TracedEstimate:
    """``_count_flops``, or where transformers' code cannot be counted on fake tensors the estimate without FLOPs and
    the reason in one line (the bytes stand on their own)."""
    try:
        return _count_flops(est, cfg, options, built, b, s, formula)
    except TracedError as exc:
        return dc.replace(est, strategies=dc.replace(est.strategies, flops_error=str(exc)))


def _count_flops(est: TracedEstimate, cfg: Any, options: Options, built: tuple[Any, Any] | None, b: int,
                 s: int, formula: Callable[..., Any] | None = None) -> TracedEstimate:
    """FLOPs as the hand-written path words them, counted on an eager build (``built`` where the estimate's own
    model is one without recompute), each with its polynomial in b and s. Training: forward, model (forward +
    backward, no recompute), hardware (with ``--recompute full``'s re-run forward) and per token; inference: the
    prefill of s tokens (the last position's logits, as generate asks). Each value is counted at the user's (b, s);
    its formula is ``formula``'s (``traced_symbolic.formula``: one run on symbolic b and s, checked equal to that
    count) where given and no strategy prepares the model, else the polynomial fitted through small (b, s)."""
    train = options.mode == "train"
    dtype = options.dtype if train else (options.weight_dtype or "bf16")
    derive = formula  # (``formula`` below is each row's formula in words)
    symbolic = derive is not None and (not train or traced_strategies.prepare(options, recompute=False, tp=False)
                                        is None)

    def fitted(count: Callable[[Any, Any, int, int], int], on: tuple[Any, Any],
               kind: str | None = None) -> tuple[int, str | None]:
        value = count(*on, b, s)
        if symbolic and kind is not None:
            got = derived("prefill_flops") if kind == "prefill_flops" else derived("train_flops")[kind == "model_flops"]
            return value, got.short if got else None
        fit = checked_fit(count, *on, b, s, value)
        return value, None if fit is None else str(fit)

    @functools.cache
    def derived(kind: str) -> Any:  # a training step's forward and model FLOPs: one symbolic run, a pair
        if kind == "prefill_flops":
            return derive(cfg, "eager", dtype, kind, b, s, counted(b, s)[0], *plain)
        forward, backward = counted(b, s)
        return derive(cfg, "eager", dtype, "train_flops", b, s, (forward, forward + backward), *plain)

    plain = built if built is not None and (not train or options.recompute == "none") else build(
        cfg, "eager", dtype,
        prepare=traced_strategies.prepare(options, recompute=False, tp=False) if train else None,
        images=est.images_per_sequence)
    # each (b, s) run once on each stack a fit runs (the whole one, or a fold's few layers: traced_fold)
    memo = functools.cache(lambda bb, ss, _layers: flops(*plain, bb, ss, train=train))

    def counted(bb: int, ss: int) -> tuple[int, int]:
        return memo(bb, ss, traced_fold.layers_now(plain[0]))

    rows = []
    if not train:
        value, formula = fitted(lambda m, md, bb, ss: counted(bb, ss)[0], plain, "prefill_flops")
        rows.append(("prefill_flops", "Prefill FLOPs", value, formula))
        return dc.replace(est, strategies=dc.replace(est.strategies, flops=tuple(rows)))
    forward, formula = fitted(lambda m, md, bb, ss: counted(bb, ss)[0], plain, "forward_flops")
    rows.append(("forward_flops", "Forward FLOPs per micro-batch", forward, formula))
    model_flops, formula = fitted(lambda m, md, bb, ss: sum(counted(bb, ss)), plain, "model_flops")
    rows.append(("model_flops", "Model FLOPs per micro-batch (forward + backward)", model_flops, formula))
    if options.recompute != "none":
        again = built if built is not None and est.attention == "eager" else build(
            cfg, "eager", options.dtype, prepare=traced_strategies.prepare(options, tp=False),
            images=est.images_per_sequence)
        hardware, formula = fitted(lambda m, md, bb, ss: sum(flops(m, md, bb, ss)), again)
    rows.append(("hardware_flops", "Hardware FLOPs per micro-batch (with recompute)",
                 hardware if options.recompute != "none" else model_flops, formula))
    if model_flops % (b * s) == 0:  # a whole number per token (else the per-micro-batch figure alone)
        rows.append(("model_flops_per_token", "Model FLOPs per token", model_flops // (b * s), None))
    return dc.replace(est, strategies=dc.replace(est.strategies, flops=tuple(rows)))
