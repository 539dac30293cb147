"""``fit``: the answer fits and the next value does not, checked with ``estimate`` itself."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.search.fit import FitError, fit
from memderive.derivations.options import Options

GB = 10**9


def fits(model: str, options: Options, capacity: int, solve_for: str, value: int) -> bool:
    return estimate(model, replace(options, **{solve_for: value})).number("total_bytes") <= capacity


CASES = [
    ("llama-2-7b", Options(mode="infer", batch=1, seq=2048, flash=True), 80 * GB, "batch"),
    ("llama-2-7b", Options(mode="infer", batch=1, seq=4096, new_tokens=512), 80 * GB, "batch"),
    ("llama-3-8b", Options(mode="infer", batch=8, seq=1), 80 * GB, "seq"),
    ("llama-2-70b", Options(mode="infer", batch=1, seq=1024, tp=8, weight_dtype="int4", kv_dtype="fp8"), 80 * GB,
     "batch"),
    ("mistral-7b", Options(mode="infer", batch=4, seq=1, flash=True), 24 * GB, "seq"),  # sliding window
    ("mistral-7b", Options(mode="infer", batch=1, seq=1, new_tokens=64, weight_dtype="int4"), 16 * GB, "seq"),
    ("gpt2", Options(mode="train", batch=1, seq=1024), 80 * GB, "batch"),
    ("llama-2-7b", Options(mode="train", batch=1, seq=1, tp=8, recompute="selective"), 40 * GB, "seq"),
    ("llama-2-7b", Options(mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="selective", flash=True),
     80 * GB, "batch"),
]


@pytest.mark.parametrize(("model", "options", "capacity", "solve_for"), CASES,
                         ids=[f"{m}-{o.mode}-{w}-{i}" for i, (m, o, _, w) in enumerate(CASES)])
def test_answer_fits_and_next_does_not(model: str, options: Options, capacity: int, solve_for: str) -> None:
    result = fit(model, options, capacity, solve_for)
    assert result.value >= 1
    assert fits(model, options, capacity, solve_for, result.value)
    assert not fits(model, options, capacity, solve_for, result.value + 1)


def test_largest_batch_by_hand() -> None:
    # LLaMA-2 7B, bf16, FlashAttention, s = 2048: weights 2 * 6,738,415,616 = 13,476,831,232 B; per
    # sequence the prefill holds the KV cache 524,288 * 2048 = 1,073,741,824 B and its largest buffer,
    # the fused q/k/v output s (a + 2 a_kv) d_h = 2048 * 12,288 in bf16, 50,331,648 B (more than the MLP's
    # s f = 2048 * 11,008; logits: the last position only, as generate): 1,124,073,472 B a sequence;
    # (80e9 - 13,476,831,232) / 1,124,073,472 = 59.18, so 59.
    result = fit("llama-2-7b", Options(mode="infer", batch=1, seq=2048, flash=True), 80 * GB, "batch")
    assert (result.value, result.method) == (59, "closed form")
    assert (result.fixed, result.per_unit) == (13_476_831_232, 1_124_073_472)


def test_nothing_fits() -> None:
    with pytest.raises(FitError, match="does not fit"):
        fit("gpt3-175b", Options(mode="infer", batch=1, seq=1024), 80 * GB, "batch")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "fit", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_batch_and_seq() -> None:
    batch = cli("--model", "llama-2-7b", "--gpu-memory", "80GB", "--mode", "infer", "--seq", "2048", "--flash",
                "--json")
    assert batch.returncode == 0, batch.stderr
    assert json.loads(batch.stdout)["batch"] == 59
    seq = cli("--model", "llama-3-8b", "--gpu-memory", "80GiB", "--batch", "8", "--json")
    assert seq.returncode == 0, seq.stderr
    longest = json.loads(seq.stdout)["seq"]
    options = Options(mode="infer", batch=8, seq=1)
    assert fits("llama-3-8b", options, 80 * 2**30, "seq", longest)
    assert not fits("llama-3-8b", options, 80 * 2**30, "seq", longest + 1)


@pytest.mark.parametrize(("args", "fragment"), [
    # neither size: one of them, or both (issue 37 item 16: both given asks whether that step fits)
    (("--model", "gpt2", "--gpu-memory", "80GB"), "give --seq (to find the largest batch), --batch"),
    (("--model", "gpt2", "--gpu-memory", "eighty", "--seq", "8"), "cannot read --gpu-memory 'eighty'"),
    (("--model", "gpt2", "--gpu-memory", "80GB", "--seq", "8", "--mode", "params"), "--mode infer or --mode train"),
])
def test_cli_errors(args: tuple[str, ...], fragment: str) -> None:
    result = cli(*args)
    assert (result.returncode, result.stdout) == (2, "")
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_learned_positions_end_the_search() -> None:
    # GPT-2 has 1,024 learned positions (n_positions); 40 GB holds far more than 1,024 tokens of
    # a 124M model (about 2 GB of model states), so the positions, not memory, bound the answer.
    result = fit("gpt2", Options(mode="train", batch=4, seq=1, recompute="selective"), 40 * GB, "seq")
    assert (result.value, result.bytes_next) == (1024, None)
    assert result.bytes_at <= 40 * GB
    # with 24 tokens to generate, the prompt may use 1,000 of them
    result = fit("gpt2", Options(mode="infer", batch=1, seq=1, new_tokens=24), 40 * GB, "seq")
    assert result.value == 1000


def test_advice_under_hf_proposes_only_what_hf_runs(capsys) -> None:
    # llama-2-7b at 4,096 tokens under transformers' code needs 148 GB at batch 1 (the step's peak): the advice is a
    # change --implementation hf accepts (it refuses --tp: was "memderive: error: transformers' layers run whole...")
    code = main(["fit", "--model", "llama-2-7b", "--gpu-memory", "80GB", "--mode", "train", "--seq", "4096",
                 "--implementation", "hf"])
    out = capsys.readouterr()
    assert code == 1 and out.err == "" and "would fit with:" in out.out and "--tp" not in out.out
