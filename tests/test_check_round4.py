"""Issue 40, items 1-8: what unseen notes still tripped, each quoted as printed, the verdict decided before the run.

Expected numbers are hand arithmetic (in the comments) from the models' config.json sizes:
LLaMA-2-7B h = 4,096, l = 32, a = a_kv = 32, f = 11,008, V = 32,000; GPT-2 h = 768, l = 12, 1,024 learned positions;
Mistral-7B h = 4,096, l = 32, a_kv = 8, d_h = 128, sliding window W = 4,096.
"""

from __future__ import annotations

import pytest

from memderive.derivations.claims.check import check
from memderive.derivations.claims.parser import parse_formula

LLAMA = {"model": "llama-2-7b"}


# --- 3. a percentage of a count ---------------------------------------------------------------------------------------

def test_3_trainable_percent_is_trainable_over_total() -> None:
    """PEFT prints "trainable params: 39,976,960 || all params: 6,778,392,576 || trainable%: 0.5898" for LLaMA-2-7B
    with r = 16 on every linear: per layer 16·(4·(4096+4096) + 2·(4096+11008) + (11008+4096)) = 1,249,280, times
    32 = 39,976,960; over 6,738,415,616 + 39,976,960 that is 0.5898%. Before: "the claim is a ratio or a
    percentage; params.trainable is in elements"."""
    r = check("params.trainable", "trainable%: 0.59", lora_rank=16, lora_targets="all-linear", **LLAMA)
    assert r.verdict == "rounded" and r.holds
    assert any("params.trainable/params.total" in x for x in r.notes)
    wrong = check("params.trainable", "trainable%: 0.62", lora_rank=16, lora_targets="all-linear", **LLAMA)
    assert wrong.verdict == "different"


# --- 4. notation ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("quantity, claim, options, verdict", [
    # 2 (K, V) · 2 bytes · 32 layers · 4,096 = 524,288 bytes = 512 KiB per token
    ("kv_cache.per_token", "512 kiB", {"kv_dtype": "fp16"}, "exact"),
    ("kv_cache.per_token", "0.5 mib", {"kv_dtype": "fp16"}, "exact"),
    ("kv_cache.per_token", "524 kb", {"kv_dtype": "fp16"}, "rounded"),
    # 524,288 · 16,000 tokens = 8,388,608,000 bytes
    ("kv_cache.total", r"2 \cdot 2 \cdot 32 \cdot 4096 \cdot 16_000", {"kv_dtype": "fp16", "seq": 16000,
                                                                        "new_tokens": 0}, "exact"),
    ("kv_cache.total", "2*2*32*4096*16_000", {"kv_dtype": "fp16", "seq": 16000, "new_tokens": 0}, "exact"),
    # per-factor labels: 8,192 tokens · 2 (K, V) · 2 bytes · 32 · 4,096 = 4,294,967,296
    ("kv_cache.total", r"8192\ (T) \cdot 2\ (K,V) \cdot 2 \cdot 32 \cdot 4096", {"kv_dtype": "fp16", "seq": 8192,
                                                                                 "new_tokens": 0}, "exact"),
    ("kv_cache.per_token", r"2 (K,V) \times 2 \times 32 (layers) \times 4096", {"kv_dtype": "fp16"}, "exact"),
    # a unit per item: one sequence of 4,096 tokens holds 524,288 · 4,096 = 2,147,483,648 bytes (2.1 GB)
    ("kv_cache.total", "2.1GB / sequence", {"kv_dtype": "fp16", "batch": 8, "seq": 4096, "new_tokens": 0},
     "rounded"),
    ("kv_cache.total", "0.5 MB per token", {"kv_dtype": "fp16"}, "rounded"),
    # 2 (K, V) · 2 bytes · 4,096 = 16,384 bytes = 16 KiB per token per layer
    ("kv_cache.total", "16 KiB per token per layer", {"kv_dtype": "fp16"}, "exact"),
    # N(llama2-7b) = 6,738,415,616 parameters (the model card's 6.74B)
    ("params.total", "N(llama2-7b) = 6.74B", {}, "rounded"),
    # inequalities: 2,147,483,648 bytes for one sequence of 4,096 tokens
    ("kv_cache.total", "less than 2.2 GB", {"kv_dtype": "fp16", "seq": 4096, "new_tokens": 0}, "bound"),
    ("kv_cache.total", "up to 1.7 GB", {"kv_dtype": "fp16", "seq": 4096, "new_tokens": 0}, "different"),
    ("kv_cache.total", r"M_{KV} \ge 2 GB", {"kv_dtype": "fp16", "seq": 4096, "new_tokens": 0}, "bound"),
])
def test_4_notation(quantity: str, claim: str, options: dict, verdict: str) -> None:
    """Before, each was refused: "unknown symbol 'kiB'", "unknown symbol 'K'", "unknown symbol 'token'",
    "unknown symbol 'less'", or misread (16_000 as 16 · _000, N(llama2-7b) as a product)."""
    r = check(quantity, claim, **LLAMA, **options)
    assert r.verdict == verdict, (claim, r.verdict, r.explanation)
    assert r.holds == (verdict != "different")


