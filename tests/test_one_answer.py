"""Issue 37, item 13: one answer to each of these questions.

* ``--virtual-stages 3`` without ``--pp``: a warning that it does not matter, and then the answer (was: the warning,
  then an error about 32 layers not divisible by p*v = 3).
* A refusal of a value the ``--framework`` preset set (not the user) names the framework.
* An option of a part the model lacks is refused in one line, experts kernel and latent-attention decode alike.
* ``--optimizer-in-backward`` with gradient accumulation is refused, as torchtune refuses it
  (recipes/full_finetune_single_device.py: "Gradient accumulation is not supported with optimizer in bwd").
"""

from __future__ import annotations

import json

import pytest

from memderive.commands.cli import main

TRAIN = ["--model", "llama-3-8b", "--mode", "train", "--batch", "1", "--seq", "2048"]


def _run(capsys, *words: str) -> tuple[int, str, str]:
    code = main(list(words))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_virtual_stages_without_pp_is_one_warning_and_the_answer(capsys) -> None:
    code, out, err = _run(capsys, "estimate", *TRAIN, "--virtual-stages", "3", "--json")
    assert code == 0, err
    assert err.count("\n") == 1 and "warning: --virtual-stages applies to pipeline parallelism" in err
    code, plain, _ = _run(capsys, "estimate", *TRAIN, "--json")
    assert json.loads(out)["total_bytes"] == json.loads(plain)["total_bytes"]


@pytest.mark.parametrize("words, line", [
    (["--framework", "megatron", "--offload"],
     "--framework megatron sets --grad-buffer fp32, which is not modelled with --offload"),
    (["--framework", "megatron", "--lora-rank", "16", "--lora-targets", "linear_qkv"],  # and what to give instead
     "--framework megatron sets --grad-buffer fp32, which is not modelled with fine-tuning options; give "
     "--grad-buffer param"),
    (["--framework", "torchtune", "--micro-batches", "4"],
     "--framework torchtune sets --optimizer-in-backward, which is not supported with gradient accumulation"),
    (["--framework", "torchtune", "--fp8", "tensorwise"],
     "--fp8 is not modelled with --loss-chunks (--framework torchtune sets --loss-chunks 8)"),
    (["--framework", "hf-trainer", "--cp", "2"], "(--framework hf-trainer sets --implementation hf)"),
])
def test_a_refusal_of_a_preset_value_names_the_framework(capsys, words: list[str], line: str) -> None:
    code, out, err = _run(capsys, "estimate", *TRAIN, *words)
    assert code == 2 and out == "" and err.count("\n") == 1 and line in err


def test_a_value_the_user_gave_is_blamed_on_the_user(capsys) -> None:
    code, _, err = _run(capsys, "estimate", *TRAIN, "--framework", "megatron", "--offload", "--grad-buffer", "fp32")
    assert code == 2 and "memderive: error: --grad-buffer fp32 is not modelled with --offload" in err
    assert "sets" not in err


@pytest.mark.parametrize("words, line", [
    (["estimate", *TRAIN, "--implementation", "hf", "--experts-implementation", "eager"],
     "llama-3-8b has no mixture-of-experts layers: --experts-implementation applies to routed experts"),
    (["estimate", "--model", "llama-3-8b", "--mode", "infer", "--batch", "1", "--seq", "2048", "--mla-decode",
      "absorbed"], "--mla-decode is the decode form of multi-head latent attention; llama-3-8b has none"),
])
def test_an_option_of_a_part_the_model_lacks_is_refused(capsys, words: list[str], line: str) -> None:
    code, out, err = _run(capsys, *words)
    assert code == 2 and out == "" and err.count("\n") == 1 and line in err


@pytest.mark.parametrize("extra", [[], ["--pp", "2"]])
def test_optimizer_in_backward_with_accumulation_is_refused(capsys, extra: list[str]) -> None:
    code, out, err = _run(capsys, "estimate", *TRAIN, "--optimizer-in-backward", "--micro-batches", "4", *extra)
    assert code == 2 and out == "" and "--optimizer-in-backward is not supported with gradient accumulation" in err
    code, _, err = _run(capsys, "estimate", *TRAIN, "--optimizer-in-backward", "--micro-batches", "1")
    assert code == 0, err
