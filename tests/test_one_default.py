"""Issue 37: one question, one answer. The attention every command assumes (item 1), Megatron-LM's fused SwiGLU
(item 3) and the one figure that decides whether a training step fits (item 4)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import memderive
from memderive.commands.cli import main
from memderive.commands.plan import short_note
from memderive.derivations.claims.check import check
from memderive.derivations.estimate import estimate
from memderive.derivations.options import Options
from memderive.derivations.search.plan import plan
from tests.pdflatex import require_pdflatex

FIT_7B = ("fit", "--model", "llama-2-7b", "--gpu", "h100-sxm", "--mode", "train", "--seq", "4096", "--tp", "8", "--sp")
LORA = ("--model", "llama-3-8b", "--mode", "train", "--batch", "4", "--seq", "2048", "--lora-rank", "8",
        "--lora-targets", "q_proj,v_proj")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# -- item 1: one attention default ---------------------------------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_training_assumes_flash_attention_everywhere() -> None:
    """Megatron-Core runs Transformer Engine's flash kernel by default; transformers runs SDPA: neither saves the
    b*a*s*s scores. The API, estimate, fit and plan share ``Options``' default."""
    assert Options(mode="train", batch=1, seq=8).attention_kernel == "flash"
    assert Options(mode="train", batch=1, seq=8, implementation="hf").attention_kernel == "sdpa"
    assert estimate("gpt2", mode="train", batch=1, seq=64).inputs()["attention"] == "flash"
    row = plan("gpt2", 80 * 10**9, 8, 1024, 8, top=1)[0]
    assert estimate("gpt2", **row.options).inputs()["attention"] == "flash"


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_fit_default_is_the_flash_answer_and_says_so(capsys) -> None:
    """The issue's command: 8 by default (eager) and 22 with --flash before; now the default is --flash's answer."""
    code, default, _ = run(capsys, *FIT_7B, "--json")
    _, flash, _ = run(capsys, *FIT_7B, "--flash", "--json")
    _, eager, _ = run(capsys, *FIT_7B, "--attention", "eager", "--json")
    assert code == 0 and json.loads(default)["batch"] == json.loads(flash)["batch"] > json.loads(eager)["batch"]
    _, text, _ = run(capsys, *FIT_7B)
    assert "attention: flash (" in text and "--attention eager" in text


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_lora_default_is_the_fused_kernels_answer(capsys) -> None:
    """LoRA q,v on Llama-3-8B at batch 4, seq 2048: 86.89 GB by default (eager) against 59.08 GB under
    --implementation hf before; now the default saves no scores either, and eager is the larger one."""
    default, flash, eager = (json.loads(run(capsys, "estimate", *LORA, *extra, "--json")[1])["total_bytes"]
                             for extra in ((), ("--flash",), ("--attention", "eager")))
    assert default == flash < eager


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
@pytest.mark.parametrize("summary", [True, False])
def test_the_report_says_which_attention(capsys, summary: bool) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64",
                       *(("--summary",) if summary else ()))
    assert code == 0 and "\nattention: flash (no s*s scores saved; default: " in out
    _, eager, _ = run(capsys, "estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64",
                      "--attention", "eager", *(("--summary",) if summary else ()))
    assert "\nattention: eager (the b*a*s*s scores saved; as given; " in eager


# -- item 3: Megatron-LM's fused SwiGLU ----------------------------------------------------------------------------

def test_megatron_swiglu_saves_only_its_input() -> None:
    """llama-3-8b, b 4, s 2048, f 14,336, bf16: megatron/core/fusions/fused_bias_swiglu.py's SwiGLUFunction saves its
    input, gate and up: 2 x 2 B x 4 x 2,048 x 14,336 = 469,762,048 B a layer (unfused, silu(gate) too: 704,643,072);
    fc2 saves the product it reads, 2 B x 4 x 2,048 x 14,336 = 234,881,024."""
    est = estimate("llama-3-8b", mode="train", batch=4, seq=2048)
    terms = dict(est.quantity("activation_bytes_per_layer").term_ints(est.values))
    assert terms["layer/mlp/act"] == 469_762_048 and terms["layer/mlp/fc2"] == 234_881_024
    assert any("fused_bias_swiglu" in x for x in est.graph.assumptions)


