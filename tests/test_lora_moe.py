"""LoRA on MoE families and the target forms PEFT accepts, counted as PEFT counts them (issue 22 item 4).

Every expected count is PEFT 0.21.2's own ``get_nb_trainable_parameters()`` on the transformers model built
on the meta device from the tiny configs of ``tests/hf_families.py`` (r = 4); what PEFT refuses (an experts
module or a ``*TopKRouter`` named in ``target_modules``, half of a fused expert pair, a parameter of a module
also wrapped) PEFT raises for, and memderive says in one line. One count is also worked by hand.
"""

from __future__ import annotations

import subprocess
import sys
import warnings

import peft
import pytest
import torch
import transformers

from memderive.derivations.estimate import estimate
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import OptionsError
from tests.hf_families import MOE, TINY, _model_class, config

RANK = 4


def peft_model(model_type: str, targets: tuple[str, ...], parameters: tuple[str, ...] = ()):
    transformers.logging.set_verbosity_error()
    with torch.device("meta"):
        model = _model_class(model_type)(config(model_type))
    kw: dict = {"target_modules": targets[0] if targets == ("all-linear",) else (list(targets) or None)}
    if parameters:
        kw["target_parameters"] = list(parameters)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return peft.get_peft_model(model, peft.LoraConfig(r=RANK, **kw))


def peft_count(model_type: str, targets: tuple[str, ...], parameters: tuple[str, ...] = ()) -> int:
    return peft_model(model_type, targets, parameters).get_nb_trainable_parameters()[0]


def ours(model_type: str, targets: tuple[str, ...], parameters: tuple[str, ...] = ()) -> int:
    model = resolve_model(config(model_type).to_dict())
    return estimate(model, lora_rank=RANK, lora_targets=targets, lora_target_parameters=parameters).number(
        "trainable_parameters")


def test_mixtral_all_linear_by_hand() -> None:
    """Mixtral, h = 64, 4 heads (2 K/V heads of 16), E = 4 experts of f = 96, 3 layers, r = 4. PEFT's
    all-linear on a converted MoE model: attention q, k, v, o (r (in + out) each: 4 x 128 + 4 x 96 + 4 x 96
    + 4 x 128 = 1,792); the router's gate.weight (4, 64) as a 2-D ParamWrapper: 4 x 68 = 272; gate_up_proj
    (4, 192, 64) at rank 2r = 8 (rank_pattern): 8 x 4 x (192 + 64) = 8,192; down_proj (4, 64, 96) at r:
    4 x 4 x (64 + 96) = 2,560. 12,816 per layer x 3 = 38,448."""
    assert ours("mixtral", ("all-linear",)) == 38_448 == peft_count("mixtral", ("all-linear",))


@pytest.mark.parametrize("model_type", MOE)
def test_all_linear_on_every_moe_family_is_peft_count(model_type: str) -> None:
    assert ours(model_type, ("all-linear",)) == peft_count(model_type, ("all-linear",))


#: Expert parameters and routers, named as modules (v4 names PEFT converts) or as target parameters.
CASES = [
    ("mixtral", ("gate",), ()),  # the router, as gate.weight
    ("mixtral", ("w1", "w3"), ()),  # gate_up_proj at twice the rank
    ("mixtral", ("w2", "q_proj"), ()),
    ("mixtral", (), ("gate_up_proj", "down_proj")),  # given as parameters: rank r, no pattern
    ("mixtral", ("q_proj",), ("mlp.gate.weight",)),
    ("qwen3_moe", ("gate_proj", "up_proj", "down_proj"), ()),
    ("olmoe", ("self_attn.q_proj", "gate"), ()),
    ("deepseek_v3", ("gate_proj", "up_proj"), ()),  # converted away: dense and shared gate_proj not adapted
    ("deepseek_v2", ("shared_experts.down_proj", "kv_b_proj"), ()),
    ("qwen2_moe", ("gate_proj",), ()),  # not converted (PEFT leaves qwen2_moe alone): dense + shared linears
    ("qwen2_moe", ("shared_expert_gate",), ("gate_up_proj",)),
    ("gpt_oss", (), ("gate_up_proj", "down_proj", "router.weight")),
    ("phimoe", ("router",), ()),  # an nn.Linear router
    ("granitemoe", ("o_proj",), ("experts.gate_up_proj",)),
    ("mixtral", ("lm_head", "embed_tokens"), ()),
]


