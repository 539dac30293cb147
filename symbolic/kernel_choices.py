"""The names some kernels are chosen by, kept apart from the kernels' own modules so that checking a choice
(``derivations.options``) imports none of them: torchao's Float8 recipes (``float8``), the devices
transformers' code runs on (``hf_code``) and its experts kernels (``hf_experts``)."""

from __future__ import annotations

__all__ = ["RECIPES", "DEVICES", "EXPERTS_KERNELS"]

#: torchao's ``Float8LinearRecipeName`` values.
RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
DEVICES = ("cuda", "cpu")
#: transformers' names (``experts_implementation``); the first is its default.
EXPERTS_KERNELS = ("grouped_mm", "eager")