def test_4_readings_are_said() -> None:
    """A reading other than as typed is echoed, so an author sees what was checked."""
    assert "unsure: read kiB as KiB" in parse_formula("512 kiB", {}).readings
    assert any("label" in x for x in parse_formula(r"8192\ (T) \cdot 2", {}).readings)
    assert any("one sequence" in x for x in parse_formula("5.3GB / sequence", {}).readings)
    assert any("Python's digit separators" in x for x in parse_formula("16_000", {}).readings)
    # products stay products: 2 (s + n) and 2(sbh) are not labels
    from memderive.symbolic.dims_sympy import b, h, n, s
    assert parse_formula("2 (s + n)", {"s": s, "n": n}).expr == 2 * s + 2 * n
    assert parse_formula("2 (sbh)", {"s": s, "b": b, "h": h}).expr == 2 * s * b * h


def test_4_a_model_named_on_the_left_hand_side() -> None:
    """N(llama2-7b) = 6.74B checked with another model is said, not silently checked for the wrong one."""
    assert not any("left-hand side names" in x for x in check("params.total", "N(llama2-7b) = 6.74B", **LLAMA).notes)
    r = check("params.total", "N(llama2-13b) = 13.0B", **LLAMA)
    assert "unsure: the left-hand side names llama2-13b; checked with llama-2-7b (--model checks another)" in r.notes


def test_4_bracketed_node_path_with_a_slash() -> None:
    """params.total[attn/proj]: the output projection, h² weights and h biases per layer of GPT-2 (its c_proj).
    Before: "a ratio is two quantities, A/B ... not 'params.total[attn/proj]'"."""
    r = check("params.total[attn/proj]", "l(h^2 + h)", model="gpt2")
    assert r.verdict == "exact"


def test_4_text_name_with_a_text_subscript() -> None:
    r"""\text{ffw}_\text{multiplier} is one name, mapped by the author. Before: "unsupported" / unknown 'multiplier'."""
    r = check("params.per_layer", r"4h^2 + 3h \cdot \text{ffw}_\text{multiplier} \cdot h + 2h",
              symbols="ffw_multiplier=f/h", **LLAMA)
    assert r.verdict == "exact"


# --- 5. a length past the learned positions ---------------------------------------------------------------------------

def test_5_past_the_learned_positions_is_checked_and_said() -> None:
    """"at a hypothetical 16,000 tokens" GPT-2's fp16 cache is 2 · 2 · 12 · 768 · 16,000 = 589,824,000 bytes.
    Before: "gpt2 has 1,024 learned positions: --seq plus --new-tokens (16,000) must not exceed it"."""
    r = check("kv_cache.total", r"2 \cdot 2 \cdot 12 \cdot 768 \cdot 16{,}000", model="gpt2", kv_dtype="fp16",
              seq=16000, new_tokens=0)
    assert r.verdict == "exact"
    assert any("past the 1,024 learned positions gpt2 was trained with" in x for x in r.notes)
    # rotary positions take any length; past the 4,096 LLaMA-2 was trained with, it is said too
    rope = check("kv_cache.total", "2*2*32*4096*16_000", kv_dtype="fp16", seq=16000, new_tokens=0, **LLAMA)
    assert rope.verdict == "exact"
    assert any("past the 4,096 positions llama-2-7b was trained with" in x for x in rope.notes)


# --- 6. FLOPs and activation figures decomposed into graph terms ------------------------------------------------------

