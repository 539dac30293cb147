"""Each convention reproduces its tool's own figures; every gap from memderive over 1% is explained.

Expected numbers come from running the tools (llm-analysis 0.2.2 from PyPI with ``fire`` stubbed,
EleutherAI's ``calc_transformer_mem.py`` at 827ee3b, accelerate 1.15 in this venv) or, where the
tool needs a framework we do not install (Megatron-LM, DeepSpeed), from its source's arithmetic
written out here by hand.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from memderive.derivations.conventions import COLUMNS, CONVENTIONS, compare, figures, gaps
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.commands.cli import main

TRAIN_7B = Options(mode="train", batch=1, seq=4096)
INFER_70B = Options(mode="infer", batch=1, seq=4096, new_tokens=512)


def close(ours: int, theirs: float, tol: float = 0.001) -> bool:
    return abs(ours - theirs) <= tol * abs(theirs)


# --- llm-analysis 0.2.2: LLMAnalysis(get_model_config_by_name(NAME), <a GPU with room>, w16a16e16,
# ParallelismConfig(tp_size=t)).training(batch_size_per_gpu=b, seq_len=s, total_num_tokens=b*s,
# flash_attn=F) / .inference(b, s, num_tokens_to_generate=n, use_kv_cache=True); its bundled configs
# NousResearch_Llama-2-7b-hf and upstage_Llama-2-70b-instruct-v2 (f = 4h).
LLM_ANALYSIS = [
    ("llama-2-7b", Options(mode="train", batch=1, seq=4096, attention="eager"), {"parameters": 6573789184, "model_states": 13147578368 + 26295156736 + 78885470208,
                              "activations": 89242206208, "total": 207570411520}),
    ("llama-2-7b", Options(mode="train", batch=2, seq=2048, flash=True),
     {"activations": 22374514688, "total": 140702720000}),
    ("llama-2-70b", INFER_70B, {"model_states": 110585462784, "kv_cache": 1509949440, "activations": 268435456}),
    ("llama-2-70b", Options(mode="infer", batch=1, seq=4096, new_tokens=512, tp=8),
     {"model_states": 13823182848, "kv_cache": 188743680, "activations": 33554432}),
]


@pytest.mark.parametrize(("name", "opts", "want"), LLM_ANALYSIS, ids=["7b-train", "7b-train-flash", "70b-infer",
                                                                      "70b-infer-tp8"])
def test_llm_analysis_reproduces_its_tool(name: str, opts: Options, want: dict) -> None:
    got = figures("llm-analysis", resolve_model(name), opts)
    assert {k: got.column(k) for k in want} == want  # exact: the tool's float arithmetic has no rounding here


# --- EleutherAI calc_transformer_mem.py, printed GiB (2 decimals) --------------------------------
def _with_ffn(name: str, f: int) -> Model:
    base = resolve_model(name)
    return Model(base.name, base.arch, {**base.sizes, "f": f})


ELEUTHER = [
    # the script's own "llama 7B" example: -l 32 -s 4096 -a 32 -hs 4096 -ff 3.5 -b 1 -z 1 -pp 1 -tp 1 --num-gpus 1
    (_with_ffn("llama-2-7b", 14336), TRAIN_7B, 6.19e9, {"activations": 97.00, "model_states": 11.52 + 23.04 + 69.13,
                                                         "total": 200.69}),
    # LLaMA-2 7B as read from its config.json: -ff 11008/4096 = 2.6875
    (resolve_model("llama-2-7b"), TRAIN_7B, 5.31e9, {"activations": 97.00, "total": 186.07}),
    # -l 80 -hs 8192 -a 64 -v 32000 -ff 3.5 -s 4096 -b 1 --infer -o 512
    (resolve_model("llama-2-70b"), INFER_70B, 59.62e9, {"model_states": 111.05, "kv_cache": 5.62,
                                                        "activations": 1.06, "total": 117.74}),
]


@pytest.mark.parametrize(("model", "opts", "params", "gib"), ELEUTHER, ids=["llama-7b-example", "7b-config",
                                                                           "70b-infer"])
def test_eleuther_reproduces_its_script(model: Model, opts: Options, params: float, gib: dict) -> None:
    got = figures("eleuther", model, opts)
    assert close(got.parameters, params, 0.001)  # printed as "6.19 B"
    for column, value in gib.items():
        assert abs(got.column(column) / 2**30 - value) <= 0.015, column  # printed with 2 decimals


# --- Megatron-LM theoretical_memory_usage.py, by hand ------------------------------------------
def test_megatron_by_hand_llama_7b_tp8_sp_selective() -> None:
    """compute_weight_and_optimizer_memory: padded vocab 32000 -> 32768 (multiple of 128*8); layer
    2h^2(1 + g/a)(a d_h/h) + 2h(3f/2 + 1) with h = 4096, f = 11008, g = a; block = 32 layers + h;
    untied, p = 1: shard = (block + 2hV')/8; 18 bytes each. compute_activation_memory (SP + selective):
    [sbh(18 + 4f/h) L + 8sb + sbh + 4sbh(1 + V'/h)] / t with s = 4096, b = 1."""
    h, f, L, vp, s, t = 4096, 11008, 32, 32768, 4096, 8
    layer = 2 * h * h * 2 + 2 * h * (3 * f // 2 + 1)
    block = layer * L + h
    states = Fraction(block + 2 * h * vp, t) * 18
    sbh = s * h
    acts = Fraction(sbh * (18 * h + 4 * f) // h * L + 8 * s + sbh + 4 * sbh + 4 * s * vp, t)
    got = figures("megatron", resolve_model("llama-2-7b"),
                  Options(mode="train", batch=1, seq=s, tp=t, sp=True, recompute="selective"))
    assert got.parameters == block + 2 * h * vp
    assert close(got.model_states, states) and close(got.activations, acts)


def test_megatron_by_hand_without_sequence_parallelism() -> None:
    """compute_activation_memory_without_sp: 1.05 [sbh(10 + 24/t) L + 8sb + sbh + 2(sbV'/t + sbh)];
    with --zero 1 (distributed optimizer) 6 + 12/d bytes per parameter."""
    h, L, vp, s, t, d = 4096, 32, 32768, 4096, 2, 4
    sbh = s * h
    acts = Fraction(105, 100) * (sbh * (10 + Fraction(24, t)) * L + 8 * s + sbh + 2 * (Fraction(s * vp, t) + sbh))
    model = resolve_model("llama-2-7b")
    got = figures("megatron", model, Options(mode="train", batch=1, seq=s, tp=t, dp=d, zero=1))
    assert close(got.activations, acts)
    assert close(got.model_states, Fraction(got.parameters, t) * (6 + Fraction(12, d)))


# --- DeepSpeed estimators, by hand ---------------------------------------------------------------
def test_deepspeed_by_hand() -> None:
    """estimate_zero2_model_states_mem_needs (no offload): 2P + int(18P/N); stage 3: 4 * largest layer
    + int(18P/N), the largest module LLaMA-2 7B builds being its 32000 x 4096 embedding (and LM head)."""
    p, n = 6738415616, 8
    model = resolve_model("llama-2-7b")
    z2 = figures("deepspeed", model, Options(mode="train", batch=1, seq=8, dp=n, zero=2))
    z3 = figures("deepspeed", model, Options(mode="train", batch=1, seq=8, dp=n, zero=3))
    assert (z2.parameters, z2.model_states) == (p, 2 * p + 18 * p // n)
    assert z3.model_states == 4 * 32000 * 4096 + 18 * p // n


# --- accelerate, run --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama-2-7b", "gpt2"])
def test_accelerate_reproduces_its_estimator(name: str) -> None:
    import torch
    import transformers
    from accelerate import init_empty_weights
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    from memderive.derivations.models.presets import PRESETS

    config = transformers.AutoConfig.for_model(**PRESETS[name])
    with init_empty_weights():  # what create_empty_model does once it has the config
        built = transformers.AutoModel.from_config(config, dtype=torch.float32)
    total, _ = calculate_maximum_sizes(built)
    model = resolve_model(name)
    assert figures("accelerate", model, Options(mode="infer", batch=1, seq=8)).total == total // 2  # float16 row
    train = max(estimate_training_usage(total, "float16").values())
    assert figures("accelerate", model, Options(mode="train", batch=1, seq=8)).total == train


# --- compare ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "opts"), [("llama-2-7b", TRAIN_7B), ("llama-2-70b", INFER_70B)],
                         ids=["7b-train", "70b-infer"])
def test_every_gap_over_one_percent_is_explained(name: str, opts: Options) -> None:
    rows, skipped = compare(resolve_model(name), opts)
    ours = rows[0]
    assert ours.convention == "memderive" and len(rows) + len(skipped) == len(CONVENTIONS)
    unexplained = [(r.convention, col) for r in rows[1:] for col, _, why in gaps(ours, r) if not why]
    assert unexplained == []
    assert all(col in COLUMNS for r in rows for col in r.why)


def test_compare_cli_text_and_markdown(capsys) -> None:
    assert main(["compare", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096"]) == 0
    text = capsys.readouterr().out
    assert "megatron" in text and "UNEXPLAINED" not in text and "18 bytes per parameter" in text
    assert main(["compare", "--model", "llama-2-70b", "--mode", "infer", "--batch", "1", "--seq", "4096",
                 "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("## compare: llama-2-70b") and "| eleuther |" in md and "no figure" in md
    assert main(["compare", "--model", "gpt2"]) == 2  # parameter mode has no memory to compare


def test_estimate_convention_and_implementation_errors(capsys) -> None:
    base = ["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096"]
    assert main([*base, "--convention", "megatron"]) == 0
    out = capsys.readouterr().out
    assert "megatron" in out and "memderive" in out and "deepspeed" not in out
    assert main([*base, "--convention", "nope"]) == 2
    assert main([*base, "--implementation", "hf-eager", "--flash"]) == 2
    assert main([*base, "--implementation", "hf", "--tp", "2"]) == 2
    assert main([*base, "--implementation", "vllm"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 4 and all(line.startswith("memderive: error: ") for line in err)
    assert main([*base, "--implementation", "hf-sdpa", "--json"]) == 0
    assert '"implementation": "hf-sdpa (transformers\' modeling code)"' in capsys.readouterr().out