def test_transformers_swiglu_stays_unfused() -> None:
    """transformers' LlamaMLP: act_fn(gate_proj(x)) * up_proj(x), silu(gate) saved by the product."""
    est = estimate("llama-3-8b", mode="train", batch=4, seq=2048, implementation="hf")
    assert not any("fused_bias_swiglu" in x for x in est.graph.assumptions)


# -- item 4: one figure decides ------------------------------------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_one_figure_decides_and_the_report_says_which(capsys) -> None:
    readme = ("estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096", "--tp", "8",
              "--sp", "--recompute", "selective")
    code, out, _ = run(capsys, *readme)
    assert code == 0 and "no peak_bytes" not in out
    assert "\nfits: total_bytes decides (" in out and "fused calls" in out
    data = json.loads(run(capsys, *readme, "--json")[1])
    assert data["fits_decided_by"] == "total_bytes" and not any("no peak_bytes" in x for x in data["notes"])
    _, hf, _ = run(capsys, "estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "64",
                   "--implementation", "hf", "--summary")
    assert "\nfits: peak_bytes decides (" in hf


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_fit_names_device_bytes_as_device_bytes(capsys) -> None:
    """fit --gpu budgets device bytes: its JSON calls them device_bytes, as estimate --gpu does, never total_bytes
    (estimate's sum of tensors)."""
    data = json.loads(run(capsys, *FIT_7B, "--json")[1])
    assert "total_bytes" not in data and data["budget"] == "device_bytes"
    at = estimate("llama-2-7b", mode="train", batch=data["batch"], seq=4096, tp=8, sp=True, gpu="h100-sxm")
    assert data["device_bytes"] == at.to_json()["device_bytes"]
    assert data["fits_decided_by"] == "total_bytes"
    plain = json.loads(run(capsys, "fit", "--model", "llama-2-7b", "--gpu-memory", "80GB", "--mode", "train",
                           "--seq", "4096", "--tp", "8", "--sp", "--json")[1])
    assert plain["budget"] == "total_bytes" and "device_bytes" not in plain
    at = estimate("llama-2-7b", mode="train", batch=plain["batch"], seq=4096, tp=8, sp=True)
    assert plain["total_bytes"] == at.number("total_bytes")


# -- item 2: vLLM's engine model and one budget rule ---------------------------------------------------------------

@pytest.mark.parametrize(("model", "seq", "tp"), [("llama-3-70b", "32768", "8"), ("llama-2-70b", "4096", "4")])
def test_fit_under_vllm_is_the_concurrency_estimate_prints(capsys, model: str, seq: str, tp: str) -> None:
    """The issue's commands: fit said 29 and 103 where estimate --framework vllm printed 42.23x and 121.05x."""
    common = ("--model", model, "--mode", "infer", "--seq", seq, "--tp", tp, "--gpu", "h100-sxm", "--framework", "vllm")
    fitted = json.loads(run(capsys, "fit", *common, "--json")[1])
    engine = json.loads(run(capsys, "estimate", *common, "--batch", "1", "--json")[1])
    assert fitted["batch"] == int(engine["max_concurrent_sequences"]) and fitted["budget"] == "vllm_bytes"
    assert fitted["capacity_bytes"] == engine["vllm"]["budget_bytes"]


def test_plan_and_fit_budget_alike(capsys) -> None:
    """plan --mode infer held 90% of the GPU where fit held all of it (56 against 66 for one model and sequence):
    one rule, vLLM's gpu_memory_utilization under --framework vllm only."""
    args = ("--model", "llama-2-7b", "--mode", "infer", "--gpu-memory", "80GiB", "--seq", "4096")
    for extra in ((), ("--framework", "vllm")):
        planned = json.loads(run(capsys, "plan", *args, "--top", "1", *extra, "--json")[1])["layouts"][0]
        fitted = json.loads(run(capsys, "fit", *args, *extra, "--json")[1])
        assert planned["options"]["batch"] == fitted["batch"], extra
    whole = json.loads(run(capsys, "fit", *args, "--json")[1])
    vllm = json.loads(run(capsys, "fit", *args, "--framework", "vllm", "--json")[1])
    assert whole["capacity_bytes"] == 80 * 2**30 and vllm["capacity_bytes"] == 72 * 2**30  # 0.9 x 80 GiB


