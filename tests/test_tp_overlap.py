"""--tp-comm-overlap: each tensor-parallel collective behind the GEMMs it is fused with (Transformer Engine's
userbuffers, PyTorch's micro-pipeline TP: ``fuse_all_gather_matmul``, ``fuse_matmul_reduce_scatter``), never behind
the rest of the micro-batch; the pairs and the exposed time by hand."""

from __future__ import annotations

import pytest

import memderive.derivations.quantities.timing as timing
from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.compute import whole_model
from memderive.derivations.quantities.efficiency import matmul_rate
from memderive.derivations.quantities.memory_bound import achievable_bandwidth, layout_int
from memderive.derivations.quantities.timing import _stacked_sum_s, quantized_gathers, step_time, tp_bytes
from memderive.derivations.quantities.tp_overlap import exposed_s, overlap_forms, reduced_partials
from tests.published_runs import GPT3_20B

H100 = gpu("h100-sxm")
# Llama 3 70B: h 8,192, 8 KV heads of 128 (k, v: 1,024 each), FFN 28,672, V 128,256, 80 layers; b 1, s 4,096
KW = dict(mode="train", batch=1, seq=4096, tp=8, sp=True, micro_batches=4, recompute="selective")
M, H, QKV, F, V, L = 4096, 8192, 8192 + 2 * 1024, 28672, 128256, 80
HALF = M * H * 2 // 2  # a ring all-gather or reduce-scatter of b s h 16-bit values, in all-reduce terms: 33,554,432


def _gemm(m: int, n: int, k: int, count: int = 1) -> float:
    """Seconds of ``count`` bf16 GEMMs of shape (m, n, k) on the H100, at the measured rate of that shape."""
    return count * 2 * m * n * k / matmul_rate(H100, "bf16", m, n, k)


