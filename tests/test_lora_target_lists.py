"""LoRA target lists as PEFT reads ``target_modules`` (issue 20 item 3).

PEFT 0.21.2 treats ``all-linear`` as a shorthand only when it is the whole value; inside a list it is a module
name no module has, and PEFT adapts the other names only (``down_proj,all-linear,q_proj,v_proj`` adapts 3 kinds of
module of LLaMA's 7, where memderive counted every linear: 17,920 against PEFT's 7,680 in the fuzzer's case). A
name with spaces around it (``'q_proj '``) matches no module: PEFT raises. memderive refuses both in one line
rather than count something PEFT does not build. The first test measures PEFT itself (the independent source of
the rule), the others the refusal.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError

MIXED = ("down_proj", "all-linear", "q_proj", "v_proj")


def _peft_adapted(targets):
    import peft
    import torch
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=targets))
    return sorted({n.split(".")[-2] for n, _ in wrapped.named_modules() if n.endswith("lora_A")})


def test_peft_reads_all_linear_in_a_list_as_a_name_and_spaces_as_part_of_it() -> None:
    import peft

    assert _peft_adapted(list(MIXED)) == ["down_proj", "q_proj", "v_proj"]  # not the 7 linears all-linear names
    assert len(_peft_adapted("all-linear")) == 7  # q k v o gate up down
    with pytest.raises(peft.tuners.tuners_utils.NoMatchingPeftModuleError if hasattr(
            peft.tuners.tuners_utils, "NoMatchingPeftModuleError") else ValueError):
        _peft_adapted(["q_proj "])


def test_all_linear_beside_names_is_refused() -> None:
    with pytest.raises(OptionsError, match="all-linear"):
        estimate("llama-2-7b", mode="train", batch=1, seq=512, lora_rank=8, lora_targets=MIXED)


def test_a_name_with_spaces_is_refused_in_the_api() -> None:
    with pytest.raises(OptionsError, match="spaces"):
        estimate("llama-2-7b", mode="train", batch=1, seq=512, lora_rank=8, lora_targets=("q_proj ",))


def test_the_cli_says_it_in_one_line() -> None:
    run = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "llama-2-7b", "--mode",
                          "train", "--batch", "1", "--seq", "512", "--lora-rank", "8", "--lora-targets",
                          ",".join(MIXED)], capture_output=True, text=True)
    assert run.returncode == 2 and "all-linear" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
