"""A traced model's weights as its checkpoint stores them: the ``quantization_config`` of its ``config.json`` applied
to the module tree transformers builds (the hand-written families' counterpart is ``derivations.quantities.stored``).

Which modules a method quantizes, as transformers' quantizers replace them (``integrations/*.py``, v5.25): every
``nn.Linear`` but the output embedding (GPTQ's ``lm_head: true`` quantizes it too), the modules the config leaves
alone (``modules_to_not_convert``, ``llm_int8_skip_modules``, compressed-tensors' ``ignore``; matched as
``stored.skips_module`` matches them), the model's ``_keep_in_fp32_modules`` (every quantizer's
``get_modules_to_not_convert`` adds them: DeepSeek V3.2's ``indexer.weights_proj``) and a mixture of experts' router (a ``Linear`` beside an ``experts`` module:
left in 16 bit, as ``stored`` leaves the hand-written router); and the 3-D weights of an experts module
(``@use_experts_implementation``: ``gate_up_proj`` (E, 2f, h) stored per expert as ``gate_proj`` and ``up_proj``,
``down_proj`` (E, h, f); ``is_transposed`` (gpt-oss): (E, in, out)). MXFP4 quantizes the experts only. Each quantized
module's tensors are ``stored.module_bytes``; every other parameter is 16-bit (``stored.OTHER_BYTES``).

Llama 4's ``Llama4TextExperts`` (no decorator) stores (E, in, out) as gpt-oss does (``TRANSPOSED_EXPERTS``). Any other
experts module transformers writes without ``@use_experts_implementation`` (DBRX's ``DbrxExpertGLU``: stacked 2-D
weights) has no layout memderive knows the checkpoint's tensors by: refused in one line (``--weight-dtype`` overrides).
"""

from __future__ import annotations

import dataclasses as dc
from typing import Any

from memderive.derivations.models.config_fields import ConfigError
from memderive.derivations.models.quantization import Quantization, skips_module
from memderive.derivations.quantities.stored import OTHER_BYTES, module_bytes
from memderive.symbolic.lazy import lazy

torch = lazy("torch")

__all__ = ["stored_weights"]


#: Experts modules transformers writes without ``@use_experts_implementation`` whose 3-D weights are laid out as
#: (E, in, out): Llama 4's ``gate_up_proj`` (E, h, 2f) and ``down_proj`` (E, f, h) (models/llama4/modeling_llama4.py).
TRANSPOSED_EXPERTS = ("Llama4TextExperts",)


def _experts(module: Any) -> bool:
    """An experts module of ``@use_experts_implementation`` (it sets ``has_gate`` and ``is_transposed``), or one of
    ``TRANSPOSED_EXPERTS``."""
    return (hasattr(module, "is_transposed") and hasattr(module, "has_gate")) or \
        type(module).__name__ in TRANSPOSED_EXPERTS


def _transposed(module: Any) -> bool:
    return bool(getattr(module, "is_transposed", False)) or type(module).__name__ in TRANSPOSED_EXPERTS


def stored_weights(model: Any, q: Quantization, label: str) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Bytes of ``model``'s parameters (meta or fake tensors: shapes only) as a ``q`` checkpoint stores them, and
    their parts (``quantized``: the packed weights; ``scales``, ``zeros``, ``g_idx``... as ``module_bytes`` names
    them; ``16-bit``: every other parameter)."""
    modules = dict(model.named_modules())
    keep = dc.replace(q, skip=tuple(getattr(model, "_keep_in_fp32_modules", None) or ()), regex_skip=False)

    # a vision-language checkpoint saved before transformers 5 names its towers at the top (``visual``, ``vision_tower``)
    # where the v5 module tree has them under ``model.`` (Qwen2.5-VL-7B-Instruct-AWQ: modules_to_not_convert ["visual"])
    legacy = getattr(model.config, "vision_config", None) is not None

    def skipped(name: str) -> bool:
        names = (name, name[len("model."):]) if legacy and name.startswith("model.") else (name,)
        return any(skips_module(q, n) or skips_module(keep, n) for n in names)

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    done: set[int] = set()
    parts: dict[str, int] = {}

    def add(rows: int, cols: int, count: int = 1) -> None:
        for part, size in module_bytes(q, rows, cols, count):
            key = part or "quantized"
            parts[key] = parts.get(key, 0) + int(size)

    for name, module in modules.items():
        parent = modules.get(name.rsplit(".", 1)[0] if "." in name else "")
        if isinstance(module, torch.nn.Linear):
            router = parent is not None and isinstance(getattr(parent, "experts", None), torch.nn.Module)
            if q.scheme == "mxfp4" or router or skipped(name) or (module is head and not q.lm_head):
                continue
            rows, cols = module.weight.shape
            add(rows, cols)
            done.add(id(module.weight))
        elif _experts(module) and not skipped(name):
            for pname, p in module.named_parameters(recurse=False):
                if p.dim() != 3:
                    continue
                experts, rows, cols = p.shape
                if _transposed(module):
                    rows, cols = cols, rows
                if pname == "gate_up_proj" and q.scheme != "mxfp4":  # stored as gate_proj and up_proj per expert
                    experts, rows = 2 * experts, rows // 2
                add(rows, cols, experts)
                done.add(id(p))
    for name, p in model.named_parameters():
        owner = modules[name.rsplit(".", 1)[0]]
        if (p.dim() >= 2 and id(p) not in done and "expert" in type(owner).__name__.lower() and not _experts(owner)
                and not isinstance(owner, torch.nn.Linear) and not skipped(name.rsplit(".", 1)[0])):
            raise ConfigError(f"{label}: quantization_config {q.method}: {type(owner).__name__}'s expert weights "
                              f"({name}) have no checkpoint layout memderive knows; give --weight-dtype")
    rest = sum(p.numel() for p in model.parameters() if id(p) not in done)
    parts["16-bit"] = rest * OTHER_BYTES
    return sum(parts.values()), tuple(parts.items())
