"""What a claim can be about: the checkable quantities, their names and the claim error.

>>> quantity_spec("activations").key
'activation_bytes_per_layer'
"""

from __future__ import annotations

from dataclasses import dataclass

from memderive.symbolic.errors import DerivationError

__all__ = ["ClaimError", "QuantitySpec", "QUANTITIES", "quantity_spec"]


class ClaimError(DerivationError):
    """A claim that cannot be checked as written (bad quantity, symbols, units or formula)."""


@dataclass(frozen=True, slots=True)
class QuantitySpec:
    """A checkable quantity: its name in claims, the mode it needs and the Estimate key."""

    name: str
    mode: str
    key: str
    unit: str
    per_position: bool = False  # divide by the cached length s + n (KV cache per position)


QUANTITIES: dict[str, QuantitySpec] = {q.name: q for q in (
    QuantitySpec("params.total", "params", "parameters", "elements"),
    QuantitySpec("params.per_layer", "params", "parameters_per_layer", "elements"),
    QuantitySpec("params.per_gpu", "train", "parameters_per_gpu", "elements"),
    QuantitySpec("params.trainable", "params", "trainable_parameters", "elements"),
    QuantitySpec("params.active", "params", "active_parameters", "elements"),
    QuantitySpec("activations.per_layer", "train", "activation_bytes_per_layer", "bytes"),
    QuantitySpec("activations.total", "train", "activation_bytes", "bytes"),
    QuantitySpec("model_states.total", "train", "model_state_bytes", "bytes"),
    QuantitySpec("train.total", "train", "total_bytes", "bytes"),
    QuantitySpec("kv_cache.total", "infer", "kv_cache_bytes", "bytes"),
    QuantitySpec("kv_cache.per_token", "infer", "kv_cache_bytes_per_token", "bytes"),
    QuantitySpec("kv_cache.per_position", "infer", "kv_cache_bytes", "bytes", per_position=True),
    QuantitySpec("weights.total", "infer", "weight_bytes", "bytes"),
    QuantitySpec("infer.total", "infer", "total_bytes", "bytes"),
    QuantitySpec("flops.forward", "train", "forward_flops", "FLOPs"),
    QuantitySpec("flops.step", "train", "model_flops", "FLOPs"),
    QuantitySpec("flops.hardware", "train", "hardware_flops", "FLOPs"),
    QuantitySpec("flops.per_token", "train", "model_flops_per_token", "FLOPs"),
    QuantitySpec("flops.prefill", "infer", "prefill_flops", "FLOPs"),
    QuantitySpec("flops.decode_per_token", "infer", "decode_flops_per_token", "FLOPs"),
)}
_ALIASES = {"parameters": "params.total", "params": "params.total", "parameters_per_layer": "params.per_layer",
            "params-per-layer": "params.per_layer",
            "trainable_parameters": "params.trainable", "trainable": "params.trainable", "parameters_per_gpu": "params.per_gpu",
            "activation_bytes_per_layer": "activations.per_layer", "activations": "activations.per_layer",
            "activation_bytes": "activations.total", "activations-total": "activations.total",
            "model_state_bytes": "model_states.total", "model-states": "model_states.total",
            "model_states": "model_states.total", "train-total": "train.total", "kv_cache_bytes": "kv_cache.total",
            "kv-cache": "kv_cache.total", "kv_cache": "kv_cache.total",
            "kv_cache_bytes_per_token": "kv_cache.per_token",
            "weight_bytes": "weights.total", "active_parameters": "params.active", "params-active": "params.active",
            "params-trainable": "params.trainable", "weights": "weights.total", "infer-total": "infer.total",
            "forward_flops": "flops.forward", "model_flops": "flops.step", "flops": "flops.step",
            "hardware_flops": "flops.hardware", "model_flops_per_token": "flops.per_token",
            "prefill_flops": "flops.prefill", "decode_flops_per_token": "flops.decode_per_token"}


def quantity_spec(name: str) -> QuantitySpec:
    """The quantity a claim is about: ``activations.per_layer``, an Estimate key, or a derive name."""
    key = _ALIASES.get(name, name)
    if key not in QUANTITIES:
        raise ClaimError(f"unknown quantity {name!r}; choose one of {', '.join(QUANTITIES)}")
    return QUANTITIES[key]
