"""KV cache: equal to the byte to what transformers allocates, and to the published figures."""

from __future__ import annotations

import pytest
import sympy as sp
import torch
import transformers
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memderive.derivations.models.architectures import GPT, LLAMA
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.inference import FORMULAS, infer_quantities, inference_values
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.derivations.quantities.traced import HAND_WRITTEN_FOR_MEGATRON
from memderive.symbolic.dims_sympy import SYMBOLS

sym = SYMBOLS.__getitem__  # closed forms are SymPy: their symbols
from memderive.symbolic.formula import Citation
from tests import test_params_families as params_families
from tests import test_params_transformers as params_transformers


def hf_cache_bytes(config: transformers.PretrainedConfig, batch: int, seq: int, new: int, dtype=torch.bfloat16) -> int:
    """Prefill ``batch x seq`` tokens, then ``new`` one-token decode steps, on the meta device;
    the bytes of the storages behind every cached key and value tensor."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    ids = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).cache
        for _ in range(new):
            step = torch.zeros(batch, 1, dtype=torch.long, device="meta")
            cache = model(input_ids=step, cache=cache, use_cache=True).cache
    tensors = [x for layer in cache.layers for x in (layer.keys, layer.values)]
    assert all(x.dtype == dtype for x in tensors)
    # A sliding-window layer keeps a view of the last w - 1 tokens; its storage is what is allocated.
    return sum(x.untyped_storage().nbytes() for x in tensors)


# Real configs of every supported decoder family, small: the parameter tests' tables (MHA, GQA, MQA,
# head_dim != h/a, tied, biased, parallel blocks, ...) plus sliding windows short enough to pass.
CORE = [(t, f) for t, f in params_transformers.FAMILY_CONFIGS if t != "bert" and t not in HAND_WRITTEN_FOR_MEGATRON]
MORE = params_families.FAMILY_CONFIGS
WINDOWS = [
    ("mistral", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                     intermediate_size=100, vocab_size=100, sliding_window=8)),
    ("mistral", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                     intermediate_size=100, vocab_size=100, sliding_window=None)),
    ("qwen2", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                   intermediate_size=100, vocab_size=100, use_sliding_window=True, sliding_window=6,
                   max_window_layers=0)),
    ("starcoder2", dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=1, num_hidden_layers=2,
                        intermediate_size=100, vocab_size=100, sliding_window=5)),
]
# (batch, prompt, new tokens): prefill only; prefill + decode; past the windows (5, 6 and 8) above.
STEPS = [(3, 5, 0), (2, 4, 3), (2, 12, 2)]
# Only some layers slide (window 6): Gemma 2 alternates; Gemma 3 has 5 local to 1 global; Qwen2 slides
# from max_window_layers on; an explicit layer_types list wins over each family's rule (the rules would
# give qwen2 0 and gemma2 2 sliding layers of 4 here).
_SMALL = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=100, vocab_size=100)
MIXED = [
    ("gemma2", dict(_SMALL, head_dim=16, num_hidden_layers=4, sliding_window=6)),
    ("gemma3_text", dict(_SMALL, head_dim=16, num_hidden_layers=7, sliding_window=6)),
    ("qwen2", dict(_SMALL, num_hidden_layers=4, use_sliding_window=True, sliding_window=6, max_window_layers=2)),
    ("qwen2", dict(_SMALL, num_hidden_layers=4, use_sliding_window=True, sliding_window=6,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"])),
    ("gemma2", dict(_SMALL, head_dim=16, num_hidden_layers=4, sliding_window=6,
                    layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention"])),
]
# s + n below the window, at it, crossing it while decoding, past it (always at least one decode step).
MIXED_STEPS = [(2, 3, 2), (2, 4, 2), (1, 5, 3), (2, 12, 2), (3, 9, 1)]
def check(model_type: str, fields: dict, batch: int, seq: int, new: int) -> None:
    transformers.logging.set_verbosity_error()  # small vocabularies make it warn about bos/eos ids
    config = transformers.AutoConfig.for_model(model_type, **fields)
    est = estimate(config, mode="infer", batch=batch, seq=seq, new_tokens=new)
    assert est.number("kv_cache_bytes") == hf_cache_bytes(config, batch, seq, new)


@pytest.mark.parametrize("steps", STEPS, ids=[f"b{b}-s{s}-n{n}" for b, s, n in STEPS])
@pytest.mark.parametrize(("model_type", "fields"), CORE + WINDOWS,
                         ids=[f"{t}-{i}" for i, (t, _) in enumerate(CORE + WINDOWS)])
def test_kv_cache_matches_transformers(model_type: str, fields: dict, steps: tuple[int, int, int]) -> None:
    check(model_type, fields, *steps)


@pytest.mark.parametrize("steps", MIXED_STEPS, ids=[f"b{b}-s{s}-n{n}" for b, s, n in MIXED_STEPS])
@pytest.mark.parametrize(("model_type", "fields"), MIXED, ids=[f"{t}-{i}" for i, (t, _) in enumerate(MIXED)])
def test_kv_cache_of_some_sliding_layers_matches_transformers(model_type: str, fields: dict,
                                                              steps: tuple[int, int, int]) -> None:
    check(model_type, fields, *steps)


def test_some_sliding_layers_by_hand() -> None:
    """Gemma 2, 4 layers alternating, w = 6; one layer caches 2 (k, v) * 2 KV heads * 16 * 2 bytes = 128 bytes
    per token of a sequence. b = 2, s + n = 14: 2 full layers * 14 + 2 sliding * 6 = 40 layer-tokens."""
    config = transformers.AutoConfig.for_model("gemma2", **MIXED[0][1])
    est = estimate(config, mode="infer", batch=2, seq=12, new_tokens=2)
    assert (est.model.window, est.model.window_layers) == (6, 2)
    assert est.number("kv_cache_bytes") == 2 * 128 * 40 == 10_240
    assert est.number("kv_cache_bytes_per_token") == 4 * 128  # one token in every layer: the slope below w
    below = estimate(config, mode="infer", batch=2, seq=3, new_tokens=2)
    assert below.number("kv_cache_bytes") == 2 * 128 * 4 * 5 == 5_120  # s + n = 5 < w: no layer is capped


def test_gemma_2_9b_by_hand() -> None:
    """google/gemma-2-9b: 42 layers, 21 sliding (w = 4096), 8 KV heads of 256, bf16: 2 * 8 * 256 * 2 = 8192
    bytes per layer per token; at s + n = 8192: 8192 * (21 * 8192 + 21 * 4096) = 2,113,929,216 bytes
    (the estimate before: every layer 8192 tokens, 2,818,572,288)."""
    est = estimate("gemma-2-9b", mode="infer", batch=1, seq=8191, new_tokens=1)
    assert est.number("kv_cache_bytes") == 2_113_929_216
    assert est.number("kv_cache_bytes_per_token") == 42 * 8192


def test_without_the_window_is_a_claim_alternative() -> None:
    """4 b l a_kv d_h (s + n) gives every layer its whole context: it holds without Gemma 2's window."""
    from memderive.derivations.claims.check import check as check_claim

    result = check_claim("kv_cache.total", "4 b l a_kv d_h (s+n)", model="gemma-2-9b")
    assert result.verdict == "conditional" and result.holds_under == ("without the sliding window",)


@pytest.mark.parametrize(("model_type", "fields"), MORE, ids=[f"{t}-{i}" for i, (t, _) in enumerate(MORE)])
def test_kv_cache_matches_transformers_more_families(model_type: str, fields: dict) -> None:
    check(model_type, fields, 2, 12, 2)


def test_fp32_model_caches_in_fp32() -> None:
    config = transformers.AutoConfig.for_model("llama", **CORE[3][1])
    est = estimate(config, mode="infer", batch=2, seq=7, weight_dtype="fp32")
    assert est.number("kv_cache_bytes") == hf_cache_bytes(config, 2, 7, 0, dtype=torch.float32)


def test_prefill_past_the_window_is_not_the_steady_state() -> None:
    """Right after a prefill longer than w, transformers still holds all s tokens (documented)."""
    config = transformers.AutoConfig.for_model("mistral", **WINDOWS[0][1])
    est = estimate(config, mode="infer", batch=1, seq=12)
    # 2 layers * (k + v) * 2 KV heads * 16 head dim * 2 bytes = 256 bytes per token
    assert est.number("kv_cache_bytes") == 8 * 256  # min(s + n, w) = 8 tokens
    assert hf_cache_bytes(config, 1, 12, 0) == 12 * 256


# --- published figures -----------------------------------------------------------------------

def per_token(model: str | Model, **options) -> int:
    return estimate(model, mode="infer", batch=1, seq=1, **options).number("kv_cache_bytes_per_token")


@pytest.mark.parametrize(("model", "expected"), [
    ("llama-2-7b", 524_288),  # kipply-2022's 2·2·n_layers·n_heads·d_head by hand: 2 * 2 B * 32 layers * 32 heads * 128
    ("llama-2-13b", 819_200),  # §7: 2 * 2 * 40 * 40 * 128
    ("llama-2-70b", 327_680),  # §7: 2 * 2 * 80 * 8 * 128 (GQA-8)
    ("llama-3-8b", 131_072),  # §7: 2 * 2 * 32 * 8 * 128 = 128 KiB
    ("llama-3-70b", 327_680),  # §7
    ("mistral-7b", 131_072),  # §7: 2 * 2 * 32 * 8 * 128
    ("gpt3-175b", 4_718_592),  # §7: 2 * 2 * 96 * 96 * 128
])
def test_published_bytes_per_token(model: str, expected: int) -> None:
    assert per_token(model) == expected


def test_kipply_52b_bytes_per_token() -> None:
    """kipply-2022, the 52B example: d_model 8192, 64 layers, 16-bit: 4 * 64 * 8192 = 2,097,152."""
    for heads in (64, 128):  # the figure does not depend on how d_model is cut into heads
        model = Model("kipply-52b", GPT, {"h": 8192, "a": heads, "l": 64, "V": 50257, "n_ctx": 2048})
        assert per_token(model) == 2_097_152


def test_gpt3_kv_cache_zhihu() -> None:
    """zhihu-624740065, the GPT-3 KV cache example: 4blh(s+n) with b=64, s=512, n=32, l=96, h=12288 = 164,282,499,072 bytes (fp16)."""
    est = estimate("gpt3-175b", mode="infer", batch=64, seq=512, new_tokens=32, weight_dtype="fp16")
    assert est.number("kv_cache_bytes") == 164_282_499_072


def test_int8_kv_cache_halves_it() -> None:
    assert per_token("llama-2-7b", kv_dtype="int8") == 524_288 // 2
    assert per_token("llama-2-7b", kv_dtype="fp32") == 524_288 * 2


# --- closed forms -----------------------------------------------------------------------------

def symbolic(model: str | Model, **opts) -> dict:
    from memderive.derivations.models.resolve import resolve_model

    m = resolve_model(model)
    options = Options(mode="infer", batch=1, seq=1, **opts)
    _, qs = infer_quantities(m, options, m.graph(dropout=False), keep_symbols=True)
    return {q.key: q for q in qs}


def test_formulas_have_citations() -> None:
    assert FORMULAS and all(isinstance(f.source, Citation) for f in FORMULAS)


def test_closed_forms_are_the_published_ones() -> None:
    gpt3 = symbolic("gpt3-175b", weight_dtype="fp16")  # relations d_h = h/a, a_kv = a
    b, s, n, l, h, a, a_kv, d_h = (sym(x) for x in ("b", "s", "n", "l", "h", "a", "a_kv", "d_h"))
    # Written here from the sources, not read from the code: zhihu-624740065 4blh(s+n);
    # kipply-2022 2*2*n_layers*n_heads*d_head; with ainslie-2023's G = a_kv K/V heads 2*2*l*a_kv*d_h, all fp16.
    assert sp.expand(gpt3["kv_cache_bytes"].closed_form() - 4 * b * l * h * (s + n)) == 0
    assert sp.expand(gpt3["kv_cache_bytes_per_token"].closed_form() - 2 * 2 * l * a * h / a) == 0
    llama3 = symbolic("llama-3-8b")  # GQA: a_kv stays a letter
    assert sp.expand(llama3["kv_cache_bytes_per_token"].closed_form() - 2 * 2 * l * a_kv * h / a) == 0
    assert d_h not in llama3["kv_cache_bytes"].closed_form().free_symbols
    assert llama3["kv_cache_bytes"].closed_form() == sp.expand(2 * b * (s + n) * l * a_kv * (h / a) * 2)


def test_window_caps_the_cached_length() -> None:
    q = symbolic("mistral-7b")["kv_cache_bytes"]
    assert q.closed_form().has(sp.Min(sym("s") + sym("n"), sym("w")))
    assert not q.closed_form().has(sym("l_w"))  # every layer slides: the one-group form


def test_some_sliding_layers_closed_form() -> None:
    """Two groups of layers: 2 b a_kv d_h beta ((l - l_w)(s + n) + l_w min(s + n, w)), beta = 2 bytes."""
    b, s, n, w, l, l_w, a_kv, d_h = (sym(x) for x in ("b", "s", "n", "w", "l", "l_w", "a_kv", "d_h"))
    qs = symbolic("gemma-2-9b")
    shown = qs["kv_cache_bytes"].closed_form()
    assert shown == sp.Mul(4 * a_kv * b * d_h, l_w * sp.Min(s + n, w) + (l - l_w) * (s + n), evaluate=False)
    assert sp.expand(shown - 2 * b * a_kv * d_h * 2 * ((l - l_w) * (s + n) + l_w * sp.Min(s + n, w))) == 0
    assert qs["kv_cache_bytes_per_token"].closed_form() == 4 * a_kv * d_h * l
    assert [t.path for t in qs["kv_cache_bytes"].breakdown.terms] == [
        "kv_cache/full/keys/attn/core", "kv_cache/full/values/attn/core",
        "kv_cache/sliding/keys/attn/core", "kv_cache/sliding/values/attn/core"]


# --- tensor parallelism -----------------------------------------------------------------------

@pytest.mark.parametrize(("model", "tp", "expected"), [
    ("llama-2-70b", 8, 40_960),  # 8 KV heads / 8 GPUs = 1 head: 2 * 2 * 80 * 1 * 128
    ("llama-2-7b", 4, 131_072),  # 32 / 4 = 8 heads: 2 * 2 * 32 * 8 * 128
    ("llama-3-8b", 8, 16_384),  # 8 / 8 = 1 head: 2 * 2 * 32 * 1 * 128
    ("llama-3-8b", 16, 16_384),  # 8 KV heads < 16 GPUs: each keeps max(8/16, 1) = 1 head
    ("llama-3-8b", 32, 16_384),
])
def test_kv_heads_split_and_replicated(model: str, tp: int, expected: int) -> None:
    assert per_token(model, tp=tp) == expected


def test_replicated_kv_weights() -> None:
    """llama-3-8b, t = 16: per GPU q 32/16 = 2 heads, k and v one head each (replicated),
    so the fused qkv weight holds (2 + 1 + 1) * 128 = 512 rows of 4096: 2,097,152 elements per layer."""
    est = estimate("llama-3-8b", mode="infer", batch=1, seq=1, tp=16)
    qkv = [v for path, _, v in est.quantity("parameters_per_gpu").term_values(est.values) if path == "layer/attn/qkv"]
    assert qkv == [32 * 2_097_152]


@st.composite
def models(draw):
    arch = draw(st.sampled_from([GPT, LLAMA]))
    a_kv = draw(st.sampled_from([1, 2, 4]))
    a = a_kv * draw(st.sampled_from([1, 2, 4]))
    sizes = {"h": a * draw(st.integers(1, 8)), "a": a, "a_kv": a_kv, "l": draw(st.integers(1, 4)),
             "V": 64, "f": 16 * draw(st.integers(1, 4)), "n_ctx": 64}
    if draw(st.booleans()):
        sizes["d_h"] = draw(st.integers(1, 24))
    window = draw(st.sampled_from([None, 3, 17]))
    sliding = draw(st.integers(1, sizes["l"]))  # l_w; all l layers is the one-window model
    return Model(f"random-{sliding}", arch, sizes, window=window, window_layers=sliding)


@settings(max_examples=40, deadline=None)
@given(models(), st.integers(1, 5), st.integers(1, 40), st.integers(0, 9), st.sampled_from([1, 2, 4]))
def test_kv_closed_form_and_tp(model: Model, batch: int, seq: int, new: int, tp: int) -> None:
    z = model.sizes
    assume(z["a"] % tp == 0)
    one = estimate(model, mode="infer", batch=batch, seq=seq, new_tokens=new)
    capped = min(seq + new, model.window or seq + new)
    windowed = 0 if model.window is None else int(model.name.split("-")[1])  # l_w as drawn, not as read back
    layer_tokens = (z["l"] - windowed) * (seq + new) + windowed * capped
    assert one.number("kv_cache_bytes") == 2 * batch * layer_tokens * z["a_kv"] * z["d_h"] * 2
    values = {**one.values, **inference_values(model, one.options)}
    sym_q = symbolic(model)["kv_cache_bytes"]
    assert sym_q.value(values) == one.number("kv_cache_bytes")
    many = estimate(model, mode="infer", batch=batch, seq=seq, new_tokens=new, tp=tp)
    assert many.number("kv_cache_bytes") <= one.number("kv_cache_bytes")
    assert many.number("kv_cache_bytes") * tp >= one.number("kv_cache_bytes")