# -- item 16: Python and CLI habits ---------------------------------------------------------------------------------

def test_result_numbers_with_a_gpu_and_print() -> None:
    result = memderive.estimate("gpt2", mode="train", batch=1, seq=64, gpu="h100-sxm")
    data = result.estimate.to_json()
    assert result.number("step_time_s") == data["step_time_s"] > 0 and result.number("mfu") == data["mfu"]
    assert str(result).startswith("model: gpt2") and "summary:" in str(result)


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_plan_takes_keyword_options_without_a_dummy_step() -> None:
    rows = memderive.plan("gpt2", 80 * 10**9, 8, 1024, 8, optimizer="sgd", top=1)
    assert rows[0].options["optimizer"] == "sgd"
    assert memderive.plan_infer("gpt2", 80 * 10**9, 512, 1, kv_dtype="fp8")[0].options["kv_dtype"] == "fp8"


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_fit_with_batch_and_seq_answers_whether_it_fits(capsys) -> None:
    common = ("fit", "--model", "gpt2", "--mode", "train", "--gpu-memory", "80GB", "--seq", "1024")
    code, out, _ = run(capsys, *common, "--batch", "4")
    assert code == 0 and "fits: batch 4 needs" in out
    largest = json.loads(run(capsys, *common, "--json")[1])["batch"]
    code, out, _ = run(capsys, *common, "--batch", str(largest + 1), "--json")
    assert code == 1 and json.loads(out)["fits"] is False and json.loads(out)["largest_batch"] == largest


def test_a_cache_formula_without_n_is_the_prompts_cache() -> None:
    """llama-2-70b: a = 64 heads, a_kv = 8: the GQA cache formula is exact, the full-head one a/a_kv = 8 times ours."""
    gqa = check("kv_cache.total", "2 * n_layers * n_kv_heads * d_head * s * b * 2", model="llama-2-70b")
    assert gqa.verdict == "exact"
    full = check("kv_cache.total", "2 * n_layers * n_heads * d_head * s * b * 2", model="llama-2-70b")
    assert full.counterexample.ratio == 8


@pytest.mark.slow  # seconds (a notebook written, an estimate run)
def test_notebook_takes_estimates_default_mode(capsys, tmp_path) -> None:
    """--batch and --seq without --mode: estimate refuses them (its default mode, params, has no step); notebook
    gives the same one-line refusal, where it wrote a training notebook before. No --mode at all: the parameter
    count, as ``estimate --model gpt2``."""
    step = ("--model", "gpt2", "--batch", "1", "--seq", "8")
    code, _, refused = run(capsys, "estimate", *step)
    assert code == 2 and "use --mode train or --mode infer" in refused
    assert run(capsys, "notebook", *step, "-o", str(tmp_path / "a.ipynb")) == (2, "", refused)
    assert not (tmp_path / "a.ipynb").exists()
    code, _, _ = run(capsys, "notebook", "--model", "gpt2", "-o", str(tmp_path / "b.ipynb"))
    assert code == 0 and "estimate('gpt2', mode='params')" in (tmp_path / "b.ipynb").read_text()


def test_fit_says_why_its_mode_default_differs(capsys) -> None:
    """fit's one default that is not estimate's: --mode infer, where estimate's params has nothing to solve; said
    in the output when --mode is left out, not when it is given."""
    args = ("fit", "--model", "gpt2", "--gpu-memory", "80GB", "--seq", "1024")
    code, out, _ = run(capsys, *args)
    assert code == 0 and out.splitlines()[1].startswith("mode: infer (fit's default; estimate's, params,")
    code, out, _ = run(capsys, *args, "--mode", "infer")
    assert code == 0 and "fit's default" not in out


