"""Issue 23's defects, one test each (written before the fix; each failed then): notes read as printed.

Expected numbers are the models' transformers counts (REFERENCES.md §7) or arithmetic in the comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sympy as sp

from memderive.derivations.claims.check import ClaimError, check
from memderive.derivations.claims.parser import FormulaError, parse_formula
from memderive.symbolic.dims import DIMS
from memderive.symbolic.dims_sympy import b, h, l

EQ3 = r"96 B s l h^2 \left(1 + \frac{s}{6h} + \frac{V}{16 l h}\right)"  # Narayanan et al. 2021, Eq. 3


def _said(result) -> str:
    return " ".join((*result.explanation, *result.notes))


# --- 1. "21B" is a size, not 21 x b, and the reading is echoed ----------------------------------------------------

@pytest.mark.parametrize(("figure", "value", "model"), [
    ("21B", 21 * 10**9, "deepseek-v2"), ("671B", 671 * 10**9, "deepseek-v3"), ("3.3B", sp.Rational(33, 10) * 10**9,
                                                                              "qwen3-30b-a3b"),
    ("12B", 12 * 10**9, "mixtral-8x7b"), ("8 x 7B", 56 * 10**9, "mixtral-8x7b"), ("175.0B", 175 * 10**9, "gpt3-175b"),
    ("123.65M", 123_650_000, "gpt2"), ("65K", 65_000, "gpt2"), ("1.2T", 12 * 10**11, "gpt2")])
def test_1_magnitude_suffixes_in_counts(figure: str, value, model: str) -> None:
    result = check("params.total", figure, model=model)
    assert result.theirs == value and b not in result.theirs.free_symbols
    assert any("read" in x and "10^" in x for x in result.notes), result.notes  # the reading is echoed


def test_1_b_stays_the_batch_where_it_is_a_letter_of_a_product() -> None:
    # Narayanan's Eq. 3: "96 B s l h^2" is 96 times the batch B; "4B" in a byte count is 4 bytes
    assert b in check("flops.hardware", EQ3, recompute="full").theirs.free_symbols
    per_token = check("kv_cache.per_token", "69,120 B", model="deepseek-v2")  # (512 + 64) x 60 x 2 bytes
    assert per_token.verdict == "exact" and any("bytes" in x for x in per_token.notes)


# --- 2. a claim never silently becomes 0 ---------------------------------------------------------------------------

def test_2_powers_of_numbers_and_no_silent_zero() -> None:
    assert check("params.total", "320 * 2^20").theirs == 320 * 2**20  # 335,544,320, not 0
    assert parse_formula("2^{10}", {}).expr == 1024 and parse_formula("10^12", {}).expr == 10**12
    with pytest.raises(FormulaError, match="reads as 0"):
        parse_formula("s - s", {"s": sp.Symbol("s")})


# --- 3. options and the model pin their symbols ---------------------------------------------------------------------

def test_3_batch_option_pins_b() -> None:
    # nanoGPT's FLOPs of one sequence, (6N + 12LHQT) T, with --batch 1: not "claim/ours -> 1/b"
    result = check("flops.step", "(6*N + 12*L*H*Q*T)*T", symbols="L=l, H=a, Q=d_h, T=s", model="gpt2", batch=1,
                   syntax="python")
    assert result.verdict == "leading-order" and "1/b" not in _said(result)
    assert any(x.startswith("b = 1 on both sides (pinned by --batch)") for x in result.notes)


def test_3_the_model_pins_sizes_the_claim_leaves_out() -> None:
    # MQA: Falcon-7B has one K/V head, so 2 d_h l elements per token is exactly its cache
    falcon = check("kv_cache.per_token", "2 d_h l", model="falcon-7b", units="elements")
    assert falcon.verdict == "exact" and "a_kv = 1" in _said(falcon)
    # DeepSeek-V2: 9/2 d_h l = 9/2 x 128 x 60 = 34,560 elements = (512 + 64) x 60
    mla = check("kv_cache.per_token", r"\approx \frac{9}{2} d_h l", model="deepseek-v2", units="elements")
    assert mla.verdict == "exact" and mla.holds and "d_c = 512" in _said(mla)
    # a size the claim keeps stays symbolic: 12lh^2 is still only leading-order for GPT-3
    assert check("params.total", "12lh^2").verdict == "leading-order"


# --- 4. every symbol the checker prints can be written back ---------------------------------------------------------

#: where the checker prints a letter that means something else elsewhere: n_ctx (learned positions) in
#: parameter counts, v (virtual pipeline stages) in activations, d (data-parallel ranks) in model states
PRINTED_IN = {"n_ctx": "params.total", "v": "activations.total", "d": "model_states.total"}


@pytest.mark.parametrize("dim", DIMS, ids=[d.name for d in DIMS])
def test_4_every_dimension_reads_back_by_name_and_latex(dim) -> None:
    from memderive.derivations.claims.check import default_symbols, quantity_spec

    names = default_symbols(quantity_spec(PRINTED_IN.get(dim.name, "kv_cache.total")))
    for written in (dim.name, dim.latex):
        assert parse_formula(written, names).expr == dim.symbol, written


def test_4_mla_sizes_can_be_written() -> None:
    assert check("kv_cache.per_token", "(d_c + d_hR) l", model="deepseek-v2", units="elements").verdict == "exact"


# --- 5. figures as printed --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "value", "quantity"), [
    ("39,976,960", 39_976_960, "params.total"), ("8e9", 8 * 10**9, "params.total"),
    ("8 \\times 10^9", 8 * 10**9, "params.total"), ("320 MB", 320 * 10**6, "weights.total"),
    ("65 KB", 65_000, "kv_cache.per_token"), ("2 GiB", 2 * 2**30, "weights.total"), ("16 bits", 2, "weights.total"),
    ("0.5898\\%", sp.Rational(5898, 10**6), "params.trainable/params.total"),
    ("trainable%: 0.5898", sp.Rational(5898, 10**6), "params.trainable/params.total")])
def test_5_figures_as_printed(text: str, value, quantity: str) -> None:
    options = {"lora_rank": 8, "lora_targets": ("q_proj",)} if "trainable" in quantity else {}
    assert check(quantity, text, model="llama-2-7b", **options).theirs == value


def test_5_code_style_calls_and_dotted_names() -> None:
    # DeepSpeed's estimate: int(...) is a whole number of bytes; args.seq_length is Megatron's s
    zero2 = check("model_states.total", "4 * total_params + int(16 * total_params / total_gpus)",
                  symbols="total_params=Psi, total_gpus=d", dp=8, zero=2, syntax="python")
    assert zero2.verdict == "different"
    assert check("params.per_layer", "12 * args.hidden_size**2", syntax="python").theirs.free_symbols == {h}
    assert check("kv_cache.per_token", "4 * config.num_hidden_layers * config.hidden_size",
                 syntax="python").verdict == "exact"
    assert check("params.per_layer", "math.ceil(12 * h**2)", syntax="python").verdict == "leading-order"
    assert parse_formula("h // 2", {"h": sp.Symbol("h")}).expr == sp.Symbol("h") / 2


def test_5_common_names_as_mapping_targets() -> None:
    # ZeRO-3 written with D for the data-parallel degree, mapped onto ZeRO's own N_d
    assert check("model_states.total", r"\frac{16\Psi}{D}", symbols="D=N_d", dp=8, zero=3).verdict == "exact"


# --- 6. explanations -------------------------------------------------------------------------------------------------

def test_6_a_figure_gap_is_decomposed_into_graph_terms() -> None:
    # Gemma-7B with the paper's vocabulary of 256,128 (HF: 256,000): 8,537,680,896 + 128 x 3072 = 8,538,074,112
    gemma = check("params.total", "8,538,074,112", model="gemma-7b")
    assert gemma.verdict == "different" and "V = 256,128" in _said(gemma)
    # nanoGPT leaves out the position embedding: 124,439,808 - 1024 x 768 = 123,653,376
    nano = check("params.total", "123,653,376", model="gpt2")
    assert "embed/positions" in _said(nano) and "not a formula" not in _said(nano)
    # a rounded figure is rounding, said with its precision: 12,879,925,248 -> 12.9B, to 0.1B
    mixtral = check("params.active", "12.9B", model="mixtral-8x7b")
    assert mixtral.verdict == "rounded" and mixtral.holds and "0.1" in _said(mixtral)


def test_6_causal_attention_is_half_an_attention_term() -> None:
    # the score and value products of one layer forward are 4 b a s^2 d_h; a causal count halves them
    result = check("flops.attention_per_layer", "2 b a s^2 d_h")
    assert result.verdict == "conditional" and result.holds_under[0].startswith("with causal attention")
    full = check("flops.forward", "24 b s l h^2 + 2 b s^2 l h + 2 b s V h")  # GPT-3, scores halved
    assert "half of layer/attn/core" in _said(full) and "not a sum of our terms" not in _said(full)


def test_6_siblings_are_searched_before_different() -> None:
    asked = check("flops.step", EQ3, recompute="full", attention="eager")  # Eq. 3: Megatron-LM of 2021, eager
    assert asked.verdict == "different" and "exact for flops.hardware instead" in _said(asked)
    plain = check("flops.step", EQ3, attention="eager")  # no recompute given: Eq. 3 is the hardware FLOPs of a full-recompute step
    assert "exact for flops.hardware with full recompute" in _said(plain)


def test_6_hints_for_d_D_and_P() -> None:
    hidden = check("params.total", "12 l d^2")  # notes mean the hidden size by d
    assert hidden.verdict == "leading-order" and any("d read as the hidden size" in x for x in hidden.notes)
    ranks = check("model_states.total", r"2\Psi + \frac{14\Psi}{d}", dp=8, zero=2)
    assert ranks.verdict == "exact" and any("data-parallel degree" in x for x in ranks.notes)
    tokens = check("flops.step", "6ND")  # Chinchilla: D tokens, b s in one step
    assert tokens.verdict == "leading-order" and any("D = b s" in x for x in tokens.notes)
    with pytest.raises(ValueError, match="tokens"):  # per token, D has no meaning: the hint says so
        check("flops.per_token", "6ND")
    assert check("weights.total", "2P", model="llama-2-7b").verdict == "exact"  # 16-bit weights, P parameters


def test_6_nf4_weights_and_check_output(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from memderive.commands.cli import main

    args = ["check", "--quantity", "weights.bits_per_parameter", "--claim", "4.127", "--model", "llama-2-7b",
            "--weight-dtype", "nf4"]
    assert main(args) == 0
    out = tmp_path / "report.txt"
    assert main([*args, "-o", str(out)]) == 0 and out.read_text().startswith("rounded (holds)")
    capsys.readouterr()
    assert main([*args, "-o", str(out)]) == 2 and "--force" in capsys.readouterr().err
    assert main([*args, "-o", str(out), "--force"]) == 0


# --- 7. claim kinds --------------------------------------------------------------------------------------------------

def test_7_ratios() -> None:
    gqa = check("kv_cache.per_token[a_kv=a]/kv_cache.per_token", "8x", model="llama-2-70b")
    assert gqa.verdict == "exact"
    assert check("kv_cache.per_token[a_kv=a]/kv_cache.per_token", "a/a_kv", model="llama-2-70b").verdict == "exact"
    # HFU / MFU with full recompute: 4/3 at leading order (the LM head is not recomputed)
    hfu = check("flops.hardware/flops.step", r"\approx 4/3", recompute="full")
    assert hfu.verdict == "leading-order" and hfu.holds
    with pytest.raises(ClaimError, match="ratio"):
        check("params.total/", "2")


def test_7_non_embedding_attention_and_per_matrix() -> None:
    # Gemma-7B: 28 x 276,830,208 + 3072 = 7,751,248,896 (Gemma report Table 2)
    assert check("params.non_embedding", "7,751,248,896", model="gemma-7b").verdict == "exact"
    assert check("params.non_embedding", r"\approx 12 l h^2").verdict == "leading-order"
    assert check("flops.attention_per_layer", "4 b a s^2 d_h").verdict == "exact"
    assert check("flops.attention", "4 b s^2 l h").verdict == "exact"
    qv = {"lora_rank": 8, "lora_targets": ("q_proj",)}
    assert check("params.lora_per_matrix", "2 r h", model="llama-2-7b", **qv).verdict == "exact"
    with pytest.raises(ClaimError, match="v_proj"):  # q: r(h + h); v: r(h + a_kv d_h) on LLaMA-2-70B
        check("params.lora_per_matrix", "2 r h", model="llama-2-70b", lora_rank=8, lora_targets=("q_proj", "v_proj"))


def test_7_bits_per_parameter_and_active_parameters() -> None:
    nf4 = check("weights.bits_per_parameter", "4.127", model="llama-2-7b", weight_dtype="nf4")
    assert nf4.verdict == "rounded"
    # int4 with one fp16 scale per 128 weights: 4 + 16/128 = 4.125 bits
    assert check("weights.bits_per_parameter", "4 + 16/128", model="llama-2-7b", weight_dtype="int4").verdict == "exact"
    active = check("flops.per_token", "6 N_active", model="mixtral-8x7b")
    assert active.verdict == "leading-order" and l in active.theirs.free_symbols