def test_6_flop_budget_without_the_attention_core() -> None:
    """6 FLOPs per matmul weight per token at s = 4,096: the layers' weights 32 · (4h² + 3hf) = 6,476,005,376 and the
    head's Vh = 131,072,000 make 6,607,077,376; times 6 · 4,096 = 162,375,533,592,576 ≈ 1.624e14. The attention
    core adds 12 b h l s² = 12 · 4,096 · 32 · 4,096² = 26,388,279,066,624. Before: only "different"."""
    r = check("flops.step", "1.624e14", batch=1, seq=4096, **LLAMA)
    assert r.verdict == "different"
    assert any("ours without the attention core (layer/attn/core) (26,388,279,066,624)" in x for x in r.explanation)


def test_6_activation_total_that_is_one_layer() -> None:
    """LLaMA-2-7B, b = 1, s = 2,048, 16-bit activations, eager attention: one layer saves 8 tensors of b·s·h (norm1's
    input, the QKV input, q, k, v, the attention output, norm2's input and output) = 16·4,096·2,048 = 134,217,728
    bytes, 3 of b·s·f in Megatron-LM's fused SwiGLU MLP (gate and up, the fused function's input, and fc2's input)
    = 6·11,008·2,048 = 135,266,304 and the scores 2·a·b·s² = 2·32·2,048² = 268,435,456: 537,919,488 bytes, so
    "538 MB" for the whole model is one layer's worth. Before: only "different"."""
    r = check("activations.total", "538 MB", batch=1, seq=2048, attention="eager", **LLAMA)  # the scores saved
    assert r.verdict == "different"
    assert any("one layer's worth of ours: 537,919,488" in x and "(l = 32)" in x for x in r.explanation)


# --- 1. a symbol the model defines is settled from the model ----------------------------------------------------------

def test_1_window_from_the_model() -> None:
    """A sliding-window note: "replace the sequence length by the window W". Mistral-7B at 32K tokens keeps W = 4,096
    positions: 2 · 2 bytes · l · a_kv · d_h · W = 4 · 32 · 8 · 128 · 4,096 = 536,870,912 bytes = 512 MiB per sequence.
    Before: "different, w/Min(32768, w) times ours" (and W itself unknown)."""
    options = {"model": "mistral-7b", "seq": 32768, "new_tokens": 0, "kv_dtype": "fp16"}
    r = check("kv_cache.total", r"2 \cdot 2 \cdot b \cdot l \cdot a_{kv} d_h \cdot W", **options)
    assert r.verdict == "exact" and r.holds
    assert any("exact once w = 4,096, mistral-7b's own" in x for x in r.explanation)
    assert check("kv_cache.total", "512 MiB", **options).verdict == "exact"
    # the user's pin wins: W = 8,192 is not the model's window, and ours then keeps 8,192 positions too
    pinned = check("kv_cache.total", r"4 b l a_{kv} d_h W", symbols="w=8192", **options)
    assert pinned.verdict == "exact" and not any("mistral-7b's own" in x for x in pinned.explanation)
    # a model without a window: W is said to be the window, not guessed
    with pytest.raises(ValueError, match="sliding window in most notes"):
        check("kv_cache.total", r"4 b l h W", model="llama-2-7b", kv_dtype="fp16")


# --- 2. leading order through min/max ---------------------------------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_2_leading_order_through_max_at_the_notes_sizes() -> None:
    """B·kv + params for LLaMA-2-7B serving a batch of 64 at 1,024 tokens: 2Ψ = 2 · 6,738,415,616 = 13,476,831,232
    bytes of weights and 4·b·l·h·s = 4 · 64 · 32 · 4,096 · 1,024 = 34,359,738,368 of cache (47,836,569,600 in all).
    Ours adds the larger phase's transient buffers, a max of growing arguments. Before: "different" with
    "cannot decide leading order through min/max"."""
    r = check("infer.total", r"M \approx 2\Psi + 4blh(s+n)", batch=64, seq=1024, new_tokens=0, **LLAMA)
    assert r.verdict == "leading-order" and r.holds
    assert not any("cannot decide" in x for x in r.explanation)
    # every branch of the max grows as 4·b·l·h·s (the cache) plus the weights: decided for every size
    assert any("every branch of each min/max has the same leading part" in x for x in r.explanation)
    assert r.counterexample.claim == 47_836_569_600
    assert not any(x.startswith("unsure:") for x in r.notes)
    # Mistral's cache is min(s + n, w) tokens: which branch leads depends on the length, decided at the note's
    # sizes and said to be unsure
    w = check("infer.total", r"2 \cdot 7.24 \cdot 10^9 + 4 b l a_{kv} d_h \min(s+n,w)", model="mistral-7b",
              kv_dtype="bf16")
    assert any(x.startswith("unsure: leading order decided at the sizes of mistral-7b") for x in w.notes)