# -- item 17: output -------------------------------------------------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_plan_cautions_follow_the_table(capsys) -> None:
    code, out, _ = run(capsys, "plan", "--model", "gpt2", "--gpus", "8", "--gpu", "h100-sxm", "--seq", "1024",
                       "--global-batch", "16", "--top", "1")
    lines = out.splitlines()
    table = next(i for i, x in enumerate(lines) if x.startswith("rank"))
    assert code == 0 and not any(x.startswith("NOTE") for x in lines[:table])
    assert any(x.startswith("NOTE") for x in lines[table:])


@pytest.mark.slow  # seconds in process (a plan timed on a GPU)
def test_plan_cautions_are_short_lines_with_the_full_text_in_json(capsys) -> None:
    """Each NOTE line at most 6 + 160 characters, no source in it (the compute line alone was 1,000+ characters of
    citations before); --json's step_time_model keeps every line whole, sources included."""
    args = ("plan", "--model", "gpt2", "--gpus", "8", "--gpu", "h100-sxm", "--seq", "1024", "--global-batch", "16",
            "--top", "1")
    code, out, _ = run(capsys, *args)
    notes = [x for x in out.splitlines() if x.startswith("NOTE")]
    assert code == 0 and len(notes) >= 4 and all(len(x) <= 166 for x in notes), [len(x) for x in notes]
    assert not any("github.com" in x or "arXiv" in x for x in notes)
    assert notes[-1] == "NOTE: in full, with sources: --json (step_time_model) or the re-run line with --summary"
    code, out, _ = run(capsys, *args, "--json")
    full = json.loads(out)["step_time_model"]
    assert code == 0 and any("github.com" in x for x in full) and max(map(len, full)) > 500


def test_short_note_cuts_at_a_clause_outside_parentheses() -> None:
    """A source parenthetical goes; a cut falls at the last '; ' or ', ' outside parentheses, else at a space
    with the open parenthesis closed."""
    assert short_note("bubble (Narayanan et al. 2021 §2.2), per stage", 160) == "bubble, per stage"
    assert short_note("a, " + "b" * 10 + "; c" + " d" * 10, 24) == "a, bbbbbbbbbb ..."
    # width 20: spaces looked for in the first 15 characters, "x: y (z z z z z"; the last at index 13
    assert short_note("x: y (" + "z " * 30 + ")", 20) == "x: y (z z z z ...)"


def test_no_zero_rates_without_decode(capsys) -> None:
    code, out, _ = run(capsys, "estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "128",
                       "--gpu", "h100-sxm", "--summary")
    assert code == 0 and "end_to_end_tokens_per_s" not in out and " 0 s\n" not in out
    _, plan_out, _ = run(capsys, "plan", "--model", "gpt2", "--mode", "infer", "--gpu", "h100-sxm", "--seq", "128",
                         "--top", "1")
    assert "end-to-end tok/s" not in plan_out


# -- item 18: the README's test command ---------------------------------------------------------------------------

def test_readme_says_how_long_the_tests_take() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    # The figure itself is measured on a clean clone (CI=true .ci/run) and written by hand; the test holds the README to
    # naming it, on the 2-core machine CI runs on, beside the quick subset's command.
    assert "`python -m pytest -m fast`" in readme
    assert re.search(r"about \d+ minutes on a 2-core machine", readme), "README: say how long the tests take"


@pytest.mark.parametrize(("ci", "outcome"), [("true", "fail"), ("", "skip"), ("false", "skip")])
def test_latex_without_pdflatex_fails_under_ci_and_skips_elsewhere(monkeypatch, ci: str, outcome: str) -> None:
    """One rule for both LaTeX tests (tests/pdflatex.py); CI=false is not CI (it failed before: any value did)."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if outcome == "fail" else pytest.skip.Exception
    with pytest.raises(expected, match="pdflatex"):
        require_pdflatex()