@pytest.mark.parametrize(("model_type", "targets", "parameters"), CASES,
                         ids=[f"{c[0]}-{'+'.join(c[1] + c[2])}" for c in CASES])
def test_moe_targets_are_peft_count(model_type: str, targets: tuple[str, ...], parameters: tuple[str, ...]) -> None:
    assert ours(model_type, targets, parameters) == peft_count(model_type, targets, parameters)


#: lm_head, embeddings (lora.Embedding: lora_embedding_A (r, V), lora_embedding_B (h, r)) and suffix forms.
FORMS = [
    ("llama", ("lm_head",)), ("llama", ("embed_tokens", "self_attn.q_proj", "mlp.down_proj")),
    ("gpt2", ("wte", "lm_head")),  # tied: the head still gets its own adapter
    ("gpt2", ("attn.c_proj",)), ("gpt2", ("mlp.c_proj", "wpe")), ("opt", ("embed_positions", "decoder.embed_tokens")),
    ("phi3", ("mlp.gate_up_proj", "self_attn.qkv_proj")), ("gpt_neox", ("attention.dense", "embed_in")),
    ("bert", ("attention.self.query", "output.dense")), ("falcon", ("self_attention.query_key_value", "lm_head")),
    ("gemma", ("model.embed_tokens",)),
]


@pytest.mark.parametrize(("model_type", "targets"), FORMS, ids=[f"{c[0]}-{'+'.join(c[1])}" for c in FORMS])
def test_target_forms_are_peft_count(model_type: str, targets: tuple[str, ...]) -> None:
    assert ours(model_type, targets) == peft_count(model_type, targets)


#: What PEFT raises for, and the words of memderive's line.
REFUSED = [
    ("mixtral", ("w1",), (), "without w3"),
    ("qwen3_moe", ("gate_proj",), (), "without up_proj"),
    ("qwen2_moe", ("gate",), (), "not a linear or embedding module"),
    ("gpt_oss", ("router",), (), "not a linear or embedding module"),
    ("mixtral", ("experts",), (), "not a linear or embedding module"),
    ("mixtral", ("q_proj",), ("q_proj.weight",), "already adapted as a module"),
]


@pytest.mark.parametrize(("model_type", "targets", "parameters", "words"), REFUSED,
                         ids=[f"{c[0]}-{'+'.join(c[1] + c[2])}" for c in REFUSED])
def test_what_peft_refuses_is_one_line(model_type: str, targets, parameters, words: str) -> None:
    with pytest.raises(ValueError):
        peft_model(model_type, targets, parameters)
    with pytest.raises(OptionsError, match=words) as err:
        ours(model_type, targets, parameters)
    assert "\n" not in str(err.value)


def test_target_parameters_alone_where_peft_adds_its_defaults_is_refused() -> None:
    """PEFT fills ``target_modules`` from its per-model-type defaults when none is given, beside
    ``target_parameters`` too: llama's ``mlp.down_proj.weight`` alone adapts q_proj and v_proj as well."""
    adapted = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in
               peft_model("llama", (), ("mlp.down_proj.weight",)).named_parameters() if p.requires_grad}
    assert adapted == {"q_proj", "v_proj", "down_proj"}
    with pytest.raises(OptionsError, match="default target modules"):
        ours("llama", (), ("mlp.down_proj.weight",))


def test_a_name_for_one_layer_is_refused() -> None:
    with pytest.raises(OptionsError, match="one layer"):
        ours("llama", ("layers.0.self_attn.q_proj",))


