"""The graph's modules as transformers names them (``derivations.quantities.peft_modules``), checked against
the transformers model of every family (tiny configs of ``tests/hf_families.py``, built on the meta device),
and the PEFT 0.21.2 tables it holds checked against the installed PEFT and transformers. The hybrids
(``HF_GRAPH`` leaves them out) have no table: their graph is Megatron-Core's, fine-tuning options refuse them in one
line (``test_a_hybrid_refuses_fine_tuning_options``).
"""

from __future__ import annotations

import re
from collections import defaultdict

import peft
import pytest
import torch
import transformers
from transformers.pytorch_utils import Conv1D

from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.quantities.peft_modules import (HF_MODULES, LINEAR_ROUTERS, PEFT_DEFAULT_TARGETS,
                                                           PEFT_MOE_CONVERSION, peft_modules)
from memderive.symbolic.derive import evaluate
from tests.hf_families import HF_GRAPH, _model_class, config


def _built(model_type: str):
    transformers.logging.set_verbosity_error()
    with torch.device("meta"):
        return _model_class(model_type)(config(model_type))


def _templates(model) -> dict[str, list[torch.nn.Module]]:
    """Module name with the layer index as ``{i}`` -> the modules of every layer that have it."""
    out: dict[str, list] = defaultdict(list)
    for name, module in model.named_modules():
        if any(True for _ in module.parameters(recurse=False)):
            out[re.sub(r"\.\d+(\.|$)", r".{i}\1", name, count=1)].append(module)
    return out


@pytest.mark.parametrize("model_type", sorted(HF_GRAPH))
def test_every_module_is_named_as_transformers_names_it(model_type: str) -> None:
    """Each module exists, is of its kind (nn.Linear or Conv1D, nn.Embedding, or neither), and its
    parameters hold as many elements, per layer, as the graph's."""
    built, model = _built(model_type), resolve_model(config(model_type).to_dict())
    templates, values = _templates(built), model.values()
    graph = model.graph(dropout=False)
    params = {f"{blk.name}/{x.name}": x for blk, op in graph.ops() for x in op.params}
    for m in peft_modules(model):
        assert m.name in templates, f"{m.name} not in {sorted(templates)}"
        module = templates[m.name][0]
        linear = isinstance(module, torch.nn.Linear | Conv1D)
        assert {"linear": linear, "embedding": isinstance(module, torch.nn.Embedding),
                "other": not linear and not isinstance(module, torch.nn.Embedding)}[m.kind], (m.name, type(module))
        numel: dict[str, int] = defaultdict(int)
        for hf, graph_name in m.params:
            if graph_name in params:  # q, k, v split from a fused product have no parameter of their own yet
                numel[hf] += int(evaluate(params[graph_name].numel, values))
        for hf, n in numel.items():
            assert getattr(module, hf).numel() == n, (m.name, hf)


@pytest.mark.parametrize("model_type", sorted(HF_GRAPH))
def test_every_linear_and_embedding_of_transformers_is_in_the_table(model_type: str) -> None:
    """So that all-linear adapts what PEFT adapts: no linear module of the model is missing."""
    built, model = _built(model_type), resolve_model(config(model_type).to_dict())
    ours = {m.name for m in peft_modules(model)}
    theirs = {name for name, mods in _templates(built).items()
              if isinstance(mods[0], torch.nn.Linear | Conv1D | torch.nn.Embedding)}
    assert theirs <= ours, theirs - ours


def test_the_tables_are_the_installed_peft() -> None:
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as DEFAULTS
    from peft.utils.transformers_weight_conversion import (_MODEL_TO_CONVERSION_PATTERN, _MOE_FUSED_TARGETS,
                                                           _MOE_TARGET_MODULE_MAPPING)
    from transformers.conversion_mapping import get_checkpoint_conversion_mapping

    assert peft.__version__ == "0.21.2"
    for model_type in HF_GRAPH:
        family = resolve_model(config(model_type).to_dict()).arch.family
        base = _MODEL_TO_CONVERSION_PATTERN.get(model_type)
        converted = (base in _MOE_TARGET_MODULE_MAPPING and bool(_MOE_FUSED_TARGETS.get(base))
                     and get_checkpoint_conversion_mapping(model_type) is not None)
        assert (family in PEFT_MOE_CONVERSION) == converted, model_type
        if converted:
            mapping, fused = PEFT_MOE_CONVERSION[family]
            assert mapping == _MOE_TARGET_MODULE_MAPPING[base]
            assert fused == {k: tuple(v) for k, v in _MOE_FUSED_TARGETS[base].items()}
        assert PEFT_DEFAULT_TARGETS.get(family) == (tuple(DEFAULTS[model_type]) if model_type in DEFAULTS
                                                    else None), model_type
        router = next((m for n, m in _built(model_type).named_modules() if n.endswith(("mlp.gate", "mlp.router",
                                                                                    "moe.router"))), None)
        if router is not None and not isinstance(router, torch.nn.ModuleList):
            assert (family in LINEAR_ROUTERS) == isinstance(router, torch.nn.Linear), model_type


def test_the_table_has_every_family_of_memderive() -> None:
    families = {resolve_model(config(t).to_dict()).arch.family for t in HF_GRAPH}
    assert families == set(HF_MODULES)


def test_a_hybrid_refuses_fine_tuning_options() -> None:
    from memderive.derivations.estimate import estimate
    from memderive.derivations.options import OptionsError

    with pytest.raises(OptionsError, match="module names of family 'nemotron_h' are not known"):
        estimate(config("nemotron_h").to_dict(), mode="train", batch=1, seq=16, lora_rank=8,
                 lora_targets=("in_proj",))
