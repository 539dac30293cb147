"""Map a Hugging Face ``config.json`` onto a ``Model``, offline.

The family adapters (``derivations.models.families``) read the fields each family's transformers
modeling code reads; a field the graph cannot represent exactly is an error naming that field.

>>> m = from_config({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
...                  "num_hidden_layers": 2, "intermediate_size": 172, "vocab_size": 100})
>>> m.sizes["f"], m.arch.tied_embeddings
(172, False)
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from memderive.derivations.models.checkpoint_files import read_checkpoint
from memderive.derivations.models.config_fields import (MAX_SIZE, ConfigError, Fields, MissingSizes, padding_index,
                                                        with_dropout)
from memderive.derivations.models.families import ADAPTERS, REFUSED, SUPPORTED_MODEL_TYPES
from memderive.derivations.models.hf_import import quiet_import
from memderive.derivations.models.model import Model
from memderive.derivations.models.quantization import read_quantization
from memderive.symbolic.errors import shown

__all__ = ["ConfigError", "from_config", "load_config", "config_name", "by_architecture", "SUPPORTED_MODEL_TYPES"]


def from_config(config: Mapping[str, Any], name: str | None = None, source: str = "") -> Model:
    """Build a ``Model`` from a config dict (the parsed ``config.json``)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{name or 'config'}: expected a JSON object, got {type(config).__name__}")
    label = _label(name or str(config.get("_name_or_path") or config.get("model_type") or "config"))
    model_type = config.get("model_type")
    if model_type is None:
        raise ConfigError(f"{label}: config field 'model_type' is missing; add it to config.json")
    if not isinstance(model_type, str):
        raise ConfigError(f"{label}: config field 'model_type' = {model_type!r} must be a string (e.g. \"llama\")")
    fields = Fields(config, label)
    if model_type in REFUSED:
        REFUSED[model_type](fields)
    if model_type not in ADAPTERS:
        raise ConfigError(f"{label}: model_type {model_type!r} is not supported; supported: "
                          f"{', '.join(SUPPORTED_MODEL_TYPES)}")
    arch, sizes, extra = ADAPTERS[model_type](fields)
    if fields.missing:  # every size the model needs that the config leaves out, in one line
        raise MissingSizes(fields)
    padding_index(fields, sizes["V"])
    arch, extra = with_dropout(fields, arch, extra)
    if fields.notes:  # names read otherwise than the config may suggest (config_fields.Fields)
        extra = {**extra, "notes": (*extra.get("notes", ()), *fields.notes)}
    for key, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIZE:
            raise ConfigError(f"{label}: size {key} must be a positive integer up to 10^12, got {shown(value)}")
    positions = extra.get("max_positions")
    if positions is not None and (isinstance(positions, bool) or not isinstance(positions, int)
                                  or not 0 < positions <= MAX_SIZE):
        raise ConfigError(f"{label}: the model's positions (max_position_embeddings, n_positions or max_seq_len) "
                          f"= {shown(positions)} must be a positive integer up to 10^12")
    if config.get("quantization_config") is not None:  # the 16-bit dtype the checkpoint keeps scales in
        given = config.get("dtype", config.get("torch_dtype"))
        extra = {**extra, "quantization": read_quantization(config["quantization_config"],
                                                            4 if given == "float32" else 2)}
    return Model(label, arch, sizes, source=source, **extra)


def _label(name: str) -> str:
    """A model's name as one line of at most 200 characters (it heads reports and error messages)."""
    flat = " ".join(name.split()) or "config"
    return flat if len(flat) <= 200 else flat[:197] + "..."


def load_config(path: str | Path, name: str | None = None) -> Model:
    """Read a local ``config.json`` (or a folder holding one); no hub access. The safetensors (or GGUF) files
    beside a ``config.json`` are read for their headers (``Model.checkpoint``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError(f"{shown(str(path), 200)}: no such file; give a local config.json path or a bundled "
                          "model name")
    if p.suffix in (".gguf", ".safetensors"):
        raise ConfigError(f"{shown(str(path), 200)}: a checkpoint file, not a config; give the folder that holds it "
                          "with its config.json (memderive reads the file's header there for the stored bytes)")
    try:
        config = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{shown(str(p), 200)}: not valid JSON ({exc}); check the file") from None
    except RecursionError:  # '[' nested 100,000 deep: Python's reader gives up, and so do we, in one line
        raise ConfigError(f"{shown(str(p), 200)}: JSON nested too deeply to read; a config.json is a flat "
                          "object") from None
    config, note = by_architecture(config)
    model = from_config(config, name or config_name(config, p), source=str(p) + (f"; {note}" if note else ""))
    stored = read_checkpoint(p.parent) if p.name == "config.json" else None
    return replace(model, checkpoint=stored) if stored is not None else model


def by_architecture(config: Any) -> tuple[Any, str]:
    """``config`` read as the model transformers builds for its ``architectures`` class, where neither memderive nor
    transformers knows its own ``model_type`` (a checkpoint's custom code reusing an architecture: Kimi K2's
    ``kimi_k2`` with ``DeepseekV3ForCausalLM``), and a note that says so; else ``config`` as it is and "". The
    model_type is the one of the class's own ``config_class`` (``Qwen3_5ForCausalLM``: ``qwen3_5_text``, not the
    multimodal ``qwen3_5`` that also lists it; ``LlamaForCausalLM``: ``llama``), for a class transformers' auto-model
    mappings name; without transformers, nothing changes."""
    model_type = config.get("model_type") if isinstance(config, dict) else None
    archs = config.get("architectures") if isinstance(config, dict) else None
    if (not isinstance(model_type, str) or model_type in ADAPTERS or model_type in REFUSED
            or not (isinstance(archs, list) and archs and isinstance(archs[0], str))):
        return config, ""
    try:
        known = importlib.import_module("transformers.models.auto.configuration_auto").CONFIG_MAPPING_NAMES
        auto = importlib.import_module("transformers.models.auto.modeling_auto")
    except ImportError:
        return config, ""
    if model_type in known or archs[0] not in _auto_classes(auto):
        return config, ""
    key = getattr(quiet_import("transformers", archs[0]).config_class, "model_type", None)
    if not isinstance(key, str) or key not in known:
        return config, ""
    return {**config, "model_type": key}, (f"model_type {model_type!r} read as {key} (its architectures: "
                                           f"{archs[0]}, whose config class is {key}'s)")


@functools.cache
def _auto_classes(auto: Any) -> frozenset[str]:
    """The class names transformers' auto-model mappings (``modeling_auto``'s ``*_MAPPING_NAMES``) name, read once."""
    return frozenset(c for table in dir(auto) if table.endswith("_MAPPING_NAMES")
                     for classes in getattr(auto, table).values()
                     for c in (classes if isinstance(classes, tuple) else (classes,)))


def config_name(config: Any, path: Path) -> str:
    """A config file's model name: its ``_name_or_path`` (the last part of a local path), else the
    folder of a file named ``config.json``, else the file's stem (``qwen2-7b.json`` -> ``qwen2-7b``).

    >>> config_name({}, Path("configs/qwen2-7b.json")), config_name({}, Path("models/llama/config.json"))
    ('qwen2-7b', 'llama')
    >>> config_name({"_name_or_path": "meta-llama/Llama-2-7b-hf"}, Path("x/config.json"))
    'meta-llama/Llama-2-7b-hf'
    """
    given = config.get("_name_or_path") if isinstance(config, dict) else None
    if isinstance(given, str) and given.strip():
        given = given.strip().rstrip("/")
        return Path(given).name if given.startswith(("/", ".", "~")) else given
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem
