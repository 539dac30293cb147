"""The symbolic-shape route (derivations/quantities/traced_symbolic.py): transformers' forward run once on fake
tensors with b and s symbolic sizes, the bytes one exact SymPy expression.

Independent sources: real bf16 CPU training forwards measured by ``tests/hf_saved.py`` (real tensors, counted by
data pointer, no symbolic sizes), and hand arithmetic in the comments for the cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sympy as sp

from memderive.commands.cli import main
from memderive.derivations.quantities import traced
from memderive.derivations.quantities import traced_symbolic as ts
from memderive.symbolic.dims import by_name
from tests.hf_saved import Shape, measure_config
from tests.test_traced import SAMPLE

b, s = by_name("b").symbol, by_name("s").symbol

#: A llama-like model no hand-written family takes (arcee: dense attention, GQA): 2 layers, 2 KV heads of 16 dims
ARCEE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=2,
             intermediate_size=96, vocab_size=128)
CONFIGS = {"arcee": ARCEE, **SAMPLE}


def _config(model_type: str):
    return traced.hf_config({"model_type": model_type, **CONFIGS[model_type]})


def _cache(model, mode, bb, ss):
    return traced.cache_bytes(model, mode, bb, ss).total


@pytest.mark.parametrize(("model_type", "attention"), [("arcee", "eager"), ("arcee", "sdpa"), ("t5", "eager")])
def test_symbolic_saved_equal_cpu(model_type: str, attention: str) -> None:
    # one symbolic trace (b, s hinted 2, 24) and one with b = 1, evaluated at real bf16 CPU training forwards at
    # s 7 and 13, b 1 and 2. arcee: its loss pads the labels (nn.functional.pad), which without the Python dispatcher
    # fixes b = 2 and s = 24; T5: dropout 0.1, saved as CPU eager saves it (not the Python decomposition's bool mask)
    cfg = _config(model_type)
    model, mode = ts.symbolic_model(cfg, attention)
    general, guards = ts.symbolic_bytes(traced.saved_bytes, model, mode)
    one, _ = ts.symbolic_bytes(traced.saved_bytes, model, mode, b=1)
    assert general.free_symbols == {b, s} and one.free_symbols == {s}
    assert all(ts._true(g, 2, ss) for g, _ in guards for ss in (7, 13))
    cfg._attn_implementation = attention
    for ss in (7, 13):
        assert [one.subs(s, ss), general.subs({b: 2, s: ss})] == [measure_config(cfg, Shape(bb, ss)).nbytes
                                                                  for bb in (1, 2)]


def test_llama_like_cache_expression_by_hand() -> None:
    # 2 layers x 2 (K, V) x 2 KV heads x 16 head dims x 2 B (bf16) x b x (s + 1) tokens after a prefill and one
    # decode step = 256 * b * (s + 1), whatever b and s: no guard, and b = 1 the same expression
    model, mode = ts.symbolic_model(_config("arcee"), "sdpa")
    general, guards = ts.symbolic_bytes(_cache, model, mode)
    one, guards_one = ts.symbolic_bytes(_cache, model, mode, b=1)
    assert sp.expand(general - 2 * 2 * 2 * 16 * 2 * b * (s + 1)) == 0
    assert sp.expand(one - 256 * (s + 1)) == 0 and ts._telling(guards + guards_one) == []


@pytest.mark.parametrize("model_type", ["arcee", "t5", "bart"])
def test_symbolic_equals_polynomial(model_type: str) -> None:
    # where transformers' code branches on no size, the symbolic expression is the polynomial route's exactly
    cfg = _config(model_type)
    model, mode = traced.build(cfg, "eager")
    for kind, count, degree in (("saved", traced.saved_bytes, 2), ("cache", _cache, 1)):
        fit = traced.polynomial(lambda bb, ss, count=count: count(model, mode, bb, ss), s_degree=degree)
        got = ts.formula(cfg, "eager", "bf16", kind, 2, 24, count(model, mode, 2, 24), model, mode)
        assert isinstance(got, ts.Symbolic), got
        poly = sp.sympify(str(fit.general), locals={"b": b, "s": s})
        assert sp.expand(got.general - poly) == 0
        one = got.general.subs(b, 1) if got.one is None else got.one
        assert sp.expand(one - (poly.subs(b, 1) if fit.one is None else
                                sp.sympify(str(fit.one), locals={"s": s}))) == 0


def test_symbolic_flops_equal_polynomial() -> None:
    # the FLOPs formula from one run on symbolic b and s (FlopCounterMode multiplying SymInt sizes) is the fitted
    # polynomial's (12 concrete fake forwards through small (b, s)), printed the same; by hand for arcee (2 layers,
    # 4 heads of 16, eager): Q K^T and A V 2 x 2 x 4 x 16 = 256 b s^2 a layer, 512 b s^2 in all. (Training's
    # forward formula through this route: test_traced_strategies.test_flops_by_hand)
    kind = "prefill_flops"
    cfg = _config("arcee")
    model, mode = traced.build(cfg, "eager")
    count = ts.KINDS[kind][1]
    fit = traced.polynomial(lambda bb, ss: count(model, mode, bb, ss))
    got = ts.formula(cfg, "eager", "bf16", kind, 2, 24, count(model, mode, 2, 24), model, mode)
    assert isinstance(got, ts.Symbolic), got
    assert got.short == str(fit) and got.general.coeff(b * s**2) == 512


def test_symbolic_training_flops_one_run_without_cache() -> None:
    # a config with use_cache false (SmolLM3's): without a cache transformers' packed-sequence check reads position
    # values, and the symbolic run fell back to the 12-point fit; now one forward + backward on symbolic sizes gives
    # the pair (forward, model): by hand 512 b s^2 + 2 x (2 x 24,576 + 8,192) b s forward (test_flops_by_hand's),
    # the backward twice that
    cfg = traced.hf_config({"model_type": "arcee", **ARCEE, "use_cache": False})
    model, mode = traced.build(cfg, "eager")
    forward, backward = traced.flops(model, mode, 2, 7)
    got = ts.formula(cfg, "eager", "bf16", "train_flops", 2, 7, (forward, forward + backward), model, mode)
    assert all(isinstance(g, ts.Symbolic) for g in got), got
    assert [g.short for g in got] == ["512*b*s**2 + 114688*b*s", "1536*b*s**2 + 344064*b*s"]


def test_qwen3_next_chunks_held_by_guards() -> None:
    # Qwen3-Next's gated DeltaNet pads s to its chunk of 64 (torch_chunk_gated_delta_rule): traced at s = 24 the
    # expression holds for one chunk, its guards say so, and it equals the polynomial (fitted at s 4, 6, 8, one
    # chunk too) where they hold; at s = 100 (two chunks) the guards fail and the route falls back, saying where
    cfg = _config("qwen3_next")
    model, mode = traced.build(cfg, "eager")
    got = ts.formula(cfg, "eager", "bf16", "saved", 2, 24, traced.saved_bytes(model, mode, 2, 24), model, mode)
    assert isinstance(got, ts.Symbolic) and "torch_chunk_gated_delta_rule" in str(got)
    fit = traced.polynomial(lambda bb, ss: traced.saved_bytes(model, mode, bb, ss))
    assert all(got(bb, ss) == fit(bb, ss) for bb in (1, 2, 3) for ss in (5, 24, 63, 64))
    sym_model, sym_mode = ts.symbolic_model(cfg, "eager")
    with pytest.raises(traced.TracedError, match="torch_chunk_gated_delta_rule.*b = 2, s = 100 fails"):
        ts.symbolic(traced.saved_bytes, sym_model, sym_mode, 2, 100, traced.saved_bytes(model, mode, 2, 100))


def test_qwen3_next_loop_over_chunks_stops_the_symbolic_run() -> None:
    # at s = 1,000 (16 chunks of 64, padded to 1,024) the gated DeltaNet's Python loop over chunks would unroll 16
    # times on symbolic sizes, more than ts.UNROLLED (8): the run stops at the loop's count and the route falls back
    # to the polynomial, saying where. The cache by hand: the attention layer's K and V, 2 KV heads x 16 dims x 2 B x 2
    # = 128 B a token, s + 1 tokens; the DeltaNet layer's conv state, (2 x 16 key heads x 128 + 32 value heads x 128)
    # channels x kernel 4 x 2 B = 65,536, and its fp32 state, 32 x 128 x 128 x 4 B = 2,097,152, per sequence; the
    # cache's int64 step counter, 8
    cfg = _config("qwen3_next")
    model, mode = traced.build(cfg, "sdpa")
    measured = traced.cache_total(model, mode, 2, 1000)
    got = ts.formula(cfg, "sdpa", "bf16", "cache", 2, 1000, measured, model, mode)
    assert ts.UNROLLED == 8
    assert isinstance(got, ts.Fallback) and "= 16 (" in got.why and "torch_chunk_gated_delta_rule" in got.why
    assert measured == got(2, 1000) == 128 * 2 * 1001 + (65_536 + 2_097_152) * 2 + 8


def test_mamba_falls_back_saying_why() -> None:
    # MambaMixer's slow path (no CUDA kernels) loops over the sequence in Python (mamba_selective_scan: for index in
    # range(seq_len)): it fixes s, so no expression; the polynomial route answers, and the reason names the loop
    cfg = _config("mamba")
    model, mode = traced.build(cfg, "eager")
    measured = traced.saved_bytes(model, mode, 2, 9)
    got = ts.formula(cfg, "eager", "bf16", "saved", 2, 9, measured, model, mode)
    assert isinstance(got, ts.Fallback) and got.fit is not None and got(2, 9) == measured
    assert "fixes s = 9" in got.why and "mamba_selective_scan" in got.why


def test_cli_shows_symbolic_cache(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "arcee", **ARCEE}))
    assert main(["estimate", "--model", str(path), "--mode", "infer", "--batch", "1", "--seq", "100"]) == 0
    out = capsys.readouterr().out
    # 256 * b * (s + 1) by hand (test_llama_like_cache_expression_by_hand): 256 * 101 = 25,856 B at b = 1, s = 100
    assert "Cache 25,856 B" in out and "256*b*s + 256*b, exact (traced with symbolic b and s" in out