def _pairs_of(per_byte: float, slow: float = 1.0, split: str = ""):
    """``pair(bytes, GEMM seconds)``: a collective at ``per_byte`` split into 8 chunks behind its GEMMs,
    c/8 + max(0, 7c/8 - g); and a layer's four forward pairs (o, fc2, qkv, gate and up) by it, o's and fc2's GEMMs
    ``slow`` times as long (TE's userbuffers' SM margin on proj_fprop and fc2_fprop). ``split`` "te": each GEMM as
    TE's userbuffers run it (comm_gemm_overlap.cpp): o's and fc2's pipelined reduce-scatters 4 GEMMs of a quarter of
    the output features (num_splits 4), qkv's and gate/up's ring exchanges 8 GEMMs of an eighth of the tokens;
    "rows": each as 8 GEMMs of an eighth of the tokens (PyTorch's micro-pipeline TP, one mm per rank's shard)."""
    def pair(nbytes: int, seconds: float) -> float:
        c = nbytes * per_byte
        return c / 8 + max(0.0, c * 7 / 8 - seconds)

    if split == "te":
        forward = (pair(HALF, slow * _gemm(M, H // 4, H // 8, 4)) + pair(HALF, slow * _gemm(M, H // 4, F // 8, 4))
                   + pair(HALF, _gemm(M // 8, QKV // 8, H, 8)) + pair(HALF, _gemm(M // 8, F // 8, H, 2 * 8)))
    elif split == "rows":
        forward = (pair(HALF, _gemm(M // 8, H, H // 8, 8)) + pair(HALF, _gemm(M // 8, H, F // 8, 8))
                   + pair(HALF, _gemm(M // 8, QKV // 8, H, 8)) + pair(HALF, _gemm(M // 8, F // 8, H, 2 * 8)))
    else:
        forward = (pair(HALF, slow * _gemm(M, H, H // 8)) + pair(HALF, slow * _gemm(M, H, F // 8))
                   + pair(HALF, _gemm(M, QKV // 8, H)) + pair(HALF, _gemm(M, F // 8, H, 2)))
    return pair, forward


def _pairs(est):
    whole = whole_model(est.model.graph(activation_dtype=est.options.dtype), est.options)
    quantized, gathered = quantized_gathers(est, whole)
    forms = overlap_forms(whole, float8=quantized, gathered=gathered)
    ev = lambda x: layout_int(x, est.values)  # noqa: E731
    return whole, {name: [[(ev(b), fp8, [(ev(f), ev(m), ev(n), ev(k), c, ub) for f, m, n, k, c, ub in g])
                           for b, fp8, g in grp] for grp in groups] for name, *groups in forms}


def test_pairs_of_a_llama_layer_by_hand() -> None:
    """Per layer, forward: o's and fc2's reduce-scatters behind their own GEMMs (2 M h h, 2 M f h), the attention's
    and the MLP's input gathers behind q k v (2 M h (h + 2 kv)) and gate, up (2 M f h each); backward the same
    GEMMs' data gradients behind the other halves. The embedding's all-reduce (b s h x 2 B) has no GEMM; the head
    gathers its input behind 2 M V h. The bytes add up to tp_bytes' own."""
    est = estimate("llama-3-70b", tp_comm_overlap=True, **KW)
    whole, pairs = _pairs(est)
    o, fc2, qkv, gate = (2 * M * H * H * L, M, H, H), (2 * M * H * F * L, M, H, F), (2 * M * QKV * H * L, M, QKV, H), \
        (2 * M * F * H * L, M, F, H)  # 43,980,465,111,040; 153,931,627,888,640; 54,975,581,388,800; = fc2's
    row = lambda g, ub: (*g, False, ub)  # noqa: E731  (the split side: in; TE's name of the linear)
    col = lambda g, ub: (*g, True, ub)  # noqa: E731  (the split side: out)
    layer = [(HALF * L, False, [row(o, "proj")]), (HALF * L, False, [row(fc2, "fc2")]),
             (HALF * L, False, [col(qkv, "qkv")]), (HALF * L, False, [col(gate, "fc1"), col(gate, "fc1")])]
    assert pairs["layer"] == [layer, layer, []]
    head = [(HALF, False, [(2 * M * V * H, M, V, H, True, None)])]  # no userbuffers outside the layers
    assert pairs["head"] == [head, head, []]
    assert pairs["embed"] == [[(2 * HALF, False, [])], [], []]
    fwd, bwd = tp_bytes(whole, est.values, False)
    assert fwd + bwd == 2 * HALF + 8 * HALF * L + 2 * HALF == 21_609_054_208


def test_each_collective_hides_behind_its_own_gemm_only() -> None:
    """The exposed TP time of a micro-batch, by hand: the transfers at the unhidden time's seconds per byte (tp_s of
    the run without overlap over its 21,609,054,208 bytes), each GEMM's FLOPs over t = 8 at the H100's bf16 rate of
    its per-GPU shape (M, n, k): o (4,096, 8,192, 1,024) forward and (4,096, 1,024, 8,192) as its data gradient, fc2
    (4,096, 8,192, 3,584), qkv (4,096, 1,280, 8,192), gate and up (4,096, 3,584, 8,192), the head (4,096, 16,032,
    8,192), backward transposed; each pair c/8 + max(0, 7c/8 - g). o's GEMM, 8,192/28,672 of fc2's, is shorter than its
    reduce-scatter: that part stays exposed where the old model hid every transfer behind the micro-batch's compute
    (tp_s / 8 then). TE's default userbuffers take 16 of the H100's 132 SMs from o's and fc2's forward GEMMs and
    from qkv's and gate/up's data-gradient GEMMs (symbolic/userbuffers.py): those run 132/116 as long; and the
    overlaps split their GEMMs (``_pairs_of``'s ``split``; o's and fc2's data gradients 8 GEMMs of 512 tokens)."""
    plain = step_time(estimate("llama-3-70b", **KW), "h100-sxm")
    overlapped = step_time(estimate("llama-3-70b", tp_comm_overlap=True, **KW), "h100-sxm")
    per_byte = plain.tp_s / 4 / 21_609_054_208
    slow = 132 / 116
    pair, forward = _pairs_of(per_byte, slow, split="te")
    gemm = _gemm  # o's and fc2's data gradients behind ring exchanges: 8 GEMMs of an eighth of the tokens each
    backward = (pair(HALF, gemm(M // 8, H // 8, H, 8)) + pair(HALF, gemm(M // 8, F // 8, H, 8))
                + pair(HALF, slow * gemm(M, H, QKV // 8)) + pair(HALF, slow * gemm(M, H, F // 8, 2)))
    rest = pair(2 * HALF, 0.0) + pair(HALF, gemm(M, V // 8, H)) + pair(HALF, gemm(M, H, V // 8))
    assert overlapped.tp_s == pytest.approx(4 * (L * (forward + backward) + rest), rel=1e-9)
    assert HALF * per_byte * 7 / 8 > gemm(M, H, H // 8)  # o's reduce-scatter outlasts its GEMM
    assert plain.tp_s / 8 < overlapped.tp_s < plain.tp_s
    assert exposed_s([(8.0, 3.0), (8.0, 9.0)], 8) == 1 + 4 + 1  # a chunk each, 4 s past the first's GEMM


def test_float8_tensor_parallelism_pairs_its_8_bit_gathers_with_fp8_gemms() -> None:
    """torchtitan's Float8 tensor parallelism (tensorwise, AsyncTP as --tp-comm-overlap): the attention's and the
    MLP's inputs gathered in 8 bits (half the 16-bit bytes), o's and down's output gradients too, the reduce-scatters
    16-bit; every layer pair's GEMMs in fp8; the head, outside the plan (plain ColwiseParallel, a 16-bit gather),
    paired at the 16-bit rate (its GEMM, 2 M V h, outlasts its gather either way)."""
    est = estimate("llama-3-70b", framework="torchtitan", fp8="tensorwise", zero=3, dp=2, flash=True,
                   tp_comm_overlap=True, **{**KW, "recompute": "full"})
    _, pairs = _pairs(est)
    forward, backward, _ = pairs["layer"]
    assert [(b, fp8) for b, fp8, _ in forward] == [(HALF * L, True), (HALF * L, True), (HALF * L // 2, True),
                                                   (HALF * L // 2, True)]
    assert [(b, fp8) for b, fp8, _ in backward] == [(HALF * L // 2, True), (HALF * L // 2, True), (HALF * L, True),
                                                    (HALF * L, True)]
    assert [fp8 for _, fp8, _ in pairs["head"][0]] == [False]


def test_torchtitan_async_tp_fuses_what_the_pattern_matcher_finds() -> None:
    """torchtitan's AsyncTP (--framework torchtitan --tp-comm-overlap; tp_overlap's NOTE): fuse_matmul_reduce_scatter
    takes a reduce-scatter of one matmul's output only, and torchtitan's wq, wk, wv (and w1, w3) are separate
    linears, so the backward's reduce-scatters of their summed input gradients stay whole; only the compiled
    TransformerBlocks are fused, so the head's gather and reduce-scatter and the embedding's all-reduce stay whole;
    each fused reduce-scatter (o's and fc2's, forward and full recompute's rerun) sums its 8 stacked partials in a
    pass of its own: M h 16-bit values read, M h / 8 written, at the H100's streaming bandwidth.
    Each fused pair's GEMMs run as 8 mm's of an eighth of the tokens, one per rank's shard
    (_fused_all_gather_matmul_impl, _fused_matmul_reduce_scatter_impl), each at its shape's rate.
    By hand, per micro-batch: the forward's four pairs twice (full recompute), the backward's two gathers behind
    their data-gradient GEMMs, its two reduce-scatters whole (c/8 + 7c/8 = c), the head's two and the embedding's
    whole; the bytes over the unhidden run's: embedding 2 HALF, head 2 HALF, layers (4 + 4 + 4) HALF each."""
    kw = {**KW, "recompute": "full"}
    titan = dict(framework="torchtitan", zero=3, dp=2, flash=True)
    plain = step_time(estimate("llama-3-70b", **titan, **kw), "h100-sxm")
    est = estimate("llama-3-70b", tp_comm_overlap=True, **titan, **kw)
    whole = whole_model(est.model.graph(activation_dtype=est.options.dtype), est.options)
    forms = overlap_forms(whole, micro_pipeline=True)
    layer_back = [[len(g) for _, _, g in grp] for name, _, grp, _ in forms if name == "layer"]
    assert layer_back == [[1, 1, 0, 0]]  # o's and fc2's gathers fused; qkv's and gate/up's reduce-scatters whole
    assert all(not g for name, *groups in forms if name != "layer" for grp in groups for _, _, g in grp)
    per_byte = plain.tp_s / 4 / (4 * HALF + 12 * HALF * L)
    pair, forward = _pairs_of(per_byte, split="rows")  # each fused pair's GEMMs 8 mm's of 512 tokens
    backward = pair(HALF, _gemm(M // 8, H // 8, H, 8)) + pair(HALF, _gemm(M // 8, F // 8, H, 8)) + 2 * HALF * per_byte
    rest = 4 * HALF * per_byte  # the embedding's all-reduce (2 HALF), the head's gather and reduce-scatter
    # 2 row-parallel outputs (o, fc2) x 2 forwards x 80 layers x 4,096 x 8,192 values x 2 B x (1 + 1/8)
    sums = 2 * 2 * L * M * H * 2 * (1 + 1 / 8) / achievable_bandwidth(H100)
    assert step_time(est, "h100-sxm").tp_s == pytest.approx(4 * (L * (2 * forward + backward) + rest + sums),
                                                            rel=1e-9)


def test_stacked_partials_are_summed_in_the_runs_dtype() -> None:
    """AsyncTP's stacked partials are the row-parallel matmuls' outputs, in the run's activation dtype: under
    --dtype fp32, 4 bytes each, not 2. Llama 3 8B (h 4,096, 32 layers), b 1, s 4,096, t 8, no recompute, one stage:
    o's and fc2's outputs, 2 x 32 x 4,096 x 4,096 values x 4 B = 4,294,967,296 B per forward; the sum reads them
    whole and writes them over t: 4,294,967,296 x (1 + 1/8) = 4,831,838,208 B at the H100's streaming bandwidth."""
    est = estimate("llama-3-8b", mode="train", batch=1, seq=4096, tp=8, sp=True, dtype="fp32", framework="torchtitan",
                   zero=3, dp=2, flash=True, tp_comm_overlap=True)
    whole = whole_model(est.model.graph(activation_dtype=est.options.dtype), est.options)
    assert layout_int(reduced_partials(whole), est.values) == 4_294_967_296
    assert _stacked_sum_s(whole, est.values, 0, 8, 1, 1, H100) == pytest.approx(
        4_831_838_208 / achievable_bandwidth(H100), rel=1e-12)
    # TE's ring-exchanged reduce-scatter (split_overlap_rs P2P: reduce_bf16 over the t received chunks) sums the
    # same way, for the linears whose forward it runs: fc2's alone is half of the two (o's and fc2's outputs are h wide)
    assert layout_int(reduced_partials(whole, names=("fc2",)), est.values) == 4_294_967_296 // 2
    assert _stacked_sum_s(whole, est.values, 0, 8, 1, 1, H100, ("fc2",)) == pytest.approx(
        4_831_838_208 / 2 / achievable_bandwidth(H100), rel=1e-12)


def test_async_tp_is_decided_once() -> None:
    """--tp-comm-overlap is PyTorch's AsyncTP under torchtitan only (Megatron-LM's is TE's userbuffers): one
    property of the options, read by the time (the stacked partials' sum) and by the note that names it."""
    titan = estimate("llama-3-8b", framework="torchtitan", zero=3, dp=2, flash=True, tp_comm_overlap=True, **KW)
    megatron = estimate("llama-3-8b", framework="megatron", tp_comm_overlap=True, **KW)
    assert (titan.options.async_tp, megatron.options.async_tp) == (True, False)
    for est, named in ((titan, True), (megatron, False)):
        step = step_time(est, "h100-sxm")
        assert step.async_tp is named and ("AsyncTP" in " ".join(step.model())) is named


# Llama 3 70B, b 1, s 4,096, t 8, no recompute, one micro-batch on one stage, under Megatron-Core's userbuffers
MARGIN_KW = dict(mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="none", framework="megatron", flash=True,
                 tp_comm_overlap=True)


def _per_byte(model: object, layers: int, h: int, **kw: object) -> float:
    """Seconds a byte of a one-micro-batch run's TP transfers, unhidden: its tp_s without --tp-comm-overlap over its
    bytes, 8 ring halves of b s h 16-bit values a layer (b s h 2 B / 2 each) and 4 outside (the embedding's
    all-reduce, the head's gather and reduce-scatter), as test_pairs_of_a_llama_layer_by_hand counts them."""
    plain = step_time(estimate(model, **{**kw, "tp_comm_overlap": False}), "h100-sxm")
    return plain.tp_s / ((8 * layers + 4) * kw["batch"] * kw["seq"] * h)


def _busy(n: int, transfer: float, gemm: float) -> float:
    """Seconds a GEMM of ``gemm`` seconds loses to a communication kernel on ``n`` of the H100's 132 SMs without
    set_sm_margin: only while its ``transfer`` runs: n/132 of the GEMM's rate for the transfer's time, or the GEMM
    on 132 - n throughout if it ends first, min(GEMM x n / (132 - n), transfer x n / 132)."""
    return min(gemm * n / (132 - n), transfer * n / 132)


def test_userbuffers_sm_margin_slows_the_gemms_it_shares_the_gpu_with() -> None:
    """Transformer Engine's default userbuffers (v2.9 get_default_config; comm_gemm_overlap.cpp ``_math_sms =
    sm_count - num_comm_sm`` where set_sm_margin) take 16 of the H100's 132 SMs from six GEMMs of a layer: o's and
    fc2's forward (pipelined reduce-scatters), qkv's and gate/up's data gradients and weight gradients (bulk); each
    runs 132/116 as long (its rate proportional to its SMs: the model's assumption), 16/116 of its time more.
    One layer by hand, per-GPU shapes at the H100's measured bf16 rate: o forward (4,096, 8,192, 1,024) =
    2 x 4,096 x 8,192 x 1,024 = 68,719,476,736 FLOPs; fc2 forward (4,096, 8,192, 3,584); qkv's data gradient
    (4,096, 8,192, 1,280) and weight gradient (1,280, 8,192, 4,096); gate and up, two each, (4,096, 8,192, 3,584)
    and (3,584, 8,192, 4,096); the sum times 16/116, times 80 layers. The ring-exchanged GEMMs (qkv and gate/up
    forward, o's and fc2's data gradients: 1 SM, no margin, the copy engine copying) and o's and fc2's weight
    gradients (no userbuffers) and the head keep every SM."""
    step = step_time(estimate("llama-3-70b", **MARGIN_KW), "h100-sxm")
    o_forward = _gemm(M, H // 4, H // 8, 4)  # pipelined: 4 GEMMs of a quarter of o's output features
    assert 4 * 2 * M * (H // 4) * (H // 8) == 68_719_476_736
    layer = (o_forward + _gemm(M, H // 4, F // 8, 4) + _gemm(M, H, QKV // 8) + _gemm(QKV // 8, H, M)
             + _gemm(M, H, F // 8, 2) + _gemm(F // 8, H, M, 2))
    assert step.ub_margin_s == pytest.approx(L * layer * 16 / 116, rel=1e-9)
    assert o_forward * 16 / 116 == pytest.approx(o_forward * 132 / 116 - o_forward)  # one GEMM's added seconds
    # a Megatron-Bridge config: o's forward (24 SMs) and fc2's (16) with the margin; its bulk overlaps without one
    # (qkv_dgrad 4, qkv_wgrad 24, fc1_dgrad 2, fc1_wgrad 4) only while the transfer runs; the time is in compute_s
    bridge = step_time(estimate("llama-3-70b", tp_comm_overlap_cfg="userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192",
                                **MARGIN_KW), "h100-sxm")
    c = HALF * _per_byte("llama-3-70b", L, H, **MARGIN_KW)
    bulk = (_busy(4, c, _gemm(M, H, QKV // 8)) + _busy(24, c, _gemm(QKV // 8, H, M))
            + _busy(2, c, _gemm(M, H, F // 8, 2)) + _busy(4, c, _gemm(F // 8, H, M, 2)))
    fc2_forward = _gemm(M, H // 4, F // 8, 4)
    assert bridge.ub_margin_s == pytest.approx(L * (o_forward * 24 / 108 + fc2_forward * 16 / 116 + bulk), rel=1e-9)
    assert step.compute_s - step.ub_margin_s == pytest.approx(bridge.compute_s - bridge.ub_margin_s, rel=1e-12)
    assert "16 of 132" in " ".join(step.model())


def test_userbuffers_run_their_gemms_in_parts() -> None:
    """Transformer Engine runs an overlapped GEMM in parts (comm_gemm_overlap.cpp, read at 015939ab):
    CommOverlapP2PBase::split_overlap_ag, a ring exchange, one cuBLAS GEMM per rank's chunk of the gathered tokens
    (``n_chunk``: M/t rows); CommOverlapBase::split_overlap_rs, a pipelined reduce-scatter, one per num_splits (4)
    chunk of the weight's output rows (``m_chunk = m / _num_splits``). Each part runs at the measured rate of its own
    shape, so a part of few rows runs slower than the whole product. Llama 3 70B, t 8, one micro-batch of 4,096
    tokens, TE's defaults, per layer: q k v's forward as 8 GEMMs (512, 1,280, 8,192), gate's and up's 8 each
    (512, 3,584, 8,192), o's and fc2's data gradients 8 each (512, 1,024, 8,192) and (512, 3,584, 8,192); o's
    forward 4 GEMMs (4,096, 2,048, 1,024), fc2's 4 (4,096, 2,048, 3,584); each less the whole product's seconds;
    80 layers. The bulk overlaps (q k v's and gate/up's data and weight gradients) run whole. A B200 (no SM count:
    no margin timed) still times the parts."""
    step = step_time(estimate("llama-3-70b", **MARGIN_KW), "h100-sxm")
    parts = (_gemm(M // 8, QKV // 8, H, 8) - _gemm(M, QKV // 8, H)
             + _gemm(M // 8, F // 8, H, 16) - _gemm(M, F // 8, H, 2)
             + _gemm(M // 8, H // 8, H, 8) - _gemm(M, H // 8, H)
             + _gemm(M // 8, F // 8, H, 8) - _gemm(M, F // 8, H)
             + _gemm(M, H // 4, H // 8, 4) - _gemm(M, H, H // 8)
             + _gemm(M, H // 4, F // 8, 4) - _gemm(M, H, F // 8))
    assert step.ub_split_s == pytest.approx(L * parts, rel=1e-9) and parts > 0
    # 8 x 2 x 512 x 1,280 x 8,192 = 2 x 4,096 x 1,280 x 8,192: the same FLOPs, at (512, 1,280, 8,192)'s slower rate
    assert matmul_rate(H100, "bf16", 512, 1280, 8192) < matmul_rate(H100, "bf16", 4096, 1280, 8192)
    assert "each overlap runs its GEMM in parts" in " ".join(step.model())
    b200 = step_time(estimate("llama-3-70b", **MARGIN_KW), "b200")
    assert b200.ub_margin_s == 0 < b200.ub_split_s
    # Megatron-Bridge's fp8 config runs o's and fc2's forward reduce-scatters as ring exchanges (1 SM, the margin):
    # 8 GEMMs of 512 tokens each, and each rank sums the 8 chunks it receives (RING_REDUCE, in the TP time)
    ring = step_time(estimate("llama-3-70b", tp_comm_overlap_cfg="userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192",
                              **MARGIN_KW), "h100-sxm")
    ring_parts = parts - (_gemm(M, H // 4, H // 8, 4) - _gemm(M, H, H // 8) + _gemm(M, H // 4, F // 8, 4)
                          - _gemm(M, H, F // 8)) + (_gemm(M // 8, H, H // 8, 8) - _gemm(M, H, H // 8)
                                                    + _gemm(M // 8, H, F // 8, 8) - _gemm(M, H, F // 8))
    assert ring.ub_split_s == pytest.approx(L * ring_parts, rel=1e-9)
    assert "proj_fprop and fc2_fprop reduce-scatter by ring exchange" in " ".join(ring.model())


def test_the_ring_exchanges_sum_is_in_the_tp_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fp8 config's ring-exchanged reduce-scatters (o's and fc2's forward) add their sum pass to the TP time:
    without it the TP time is less by exactly ``_stacked_sum_s`` of the two linears (hand-checked in
    test_stacked_partials_are_summed_in_the_runs_dtype), one micro-batch. Aggregated rings run t/2 GEMMs of two
    chunks: the 405B's launcher yaml at TP 8, 4 GEMMs of 1,024 tokens."""
    est = estimate("llama-3-70b", tp_comm_overlap_cfg="userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192", **MARGIN_KW)
    whole = whole_model(est.model.graph(activation_dtype=est.options.dtype), est.options)
    summed = _stacked_sum_s(whole, est.values, 0, 8, 1, 1, H100, ("proj", "fc2"))
    with_sum = step_time(est, "h100-sxm").tp_s
    monkeypatch.setattr(timing, "_stacked_sum_s", lambda *args: 0.0)
    assert with_sum - step_time(est, "h100-sxm").tp_s == pytest.approx(summed, rel=1e-9) and summed > 0
    monkeypatch.undo()
    plain = step_time(estimate("llama-3-70b", **MARGIN_KW), "h100-sxm")
    aggregated = step_time(estimate("llama-3-70b", tp_comm_overlap_cfg="ub_cfg_h100_bf16_h16384_tp8_cp2_mbs1_seqlen8192",
                                    **MARGIN_KW), "h100-sxm")
    rings = (_gemm(M // 8, QKV // 8, H, 8) - _gemm(M // 4, QKV // 8, H, 4) + _gemm(M // 8, F // 8, H, 16)
             - _gemm(M // 4, F // 8, H, 8) + _gemm(M // 8, H // 8, H, 8) - _gemm(M // 4, H // 8, H, 4)
             + _gemm(M // 8, F // 8, H, 8) - _gemm(M // 4, F // 8, H, 4))  # 8 parts of 512 against 4 of 1,024
    assert plain.ub_split_s - aggregated.ub_split_s == pytest.approx(L * rings, rel=1e-9)


def test_no_sm_margin_without_an_sm_count_or_under_async_tp() -> None:
    """A GPU without an SM count in the table (B200: no NVIDIA datasheet read gives its shipping count) times no
    margin and says so; torchtitan's AsyncTP (PyTorch's symmetric-memory kernels, not userbuffers) has none."""
    b200 = step_time(estimate("llama-3-70b", fp8="te-current", **MARGIN_KW), "b200")
    assert b200.ub_margin_s == 0 and "not timed: no SM count for the b200" in " ".join(b200.model())
    titan = step_time(estimate("llama-3-8b", framework="torchtitan", zero=3, dp=2, flash=True, tp_comm_overlap=True,
                               **KW), "h100-sxm")
    assert titan.ub_margin_s == 0 and "userbuffers take SMs" not in " ".join(titan.model())


def test_a_communication_kernel_without_the_margin_takes_its_sms_while_it_runs() -> None:
    """TE 1.8.0.dev0 (7d576ed2, NeMo 24.07's) ``add_ub(..., num_sm: int = 16, ..., set_sm_margin: int = 0)`` for
    every GEMM no config names: no GEMM is launched on fewer SMs, but each bulk and pipelined overlap launches its
    userbuffers kernel on 16 CTAs on a stream of its own (comm_gemm_overlap.h L88-89 ``use_ce = 0; comm_sms =
    num_comm_sm``), which hold 16 of the H100's 132 SMs while the transfer runs; the ring exchanges copy with the copy
    engine (L566-567 ``use_ce = 1``): none. Llama 3 70B, t 8, one micro-batch: each transfer of 4,096 x 8,192 16-bit
    values (HALF bytes) at the unhidden run's seconds a byte; per layer o's forward (shorter than its transfer: all its
    time), fc2's (longer: the transfer's), qkv's data gradient, its weight gradient, gate and up's two data
    gradients and two weight gradients (longer), each min(GEMM x 16/116, transfer x 16/132) more, 80 layers."""
    v1 = step_time(estimate("llama-3-70b", tp_comm_overlap_cfg="te_v1", **MARGIN_KW), "h100-sxm")
    c = HALF * _per_byte("llama-3-70b", L, H, **MARGIN_KW)
    o, fc2 = _gemm(M, H // 4, H // 8, 4), _gemm(M, H // 4, F // 8, 4)  # pipelined: 4 GEMMs each
    assert o * 132 / 116 < c < fc2  # both sides of the min: o ends before its transfer, fc2 outlasts it
    layer = sum(_busy(16, c, g) for g in (o, fc2, _gemm(M, H, QKV // 8), _gemm(QKV // 8, H, M), _gemm(M, H, F // 8, 2),
                                          _gemm(F // 8, H, M, 2)))
    assert v1.ub_margin_s == pytest.approx(L * layer, rel=1e-9)
    assert v1.ub_margin_s < step_time(estimate("llama-3-70b", **MARGIN_KW), "h100-sxm").ub_margin_s  # te: 16 all along
    assert ("te_v1: qkv_dgrad 16, qkv_wgrad 16, fc1_dgrad 16, fc1_wgrad 16, proj_fprop 16, fc2_fprop 16 of 132 while "
            "its transfer runs") in " ".join(v1.model())


def test_te_1x_defaults_and_the_launchers_175b_yaml_at_24_07() -> None:
    """NeMo-Framework-Launcher tag 24.07 (8325688d), launcher_scripts/conf/training/tp_overlap/
    ub_cfg_h100_h12288_tp4_mbs1_seqlen2048.yaml, read by hand: L47-59 proj_fprop pipeline num_sm 24, fc2_fprop
    pipeline num_sm 20, both set_sm_margin 1: on GPT-3 175B (h 12,288, t 4, b 1, s 2,048) o's forward (2,048,
    12,288, 3,072) 24/108 of its time more, fc2's (2,048, 12,288, 12,288) 20/112; L5-27 bulk qkv_dgrad 4, qkv_wgrad
    8, fc1_dgrad 2, fc1_wgrad 4, set_sm_margin 0: ``_busy`` each, the transfer 2,048 x 12,288
    16-bit values; 96 layers. 20b's ub_cfg_h100_h6144_tp2_mbs2_seqlen2048.yaml: L47-59 proj_fprop 16, fc2_fprop 24
    with the margin, L5-27 bulk 8, 16, 4, 16 without."""
    kw = dict(mode="train", batch=1, seq=2048, tp=4, sp=True, recompute="none", framework="megatron", flash=True,
              tp_comm_overlap=True)
    step = step_time(estimate("gpt3-175b", tp_comm_overlap_cfg="ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07", **kw),
                     "h100-sxm")
    assert step.ub_margin_s == pytest.approx(_gpt3_layers("gpt3-175b", 96, 12288, 4, (24, 20), (4, 8, 2, 4), **kw),
                                             rel=1e-9)
    assert "NeMo-Framework-Launcher" in " ".join(step.model())
    kw["tp"] = 2
    twenty = step_time(estimate(GPT3_20B, tp_comm_overlap_cfg="ub_cfg_h100_h6144_tp2_mbs2_seqlen2048", **kw),
                       "h100-sxm")
    assert twenty.ub_margin_s == pytest.approx(_gpt3_layers(GPT3_20B, 44, 6144, 2, (16, 24), (8, 16, 4, 16), **kw),
                                               rel=1e-9)


def _gpt3_layers(model: object, layers: int, h: int, t: int, margin: tuple[int, int], bulk: tuple[int, ...],
                 **kw: object) -> float:
    """Seconds a GPT-3 run's userbuffers add, by hand (b 1, s 2,048): o's and fc2's forward GEMMs, each run as 4
    GEMMs of a quarter of its output features (a pipelined reduce-scatter's num_splits), on 132 - n SMs
    (``margin``: their n, with set_sm_margin); qkv's (3h fused) and fc1's (4h) data- and weight-gradient GEMMs
    (``bulk``: qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad, without) ``_busy``, the transfer
    2,048 x h 16-bit values at the unhidden run's seconds a byte."""
    c = 2048 * h * _per_byte(model, layers, h, **kw)
    o, fc2 = _gemm(2048, h // 4, h // t, 4), _gemm(2048, h // 4, 4 * h // t, 4)  # pipelined: 4 GEMMs each
    gemms = (_gemm(2048, h, 3 * h // t), _gemm(3 * h // t, h, 2048), _gemm(2048, h, 4 * h // t),
             _gemm(4 * h // t, h, 2048))
    return layers * (o * margin[0] / (132 - margin[0]) + fc2 * margin[1] / (132 - margin[1])
                     + sum(_busy(n, c, g) for n, g in zip(bulk, gemms)))


def test_dgxc_gpt3_175b_runs_its_yamls_inline_userbuffers_config() -> None:
    """NVIDIA/dgxc-benchmarking's nemo_megatron/gpt3_175b_hydra.yaml (v25.01, 143b90dd91f9, L176-220), read by hand:
    qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad bulk with set_sm_margin 0 (4, 8, 2, 4 SMs, held while the transfer
    runs); qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad ring_exchange, no margin (the copy engine: none);
    proj_fprop pipeline num_sm 24 and fc2_fprop pipeline num_sm 20, each with set_sm_margin 1. One GPT-3 175B layer
    on an H100 (h 12,288, t 4, b 1, s 2,048) as the launcher's 24.07 yaml (``_gpt3_layers``); 96 layers. The note
    cites the yaml."""
    kw = dict(mode="train", batch=1, seq=2048, tp=4, sp=True, recompute="none", framework="megatron", flash=True,
              tp_comm_overlap=True)
    step = step_time(estimate("gpt3-175b", tp_comm_overlap_cfg="dgxc_gpt3_175b_hydra", **kw), "h100-sxm")
    assert step.ub_margin_s == pytest.approx(_gpt3_layers("gpt3-175b", 96, 12288, 4, (24, 20), (4, 8, 2, 4), **kw),
                                             rel=1e-9)
    assert ("dgxc_gpt3_175b_hydra: proj_fprop 24, fc2_fprop 20 of 132 with set_sm_margin; qkv_dgrad 4, qkv_wgrad 8, "
            "fc1_dgrad 2, fc1_wgrad 4 of 132 while its transfer runs") in " ".join(step.model())
    assert "DGX Cloud Benchmarking" in " ".join(step.model())


def test_a_userbuffers_config_needs_userbuffers(capsys: pytest.CaptureFixture[str]) -> None:
    """--tp-comm-overlap-cfg without --tp-comm-overlap (or under torchtitan), or a name no config has: one line, exit 2."""
    base = ["estimate", "--model", "llama-3-8b", "--mode", "train", "--batch", "1", "--seq", "8", "--tp", "2", "--sp"]
    cfg = ["--tp-comm-overlap-cfg", "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"]
    for args in (base + cfg, base + ["--tp-comm-overlap", "--tp-comm-overlap-cfg", "userbuffers_fp8_h100"]):
        try:
            code = main(args)
        except SystemExit as refused:  # argparse's own refusal of a choice
            code = refused.code
        assert code == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and "--tp-comm-overlap" in err