def test_the_cli_takes_target_parameters() -> None:
    """mixtral-8x7b, r = 8 on the experts' gate_up_proj and down_proj (E = 8, h = 4,096, f = 14,336,
    32 layers): 8 x 8 x (2 x 14,336 + 4,096) + 8 x 8 x (4,096 + 14,336) = 2,097,152 + 1,179,648 =
    3,276,800 per layer, x 32 = 104,857,600."""
    run = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "mixtral-8x7b",
                          "--mode", "train", "--batch", "1", "--seq", "8", "--lora-rank", "8",
                          "--lora-target-parameters", "gate_up_proj,down_proj", "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert '104857600' in run.stdout.replace(",", "").replace("_", "")
    bad = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "mixtral-8x7b",
                          "--mode", "train", "--batch", "1", "--seq", "8", "--lora-rank", "8",
                          "--lora-targets", "experts"], capture_output=True, text=True)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr


def test_tiny_configs_cover_every_moe_family() -> None:
    assert set(MOE) <= set(TINY)


@pytest.mark.parametrize("experts", ["eager", "grouped_mm"])
def test_param_wrapper_saves_the_adapted_expert_stack(experts: str) -> None:
    """PEFT's ParamWrapper forms W' = W + B A under ``parametrize.cached()`` and the experts run on W': a new
    tensor the size of the parameter, saved for the input's gradient, where the frozen W was not saved. Tiny
    Mixtral (E = 4, h = 64, f = 96), b = 2, s = 24, bf16, PEFT on q_proj plus target_parameters gate_up_proj,
    down_proj (``tests/hf_saved.py``: saved_tensors_hooks over a whole forward on CPU). The first layer's
    experts module saves what the graph's experts op saves, to the byte; against frozen experts it saves, by
    hand, W' of gate_up 4 x 192 x 64 x 2 = 98,304 B and of down 4 x 64 x 96 x 2 = 49,152 B, and again the
    inputs of the weight gradients: the gathered rows 96 x 64 x 2 = 12,288 B and the hidden 96 x 96 x 2 =
    18,432 B (b s k = 96 token-expert pairs): 178,176 B."""
    from memderive.derivations.models.implementations import hf_layers
    from memderive.derivations.options import Options
    from memderive.derivations.quantities.finetune import finetune_steps
    from memderive.symbolic.derive import activations, evaluate
    from memderive.symbolic.dims import b, r, s
    from memderive.symbolic.strategies import RequiresGrad
    from tests.hf_saved import Shape, measure_config

    shape, cfg = Shape(2, 24), config("mixtral", "eager", experts)

    def experts_bytes(parameters: tuple[str, ...]) -> int:
        lora = peft.LoraConfig(r=RANK, target_modules=["q_proj"], target_parameters=list(parameters) or None)
        saved = measure_config(cfg, shape, lora=lora).by_module("base_model.model.model.layers.0.mlp.experts")
        return sum(saved.values())

    model = resolve_model(cfg.to_dict())
    graph = hf_layers(model, "eager", "cpu", experts)(model.graph("bf16", dropout=True))
    opts = Options(mode="train", batch=shape.b, seq=shape.s, lora_rank=RANK, lora_targets=("q_proj",),
                   lora_target_parameters=("gate_up_proj", "down_proj"), implementation="hf-eager", profile="exact")
    for step in [*finetune_steps(model, opts), RequiresGrad()]:
        graph = step(graph)
    terms = {t.path: t.expr for t in activations(graph).terms}
    derived = int(evaluate(terms["first_layer/moe/experts"], {**model.values(), b: shape.b, s: shape.s, r: RANK}))
    wrapped = experts_bytes(("gate_up_proj", "down_proj"))
    assert wrapped == derived
    assert wrapped - experts_bytes(()) == 98_304 + 49_152 + 12_288 + 18_432
