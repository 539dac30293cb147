"""Random LoRA target lists against PEFT (issue 20: the fuzz test grows to LoRA target lists).

Seeded (``random.Random``): for every family of ``tests/hf_families.py``, random subsets of the names of the
transformers model's own modules (read from the meta model, not from memderive's table): leaf names
(``q_proj``), two-part suffixes (``self_attn.q_proj``), norms and experts modules among them, and for MoE
families random ``target_parameters`` (``gate_up_proj``, ``mlp.gate.weight``, biases). Each case is PEFT
0.21.2's trainable count on the meta model, equal to memderive's; or PEFT raises and memderive refuses in
one line (an ``OptionsError`` without a newline). At this seed: 57 equal counts, 45 refused by both.
"""

from __future__ import annotations

import random
import re

import pytest
import torch

from memderive.derivations.options import OptionsError
from tests.hf_families import HF_GRAPH, MOE
from tests.test_lora_moe import ours, peft_count, peft_model

SEED = 20
CASES_PER_FAMILY = 3


def _names(model_type: str) -> tuple[list[str], list[str]]:
    """Module suffixes (one or two components, no layer index) and parameter suffixes of the real model."""
    built = peft_model.__globals__["_model_class"](model_type)
    from tests.hf_families import config

    with torch.device("meta"):
        model = built(config(model_type))
    modules, params = set(), set()
    for name, module in model.named_modules():
        parts = name.split(".")
        if not name or not any(True for _ in module.parameters(recurse=False)):
            continue
        modules.add(parts[-1])
        if len(parts) > 1 and not parts[-2].isdigit():
            modules.add(".".join(parts[-2:]))
        for pname, _ in module.named_parameters(recurse=False):
            params.add(pname if module.__class__.__name__.endswith("Experts") else f"{parts[-1]}.{pname}")
    return sorted(modules - {"model", "transformer"}), sorted(params)


def _cases() -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    rng = random.Random(SEED)
    out = []
    for model_type in sorted(HF_GRAPH):
        modules, params = _names(model_type)
        for _ in range(CASES_PER_FAMILY):
            targets = tuple(rng.sample(modules, rng.randint(1, min(4, len(modules)))))
            chosen = tuple(rng.sample(params, rng.randint(1, 2))) if model_type in MOE and rng.random() < 0.5 else ()
            out.append((model_type, targets, chosen))
    return out


@pytest.mark.parametrize(("model_type", "targets", "parameters"), _cases(),
                         ids=[f"{c[0]}-{'+'.join(c[1] + c[2])}" for c in _cases()])
def test_random_target_lists_are_peft(model_type: str, targets: tuple[str, ...], parameters: tuple[str, ...]) -> None:
    try:
        want: int | None = peft_count(model_type, targets, parameters)
    except (ValueError, TypeError, RuntimeError):
        want = None
    if want is None:
        with pytest.raises(OptionsError) as err:
            ours(model_type, targets, parameters)
        assert "\n" not in str(err.value)
        return
    try:
        got = ours(model_type, targets, parameters)
    except OptionsError as err:  # only where PEFT silently adds its default target modules
        assert re.search(r"default target modules", str(err)), str(err)
        return
    assert got == want