# --- 7. nearby settings -----------------------------------------------------------------------------------------------

def test_7_lora_printout_of_another_target_set() -> None:
    """A note says r = 8 on q, k, v, o (4 · 8 · 8,192 · 32 = 8,388,608) but prints PEFT's "trainable params:
    19,988,480": r = 8 on every linear, 8 · (4 · 8,192 + 2 · 15,104 + 15,104) · 32 = 19,988,480. Before: only
    "different"."""
    r = check("params.trainable", "trainable params: 19,988,480", lora_rank=8,
              lora_targets="q_proj,k_proj,v_proj,o_proj", **LLAMA)
    assert r.verdict == "different"
    assert any("holds with --lora-targets all-linear (exactly)" in x for x in r.explanation)


def test_7_kv_figure_in_another_dtype() -> None:
    """4,096 tokens of LLaMA-2-7B's cache in fp32: 2 · 4 · 32 · 4,096 · 4,096 = 4,294,967,296 bytes ("4.29 GB");
    in fp16 it is half."""
    r = check("kv_cache.total", "4.29 GB", kv_dtype="fp16", seq=4096, new_tokens=0, **LLAMA)
    assert r.verdict == "different"
    assert any("holds with --kv-dtype fp32" in x for x in r.explanation)


# --- 8. a per-layer chain given as the total; GB labelled GiB ---------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_8_per_layer_chain_given_as_the_total() -> None:
    """"the total across all layers: M = sbh(34 + 5as/h) = 34sbh + 5as²b" is Korthikanti's Eq. 1, one layer."""
    r = check("activations.total", r"M_{total} = sbh(34 + 5as/h) = 34sbh + 5as^2b", attention="eager")  # Eq. 1's
    assert r.verdict == "different"
    assert any("1/l of ours at leading order: one layer's worth" in x for x in r.explanation)
    kv = check("kv_cache.total", "4bh(s+n)", kv_dtype="fp16")  # 2 · 2 · b · h · (s + n): one layer of the cache
    assert any("the claim is 1/l of ours: one layer's worth" in x for x in kv.explanation)


def test_8_gb_figure_labelled_gib() -> None:
    """4,096 tokens of LLaMA-2-7B's fp16 cache: 524,288 · 4,096 = 2,147,483,648 bytes = 2.1 GB = 2.0 GiB; printed
    "2.1 GiB" (2,201,170,739-2,308,544,921 bytes) it is a GB figure under a GiB label."""
    options = {"kv_dtype": "fp16", "seq": 4096, "new_tokens": 0, **LLAMA}
    r = check("kv_cache.total", "2.1 GiB", **options)
    assert r.verdict == "different"
    assert any("a figure in GB labelled GiB" in x for x in r.explanation)
    other = check("kv_cache.total", "2.0 GB", **options)  # the other way round: holds, said
    assert other.verdict == "rounded" and any("if its GB means GiB" in x for x in other.explanation)


def test_3_the_whole_peft_printout() -> None:
    """PEFT's line for LLaMA-2-7B, r = 8 on q_proj and v_proj: 2 · 8 · 8,192 · 32 = 4,194,304 trainable, all params
    6,738,415,616 + 4,194,304 = 6,742,609,920, trainable% 4,194,304 / 6,742,609,920 = 0.0622%. Before: "unexpected
    character '|'"."""
    line = "trainable params: 4,194,304 || all params: 6,742,609,920 || trainable%: 0.0622"
    r = check("params.trainable", line, lora_rank=8, lora_targets="q_proj,v_proj", **LLAMA)
    assert r.holds and r.verdict == "rounded"
    assert "(trainable params: 4,194,304: exact; all params: 6,742,609,920: exact; trainable%: 0.0622: rounded)" \
        in r.explanation[0]
    # the same line under r = 16: the first figure that does not hold is the verdict, and r = 8 is named
    wrong = check("params.trainable", line, lora_rank=16, lora_targets="q_proj,v_proj", **LLAMA)
    assert wrong.verdict == "different" and wrong.parsed.text == "trainable params: 4,194,304"
    assert any("holds with --lora-rank 8 (exactly)" in x for x in wrong.explanation)
