"""One name per quantity (``derivations/quantity_table.py``): every estimate key has a public name, the
spellings users already type keep naming what they named, and estimate JSON, ``derive``, ``check``,
plots and writeups all read the one table.

The old spellings below are written out by hand from the two tables this one replaced (``derive``'s
``render/quantity_names.py`` and the claims' aliases in ``derivations/claims/spec.py``, as of 918b060),
so a renamed or dropped alias fails here.
"""

from __future__ import annotations

import json

import pytest

from memderive.commands.cli import main
from memderive.derivations.claims.spec import quantity_spec
from memderive.derivations.estimate import UnknownQuantity, estimate
from memderive.derivations.quantity_table import QUANTITY_NAMES, SPELLINGS, quantity_name, spellings

#: ``memderive derive`` names before the table: name -> (mode, estimate key).
OLD_DERIVE = {
    "params": ("params", "parameters"), "params-per-layer": ("params", "parameters_per_layer"),
    "activations": ("train", "activation_bytes_per_layer"), "activations-total": ("train", "activation_bytes"),
    "model-states": ("train", "model_state_bytes"), "train-total": ("train", "total_bytes"),
    "kv-cache": ("infer", "kv_cache_bytes"), "weights": ("infer", "weight_bytes"),
    "infer-total": ("infer", "total_bytes"), "flops": ("train", "model_flops"),
    "flops-forward": ("train", "forward_flops"), "flops-hardware": ("train", "hardware_flops"),
    "flops-per-token": ("train", "model_flops_per_token"), "flops-per-gpu": ("train", "hardware_flops_per_gpu"),
    "prefill-flops": ("infer", "prefill_flops"), "decode-flops": ("infer", "decode_flops_per_token"),
}
#: claim spellings before the table: alias -> claim name.
OLD_CLAIM = {
    "parameters": "params.total", "params": "params.total", "parameters_per_layer": "params.per_layer",
    "params-per-layer": "params.per_layer", "trainable_parameters": "params.trainable",
    "trainable": "params.trainable", "parameters_per_gpu": "params.per_gpu",
    "activation_bytes_per_layer": "activations.per_layer", "activations": "activations.per_layer",
    "activation_bytes": "activations.total", "activations-total": "activations.total",
    "model_state_bytes": "model_states.total", "model-states": "model_states.total",
    "model_states": "model_states.total", "train-total": "train.total", "kv_cache_bytes": "kv_cache.total",
    "kv-cache": "kv_cache.total", "kv_cache": "kv_cache.total", "kv_cache_bytes_per_token": "kv_cache.per_token",
    "weight_bytes": "weights.total", "active_parameters": "params.active", "params-active": "params.active",
    "params-trainable": "params.trainable", "weights": "weights.total", "infer-total": "infer.total",
    "forward_flops": "flops.forward", "model_flops": "flops.step", "flops": "flops.step",
    "hardware_flops": "flops.hardware", "model_flops_per_token": "flops.per_token",
    "prefill_flops": "flops.prefill", "decode_flops_per_token": "flops.decode_per_token",
}
OLD_CLAIM_NAMES = ("params.total", "params.per_layer", "params.per_gpu", "params.trainable", "params.active",
                   "activations.per_layer", "activations.total", "model_states.total", "train.total",
                   "kv_cache.total", "kv_cache.per_token", "kv_cache.per_position", "weights.total", "infer.total",
                   "flops.forward", "flops.step", "flops.hardware", "flops.per_token", "flops.prefill",
                   "flops.decode_per_token")
LORA = {"lora_rank": 8, "lora_targets": ("q_proj", "v_proj")}
#: Estimates that between them have every quantity key (MoE: active parameters; LoRA: trainable and
#: weights; offload: offloaded bytes; inference: the phases and their FLOPs).
ESTIMATES = [("mixtral-8x7b", {}), ("mixtral-8x7b", {"mode": "train", "batch": 1, "seq": 8}),
             ("llama-2-7b", {"mode": "train", "batch": 1, "seq": 8, "zero": 2, "dp": 2, "offload": True, **LORA}),
             ("llama-2-7b", {"mode": "params", **LORA}),
             ("mixtral-8x7b", {"mode": "infer", "batch": 1, "seq": 8, "new_tokens": 4})]


@pytest.mark.parametrize("spelling,target", OLD_DERIVE.items())
def test_old_derive_names_name_what_they_named(spelling: str, target: tuple[str, str]) -> None:
    q = quantity_name(spelling)
    assert (q.mode, q.key) == target


@pytest.mark.parametrize("spelling,name", OLD_CLAIM.items())
def test_old_claim_spellings_name_what_they_named(spelling: str, name: str) -> None:
    assert quantity_spec(spelling).name == name == quantity_name(spelling).name


def test_every_old_claim_name_is_still_checkable() -> None:
    assert all(quantity_spec(name).name == name for name in OLD_CLAIM_NAMES)


def test_a_spelling_declared_twice_is_refused() -> None:
    a, b = QUANTITY_NAMES[0], QUANTITY_NAMES[1]
    with pytest.raises(ValueError, match="declared twice"):
        spellings((a, type(b)(b.name, b.mode, b.key, b.unit, (a.aliases[0],))))
    assert len(SPELLINGS) == sum(1 + len(q.aliases) for q in QUANTITY_NAMES)


@pytest.mark.parametrize("model,options", ESTIMATES)
def test_every_estimate_key_has_one_public_name(model: str, options: dict) -> None:
    est = estimate(model, **options)
    names = est.to_json()["names"]
    assert set(names) == {q.key for q in est.reported_quantities()} and None not in names.values()
    for key, name in names.items():  # the name reads back as the key, in this mode
        assert est.quantity(name) is est.quantity(key)


def test_a_name_of_another_mode_is_refused() -> None:
    train = estimate("gpt2", mode="train", batch=1, seq=8)
    assert train.number("train.total") == train.number("total_bytes") == train.number("train-total")
    with pytest.raises(UnknownQuantity, match="infer.total"):
        train.number("infer.total")
    infer = estimate("gpt2", mode="infer", batch=1, seq=8)
    with pytest.raises(UnknownQuantity):
        infer.quantity("activations.total")  # inference's activation_bytes is activations.transient
    assert infer.quantity("activations.transient").key == "activation_bytes"


def _derive(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["derive", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("old", ["params-per-layer", "kv-cache", "flops-per-gpu", "activations"])
def test_derive_prints_the_same_for_a_name_and_its_alias(capsys: pytest.CaptureFixture, old: str) -> None:
    name = quantity_name(old).name
    assert _derive(capsys, old, "--model", "gpt2") == _derive(capsys, name, "--model", "gpt2")


def test_derive_refuses_an_unknown_name_in_one_line(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["derive", "bogus"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "train.total" in err


def test_check_takes_a_derive_name(capsys: pytest.CaptureFixture) -> None:
    answers = []
    for spelling in ("flops-forward", "flops.forward", "forward_flops"):
        assert main(["check", "--quantity", spelling, "--claim", "2*N*b*s", "--json"]) in (0, 1)
        answers.append(json.loads(capsys.readouterr().out)["verdict"])
    assert len(set(answers)) == 1


def test_the_writeup_rebuilds_derive_with_the_public_name_of_its_mode() -> None:
    from memderive.documents.writeup import quantity_document

    infer = estimate("gpt2", mode="infer", batch=1, seq=8)
    # the derive table named total_bytes twice; the first (train-total) was printed for an inference writeup
    assert "memderive derive infer.total " in quantity_document(infer, "total_bytes", "md")
