"""Issue 39, mixture of experts: expert-parallel all-to-alls timed on the link they cross, and the published MoE
runs (``tests/published_runs.MOE``, held out, apart from the dense runs' bounds).

Measured (python benchmarks/published_runs.py, "Mixture of experts"): 58 runs, median |error| 20.0%, worst 66.8%,
40 within 25%, 51 too fast, with Megatron-Bridge's five Nemotron 3 Nano rows of 26.02.01 and 26.04.01 (the Mamba-2
hybrid, ``test_the_nemotron_3_nano_rows``: -18.9% to -37.0%); 53 runs, 18.8%, 39 within 25%, 46 too fast before them
(17.9%, 38 of 52 before the eager BF16 row of Bridge's CUDA-graph guide, the last paragraph), with the expert all-to-alls and sends inside a node at NCCL's per-link NVLink speed
(cluster.Cluster.peer: 370.8 GB/s of an H100's 450 each way, 721.8 of a B200's, GB200's, B300's or GB300's 900;
19.3% and 35 within 25% at the rated speed, 18.2% and 37 before the B300 and GB300 took NCCL's Blackwell row,
nccl_cost.NCCL_ARCH), with the H100, H200 and B200 at Bekman's MSMF table of 082816f (efficiency.MSMF; the
per-row figures below are from before it: Qwen3 30B-A3B p2 v12 ep8 H100 now -66.8%, ep16 H100 -34.9%, AutoModel's
FSDP8 +30.4%); worst 67.2% before, with Transformer Engine's amax all-reduces timed (quantities/te_amax.py; 19.4% before them) (18.1%, 65.3%, 36 before Megatron-Core's interleaved sends ran behind compute, overlap_p2p_comm; 51 runs, 18.3%, 65.3%, 35 within 25% before Kimi K2 under Megatron-Core's Muon, 26.06's GB300 row,
-6.9%, -7.1% before its Newton-Schulz time was the busiest rank's; 37 runs, 21.4%, 65.3%, 25 within 25% before Megatron-Bridge's 14 rows of 26.04.01, 26.06 and 26.08, the
last paragraph; 23.0%, 68.2%, 23 before Megatron-Core's copies of the routed rows were timed: the all-to-all
dispatcher's sort by local expert and back, memory_bound.LOCAL_SORT_MOVES, and TEGroupedMLP's fp8 padding,
FP8_PAD_MOVES; 23.2% and 68.3% earlier:
22.5% and 68.3% over the 22 before 26.02's fifteen GB200, B300, B200 and H100 rows, the last paragraph; 23.4% before NeMo AutoModel's gpt-oss-20b ran the full recompute its config set when its figure was published,
-24.0% to -2.1%, published_runs._AM_OSS20_RECOMPUTE; 24.2% before Bridge's gpt-oss-120b on B200 ran its recipe's
EP 64, published_runs._OSS_B200_EP; 23.4% before Bridge's gpt-oss-120b p4 on H100 ran its recipe's MBS 1, GA 32
(-17.6% to -29.6%, published_runs._OSS_H100_MBS); 20.6% before Megatron-Core's EP A2A overlap was timed on the three rows whose recipes set it, below; 28.0% over the 15 before Bridge's GB300 rows, 28.7% and 68.3% over 14, before the Qwen3-235B-A22B H100 row,
expressible with --etp 1; the same over the first 10, before Bridge's DeepSeek-V3 and Qwen3-235B-A22B rows; 30.7%
and 71.1% before
Megatron-Core's unfused passes of gpt-oss were timed, memory_bound.UNFUSED_MOVES: around the experts (clamp, fc2's
bias) and YaRN's rotary: Bridge's gpt-oss-120b p4 on H100 -31.3% to -20.2% to -17.6%, on B200 -71.1% to -68.0% to
-67.2%, EP 64 on GB200 -36.9% to -30.8% to -29.4%;
34.4% before each Transformer Engine fp8 linear ran at its own shape's fp8 rate and the GB200 at the B200's sustained
over burst ratio; 36.4% and 71.8% before Transformer Engine's fp8 quantization was timed, memory_bound.fp8_cast_bytes;
38.0% and 74.5% with the H100's and B200's matmuls at their burst MAMF and the memory-bound kernels at the rated
bandwidth, before efficiency.MSMF and memory_bound.achievable_bandwidth); NeMo AutoModel's three H100 FSDP2 + EP runs
(DeepEP) median 4.2%, worst 28.0% (Qwen3 30B-A3B +28.0%, gpt-oss-20b -2.1% with its config's full recompute, -24.0%
without, gpt-oss-120b EP 64 over 8 nodes -4.2%);
Megatron-LM's Mixtral 8x7B (MCore v0.8) -22.8%; Megatron-Bridge's eight gpt-oss and Qwen3 30B-A3B rows all predicted
too fast (15-68%; on GB300, the GB200's matmul fraction standing in, gpt-oss-120b ep64 -18.4%, Qwen3 30B-A3B
-14.8%), and its four DeepSeek-V3 and Qwen3-235B-A22B rows too (DeepSeek-V3 p4 v4 ep64 GB200 -14.6%, p16 ep8 B200
-41.7%; Qwen3-235B-A22B p8 v3 ep32 GB200 -11.7%, p8 v2 ep8 B200 -55.9%); Qwen3-235B-A22B t2 p8 v4 ep32 etp1
on H100 -24.4%. The three rows whose recipes set moe_a2a_overlap (Megatron-Core's EP A2A overlap, --moe-a2a-overlap,
quantities/a2a_overlap.py) before it was timed: Qwen3 30B-A3B p2 v24 ep8 H100 -59.1% (now -65.1%, its all-to-alls 1.60
s to 0.10 s exposed), Qwen3-235B-A22B B200 -48.6% (1.57 s to 0.14 s), H100 +5.6% (12.1 s of its 22.0 s predicted
were the expert all-to-alls over the network in series; 5.9 s of 15.7 s stay exposed). On GB300 (the GB200's
matmul fraction standing in for its unmeasured rate; no GB300 recipe sets the overlap) Qwen3-235B-A22B p4 v12 ep16
of 25.11 is predicted 8.5% too slow; 26.02's DeepSeek-V3 p2 v8 ep32 -7.7%, gpt-oss-120b ep64 MBS 4 -25.0%, Qwen3
30B-A3B ep8 MBS 8 -10.6%, Qwen3-235B-A22B p4 ep32 -10.2%.

26.02's other rows (Megatron-Bridge 0.3.0, held out as read, nothing tuned; published_runs.MOE's last fifteen), all
predicted too fast: DeepSeek-V3 p4 v4 ep64 GB200 -17.4%, p16 ep8 B300 -17.1% (the B200's matmul fraction standing in),
p16 ep8 B200 -25.1%; gpt-oss-120b ep64 MBS 4 GB200 -37.2%, B300 -20.8%, B200 -22.8%, p4 ep8 H100 -26.8%; Qwen3 30B-A3B
ep8 GB200 -23.2%, B300 -8.8%, B200 MBS 1 -66.9%, p2 v12 ep8 H100 -67.3%; Qwen3-235B-A22B p8 ep32 GB200 -21.8%, p8 v4
ep8 B300 -63.3%, p8 ep8 B200 -39.3%, t2 p8 v4 ep32 etp1 H100 at GBS 8,192 -24.4%.

Megatron-Bridge's newer releases (26.04.01: v0.4.2, 26.06: v0.5.0, 26.08: v0.6.0; each layout not above, the latest
figures that print it; held out as read, nothing tuned; published_runs.MOE's last fourteen), 10 of 14 within 25%:
DeepSeek-V3 p8 v2 ep32 B200 (DeepEP, moe_a2a_overlap) -10.6%, p8 ep8 MBS 2 B300 -7.7%, p2 v8 ep32 GB300 +14.9% at GBS
15,360 and +13.9% at 4,096 (full-iteration CUDA graphs, not modelled); gpt-oss-120b BF16 ep8 MBS 4 B200 -34.4%, B300
-32.0%, MXFP8 B300 -27.9%, MXFP8 ep64 GB200 -17.4%, MXFP8 ep16 GB300 -5.0%; Qwen3 30B-A3B ep8 MBS 4 B200 -7.5% (its
MBS 1 twin of 26.02 -66.9%), ep16 H100 MBS 1 over two nodes -35.4%; Qwen3-235B-A22B p8 ep8 MBS 2 B300 -8.9%, MXFP8 p8
v3 ep32 GB200 -8.1%, p4 v12 ep32 MBS 2 GB300 +12.2%.

Megatron-Bridge's CUDA-graph guide (docs/training/cuda-graphs.md, #3868) measured its Qwen3 30B-A3B H100 BF16
recipe eager, with the all-to-all dispatcher in place of HybridEP (EP 16 over two nodes, MBS 1, GBS 1,024): 41.36 s
a step, predicted 33.00 s, -20.2% (16.49 s of it the expert all-to-alls over the network). Its FP8 twin of 26.06
with HybridEP, timed as DeepEP, measured 29.70 s, predicted 19.34 s: the two runs differ by 11.7 s, the two
predictions by 13.7 s, so most of what both miss (8-10 s, about 3 ms per layer and micro-batch) is not the
dispatcher's traffic.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from fractions import Fraction
from math import prod

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.models.architectures import LLAMA, Moe
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.efficiency import gemm_products
from memderive.derivations.quantities.memory_bound import _elementwise_bytes, _fused_moves, layout_int
from memderive.derivations.quantities.timing import step_time
from memderive.derivations.search.plan import plan
from tests.published_runs import (_DSV3_OPTIMIZER, MOE, MOE_DROP_AND_PAD, NANO, NDR, OSS_120B, RUNS, faster_published,
                                  moe_memory, predict, same_job)

H100 = gpu("h100-sxm")
#: b s k h x 2 bytes per MoE layer, 36 layers: gpt-oss-120b, micro-batch 2 of 4,096 tokens, 4 experts per token,
#: h 2,880: 2 x 4096 x 4 x 2880 x 2 x 36 = 6,794,772,480 bytes one rank dispatches per micro-batch.
OSS_DISPATCHED = 2 * 4096 * 4 * 2880 * 2 * 36


def _oss_ep64(per_node: int, hw: str = "h100-sxm") -> float:
    est = estimate(OSS_120B, mode="train", batch=2, seq=4096, dp=64, ep=64, zero=3, micro_batches=4, flash=True)
    return step_time(est, Cluster(gpu(hw), per_node, NDR)).ep_s


def test_expert_parallelism_past_a_node_crosses_the_network() -> None:
    """EP 64 (t = 1) on 8-GPU nodes: a rank keeps 1/64 of what it sends, 7/64 goes to its node's GPUs over NVLink
    (NCCL's per-link speed, 370.8 GB/s each way: 7/64 x 6.79e9 / 370.8e9 = 2.00 ms) and 56/64 over its 50 GB/s port (0.875 x 6.79e9 / 50e9 =
    118.9 ms), at once: the port sets it. 4 all-to-alls (dispatch, combine, their gradients) x 4 micro-batches."""
    assert _oss_ep64(8) == pytest.approx(16 * 56 / 64 * OSS_DISPATCHED / 50e9)


def test_expert_parallelism_inside_an_nvlink_domain_stays_on_nvlink() -> None:
    """The same EP 64 on GB200 NVL72 (72 GPUs on one NVLink domain, 1.8 TB/s per GPU: 900 GB/s each way, 18 NVLink 5
    links at NCCL's per-link speed 40.1 GB/s of their 50: 721.8): 63/64 of the bytes over NVLink, none over the
    network: 16 x 63/64 x 6.79e9 / 721.8e9."""
    assert _oss_ep64(72, "gb200") == pytest.approx(16 * 63 / 64 * OSS_DISPATCHED / 721.8e9)


def test_expert_ranks_sit_tensor_parallel_degree_apart() -> None:
    """Megatron-Core's expert grid orders tp-ep-dp-pp: with t = 2 the 8 expert-parallel ranks are 2 apart, 4 in a
    node of 8, so the group spans 2 nodes. Each rank sends its s/t = 2,048 tokens (sequence parallelism) x k 2 x
    h 4,096 x 2 B x 32 layers = 536,870,912 B; 3/8 over NVLink (0.45 ms), 4/8 over the port (5.37 ms): 4 x
    0.5 x 536,870,912 / 50e9."""
    est = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, tp=2, sp=True, dp=8, ep=8)
    assert step_time(est, "h100-sxm").ep_s == pytest.approx(4 * 0.5 * 32 * 2048 * 2 * 4096 * 2 / 50e9)


def _missed(experts: int, top_k: int, held: int) -> Fraction:
    """The chance that none of a token's k distinct experts (uniform) is among ``held`` of E, as the product of
    k draws without replacement: prod (E - held - i)/(E - i)."""
    return prod((Fraction(experts - held - i, experts - i) for i in range(top_k)), start=Fraction(1))


def test_deepep_sends_a_token_once_per_gpu_that_holds_its_experts() -> None:
    """Qwen3 30B-A3B, EP 8 in one node, DeepEP: a token goes once to each other GPU holding one of its 8 experts (16 of
    128 per GPU): 7 x p copies, p = 1 - prod_(i<8) (112 - i)/(128 - i) = 0.6674, where Megatron's dispatcher sends
    k x 7/8 = 7. One copy per layer is b s h x 2 B = 4096 x 2048 x 2, 48 layers: 805,306,368 B; 4 all-to-alls over
    NVLink at NCCL's per-link speed, 18 x 20.6 = 370.8 GB/s each way of the rated 450."""
    p = 1 - _missed(128, 8, 16)
    est = estimate("qwen3-30b-a3b", mode="train", batch=1, seq=4096, dp=8, ep=8, moe_dispatcher="deepep")
    assert step_time(est, "h100-sxm").ep_s == pytest.approx(4 * 7 * float(p) * 805_306_368 / 370.8e9)
    plain = estimate("qwen3-30b-a3b", mode="train", batch=1, seq=4096, dp=8, ep=8)
    assert step_time(plain, "h100-sxm").ep_s == pytest.approx(4 * 7 * 805_306_368 / 370.8e9)


def test_deepep_across_nodes_sends_once_per_node() -> None:
    """gpt-oss-120b, EP 64 on 8-GPU nodes, DeepEP: over RDMA once to each other node holding one of the token's 4
    experts (16 of 128 per node): 7 x (1 - 112 x 111 x 110 x 109 / (128 x 127 x 126 x 125)) = 7 x 31,837/76,200 =
    2.92 copies over the 50 GB/s port; over NVLink 7 x 8 x (1 - 124 x 123/(128 x 127)) = 3.46 copies at 370.8 GB/s
    (NCCL's per-link speed), the faster. One copy: 2 x 4096 x 2880 x 2 B x 36 layers = 1,698,693,120 B; 4 all-to-alls x 4 micro-batches."""
    assert 1 - _missed(128, 4, 16) == Fraction(31837, 76200)
    est = estimate(OSS_120B, mode="train", batch=2, seq=4096, dp=64, ep=64, zero=3, micro_batches=4, flash=True,
                   moe_dispatcher="deepep")
    assert step_time(est, Cluster(H100, 8, NDR)).ep_s == pytest.approx(16 * 7 * 31837 / 76200 * 1_698_693_120 / 50e9)


def test_each_expert_gemm_is_timed_at_its_own_tokens() -> None:
    """Qwen3 30B-A3B, EP 8, micro-batch 1 of 4,096 tokens: a GPU computes b s k = 4096 x 8 = 32,768 token-expert rows
    (balanced routing) over its E/ep = 128/8 = 16 experts, 2,048 rows each: the fc1 GEMM runs as (2048, 1536, 2048),
    fc2 as (2048, 2048, 768), not as one (32768, ...) product (gemm_products took one expert for all the rows)."""
    est = estimate("qwen3-30b-a3b", mode="train", batch=1, seq=4096, dp=8, ep=8)
    rows = [[layout_int(x, est.values) for x in row[1:]] for row in gemm_products(est.graph) if row[0] == "linear"]
    experts = {(out, inn): (n, forward // (2 * out * inn * n)) for _, _, _, forward, out, inn, n in rows if n > 1}
    assert experts == {(1536, 2048): (16, 2048), (2048, 768): (16, 2048)}


#: 16 experts, 2 per token, h 64, 2 layers: b s k h x 2 B x 2 layers = 1 x 64 x 2 x 64 x 2 x 2 = 32,768 B.
WIDE_MOE = Model("wide-moe", replace(LLAMA, moe=Moe()), {"h": 64, "a": 4, "a_kv": 2, "l": 2, "V": 128, "f": 128,
                                                         "E": 16, "k": 2, "f_e": 64})


def test_the_experts_memory_bound_work_by_hand() -> None:
    """The MoE layers' elementwise HBM bytes (memory_bound.FUSED_MOVES, TOKEN_MOVES), one micro-batch of 1 x 64
    tokens, 2 layers: each expert's SwiGLU over (b, s, k, f_e) = 64 x 2 x 64 = 8,192 bf16 elements, 3 moves forward
    and 5 backward (131,072 B); each token-expert pair's h-vector permuted and scatter-added back, (b, s, k, h) =
    8,192 elements, 4 moves each way (131,072 B); the router's fp32 softmax over E = 16, 1,024 elements, 2 + 3 moves
    (20,480 B): 2 x 282,624 = 565,248 B. They were not timed before (no FUSED_MOVES entry for experts or router)."""
    est = estimate(WIDE_MOE, mode="train", batch=1, seq=64)
    moe = _elementwise_bytes(est.graph, lambda blk, op, f: _fused_moves(blk, op, f) if op.kind in ("experts", "router")
                             else None)
    assert layout_int(moe, est.values) == 2 * (8192 * 8 * 2 + 8192 * 8 * 2 + 1024 * 5 * 4)


def _planned_ep16(per_node: int) -> float:
    """The planner's step time for the layout d 16, ep 16, micro-batch 1, no ZeRO or recompute, on 16 H100s."""
    cluster = Cluster(H100, per_node, NDR)
    rows = plan(WIDE_MOE, 80 * 2**30, 16, 64, 16, options=Options(gpu="h100-sxm", dp=16, ep=16), top=10**6, cluster=cluster,
                recomputes=("none",), zeros=(0,))
    row = next(r for r in rows if (r.options.get("tp", 1), r.options.get("pp", 1), r.options["batch"],
                                    r.options.get("cp", 1)) == (1, 1, 1, 1))
    est = estimate(WIDE_MOE, **row.options)
    assert row.step_time_s == pytest.approx(step_time(est, cluster).step_s)  # the planner times what step_time does
    return step_time(est, cluster).ep_s


def test_the_planner_times_ep_past_a_node_on_the_network() -> None:
    """Pinned EP 16 on 8-GPU nodes: the planner's row is timed with 8/16 of each all-to-all over the 50 GB/s port
    (4 x 0.5 x 32,768 / 50e9), not 15/16 over NVLink as one 16-GPU node would (4 x 15/16 x 32,768 / 370.8e9, NCCL's
    per-link speed)."""
    assert _planned_ep16(8) == pytest.approx(4 * 0.5 * 32768 / 50e9)
    assert _planned_ep16(16) == pytest.approx(4 * 15 / 16 * 32768 / 370.8e9)


def test_planned_deepep_rows_equal_their_estimates() -> None:
    """The planner evaluates the layouts of one structure at once (columns of ep among them): each DeepEP row's step
    time equals step_time of its own estimate, ep from 1 to 16 across 8-GPU nodes."""
    cluster = Cluster(H100, 8, NDR)
    rows = plan(WIDE_MOE, 80 * 2**30, 16, 64, 16, options=Options(gpu="h100-sxm", moe_dispatcher="deepep"), top=10**6,
                cluster=cluster, recomputes=("none",), zeros=(0,))
    assert {r.options.get("ep", 1) for r in rows} == {1, 2, 4, 8, 16}
    for row in rows[::7]:
        assert row.step_time_s == pytest.approx(step_time(estimate(WIDE_MOE, **row.options), cluster).step_s)


def test_the_moe_runs_are_held_out_named_and_apart() -> None:
    assert len(MOE) >= 6 and all(r.held_out for r in MOE)
    assert not {id(r) for r in MOE} & {id(r) for r in RUNS}  # the dense runs' bounds do not hold them
    assert {r.source.split(" ")[0] for r in MOE} == {"NeMo", "Megatron-Bridge", "Megatron-LM"}
    assert all(r.layout.get("ep", 1) > 1 for r in MOE)


def test_the_token_drop_rows_are_the_dropless_layouts_without_the_sync() -> None:
    """``MOE_DROP_AND_PAD`` (NOTE(moe-host), tests/published_runs.py): Megatron-Bridge's 25.09 token-drop rows of the
    25.11 Qwen3 30B-A3B layouts, the same layout at FP8 current scaling, apart from ``MOE`` and the bounds, with the
    25.09 recipe's token drop: capacity factor 1 padded, the alltoall dispatcher (Megatron-Bridge v0.1.0rc3
    scripts/performance/run_script.py L102, moe_token_drop.py L18-22 defaults; ``_TOKEN_DROP``) and without the
    EP A2A overlap the 25.11 H100 row sets (25.09 sets it for DeepSeek-V3 alone, run_script.py L79-86; off by
    default, training/comm_overlap.py L432-439: ``_NO_A2A_OVERLAP``). B200 by
    hand: 512 x 4,096 tokens / (18,066 tokens/s x 8 GPUs) = 2,097,152 / 144,528 = 14.5104 s a step; over 64
    micro-batches x 48 layers, 4.7234 ms per layer and micro-batch. The dropless 25.11 row: 2,097,152 / (9,299 x 8)
    = 28.1906 s, 9.1766 ms."""
    assert len(MOE_DROP_AND_PAD) == 3 and all(r.held_out for r in MOE_DROP_AND_PAD)
    assert not {id(r) for r in MOE_DROP_AND_PAD} & {id(r) for r in MOE + RUNS}
    recipe = {"fp8", "capacity_factor", "moe_dispatcher", "moe_a2a_overlap"}
    assert [r.gpu for r in MOE if r.layout.get("moe_a2a_overlap") and "Qwen3 30B-A3B p2 v24" in r.name] == ["h100-sxm"]
    assert not any(r.layout.get("moe_a2a_overlap") for r in MOE_DROP_AND_PAD)
    for run in MOE_DROP_AND_PAD:
        twin = next(r for r in MOE if r.name == run.name.replace("Qwen3 30B tokendrop", "Qwen3 30B-A3B"))
        assert {k: v for k, v in run.layout.items() if k not in recipe} == {
            k: v for k, v in twin.layout.items() if k not in recipe}
        assert (run.layout["fp8"], run.gpu, run.seq, run.gpus_per_node) == ("te-current", twin.gpu, twin.seq,
                                                                            twin.gpus_per_node)
        options = run.estimate().options
        assert (float(options.capacity_factor), options.moe_dispatcher, run.assumed) == (1.0, "alltoall", "")
    b200 = next(r for r in MOE_DROP_AND_PAD if r.gpu == "b200")
    dropless = next(r for r in MOE if r.name == "Qwen3 30B-A3B ep8 B200")
    assert b200.measured() == pytest.approx(14.5104, abs=1e-4)
    assert b200.measured() / (64 * 48) == pytest.approx(4.7234e-3, abs=1e-7)
    assert dropless.measured() / (64 * 48) == pytest.approx(9.1766e-3, abs=1e-7)


def test_automodels_rows_run_the_configs_that_published_their_figures() -> None:
    """NeMo AutoModel's three rows run the activation checkpointing of the configs in the tree that published their
    figures (NVIDIA-NeMo/Automodel 89e3a9fdd and 8d9bfb90e, examples/benchmark/configs L59: qwen3_moe_30b true,
    gptoss_20b true, gptoss_120b false; gptoss_20b's turned false only in 8df18da35, its 10.04 s unchanged), and the
    gpt-oss rows say their FlexAttention (attn: flex) is timed as flash (``_AM_FLEX``)."""
    rows = {r.name: r for r in MOE if r.source.startswith("NeMo AutoModel")}
    assert {n: r.estimate().options.recompute for n, r in rows.items()} == {
        "Qwen3 30B-A3B FSDP8 ep8": "full", "gpt-oss-20b FSDP8 ep8": "full", "gpt-oss-120b FSDP64 ep64": "none"}
    assert [("FlexAttention" in r.assumed) for r in rows.values()] == [False, True, True]


def test_the_moe_errors_do_not_grow() -> None:
    """Measured: 58 runs, median |error| 20.0%, worst 66.8% (module docstring; 18.8% over the 53 before the Nemotron 3
    Nano rows, 17.9% over the 52 before the eager row;
    19.3% with NVLink at its rated speed;
    67.2% before Bekman's MSMF of 082816f;
    19.4% before TE's amax all-reduces; 18.1% and 65.3% with exposed sends; 21.4% and 65.3% over the 37 before
    26.04.01's, 26.06's and 26.08's rows; 22.5% and 68.3% over the 22 before 26.02's GB200, B300, B200 and H100 rows);
    a guard on the figures reported, not a
    bound the issue accepts (that is the xfail below)."""
    errors = [abs(predict(r).error) for r in MOE]
    assert statistics.median(errors) <= 0.39 and max(errors) <= 0.75


@pytest.mark.xfail(strict=True, reason="issue 39's bounds (median 10%, every run within 25%); measured 20.0% / 66.8%: "
                   "Megatron-Bridge's MoE runs are all but two predicted too fast")
def test_the_moe_runs_meet_issue_39s_bounds() -> None:
    errors = [abs(predict(r).error) for r in MOE]
    assert statistics.median(errors) <= 0.10 and max(errors) <= 0.25


def test_each_moe_layout_fits_or_names_what_is_assumed() -> None:
    """Issue 39 item 4: a published layout that ran fits memderive's device bytes, or the output names what memderive
    assumed that the run did not do. With the routed experts saved as Megatron-Core saves them
    (symbolic/mcore_experts.py; before: transformers' eager loop, 4 of 10 fit) and Bridge's gradients in bf16 as its
    recipes set them (grad_reduce_in_fp32 False; before: Megatron-LM's fp32 main_grad, 7 of 10 fit), measured: 9 of 10
    fit (AutoModel's three, Megatron's Mixtral 8x7B, Bridge's Qwen3 on 8 B200s and on GB200, gpt-oss-120b on B200
    (167.8 of 180 GiB; was 198.4) and EP 64 on GB200); Bridge's gpt-oss-120b p4 on H100 (110.6 GiB) stays over. Since
    the H100 row runs its recipe's MBS 1, GA 32 (published_runs._OSS_H100_MBS; the page's MBS 4, GA 2 do not
    multiply out to its GBS), it fits: 55.4 of 80 GiB (activations 18.4, model states 37.0). Since gpt-oss's clamped
    copy of fc1's output is counted under --framework megatron (Megatron-Core's eager clamp before the fused
    quick-GeGLU, symbolic/mcore_experts.py: 4 f_e k bytes per token and layer more): the H100 row 61.7 of 80 GiB (at
    MBS 4 it would be 135.9: activations 98.9, model states 37.0); gpt-oss-120b on B200 over, 193.1 of 180 GiB
    (activations 111.3, model states 81.7 at the page's EP 8; the recipe's B200 config says EP 64, Megatron-Bridge
    v0.2.0 gpt_oss/workload_base_configs.py L50-55, at which memderive gives 146.3: the row now runs it,
    published_runs._OSS_B200_EP, and fits); EP 64 on GB200 78.0 to 90.7, the GB300 rows 121.0 to 146.3. Qwen3
    30B-A3B p2 v24 on H100 now fits, barely: 85,871,885,692 of 85,899,345,920 B (was 87,448,944,184, 81.4 GiB; its
    linear_proj saves the attention's own 16-bit output under current scaling, set_save_original_input, not an 8-bit
    copy: 16,777,220 B per layer and micro-batch held, 94 of them on the first stage). Recompute none is what the
    25.11 recipes ran (``published_runs.BRIDGE_RECOMPUTE``:
    gpt-oss-120b's recompute_modules layernorm, moe_act were inert without recompute_granularity 'selective'); with
    those modules (--recompute-modules) the H100 gpt-oss layout at MBS 4 would still have been over: 95.2 GiB.
    Bridge's DeepSeek-V3 and
    Qwen3-235B-A22B rows fit too: 14 of 15 (DeepSeek-V3 p4 v4 ep64 on GB200 130.2 of 186 GiB, p16 ep8 on B200 129.9 of
    180 with the recipe's precision-aware optimizer, --precision-aware-optimizer --moments bf16; 143.5 and 140.6 with
    the bf16 moments counted in fp32 before; Qwen3-235B-A22B p8 v3 ep32 on GB200 116.4 of 186, p8 v2 ep8 on B200
    173.1 of 180; t2 p8 v4 ep32 etp1 on H100 64.6 of 80). Bridge's GB300 rows: 6 of 7 fit (25.11: gpt-oss-120b ep64
    121.0 of 288 GiB, Qwen3 30B-A3B ep8 162.0, Qwen3-235B-A22B p4 v12 ep16 198.3; 26.02: gpt-oss-120b ep64 MBS 4
    121.0, Qwen3 30B-A3B ep8 MBS 8 253.3, Qwen3-235B-A22B p4 ep32 186.4); 26.02's DeepSeek-V3 p2 v8 ep32 fits, 284.5
    of 288 GiB, with its recipe's precision-aware optimizer (``published_runs._DSV3_OPTIMIZER``: bf16 moments 2 + 2
    and, under MXFP8, Megatron-Core's fp32 main params 4 over the 4 expert data-parallel ranks, where fp32 moments
    and main params counted 12: 294.3 GiB, over). Bridge's BF16 rows all run the precision-aware optimizer (the
    performance scripts' override, ``published_runs.BRIDGE_BF16_OPTIMIZER``): the main params 2 bytes per parameter
    over the ranks that shard them where fp32 ones counted 4 (gpt-oss-120b p4 ep8 H100 61.7 to 58.3 GiB, ep64 B200
    146.3 to 142.9, ep64 GB200 90.7 to 87.3, the GB300 rows 146.3 to 142.9; Qwen3-235B-A22B p8 v3 ep32 GB200 116.4 to
    114.7, p4 v12 ep16 GB300 198.3 to 196.6). Since the Bridge fp8 rows hold their linear weights as Transformer Engine
    fp8 tensors, as every Bridge fp8 recipe sets (--fp8-param-gather, ``published_runs._FP8_PARAMS``: no 16-bit copy
    of them), the fp8 rows hold less: DeepSeek-V3 p2 v8 ep32 GB300 284.5 to 249.7 GiB, Qwen3 30B-A3B p2 v24 on H100
    80.0 to 75.8. 26.02's fifteen rows on GB200, B300, B200 and H100 all fit (GiB of 186, 288, 180, 80:
    DeepSeek-V3 GB200 131.2, B300 117.7, B200 117.7; gpt-oss-120b GB200 103.0, B300 142.9 (no recompute_modules in its
    config), B200 103.0, H100 48.3; Qwen3 30B-A3B GB200 153.5, B300 244.9, B200 85.0, H100 52.9; Qwen3-235B-A22B GB200
    92.3, B300 120.8, B200 101.7, H100 62.1) (python benchmarks/published_runs.py). The 14 rows of 26.04.01, 26.06 and
    26.08 all fit too: DeepSeek-V3 B200 116.4 of 180, B300 174.5 of 288, GB300 189.0 (both GBS); gpt-oss-120b B200
    149.7, B300 189.7 (BF16) and 180.2 (MXFP8), GB200 132.7 of 186, GB300 153.1; Qwen3 30B-A3B B200 137.5, H100 52.5 of
    80; Qwen3-235B-A22B B300 146.5, GB200 95.4, GB300 156.1."""
    over = []
    for run in MOE:
        need, capacity, assumed = moe_memory(run)
        assert (need <= capacity) == (assumed == "")
        if assumed:
            over.append(run.name)
            assert "eager loop" not in assumed and ("with them" in assumed) == bool(run.inert_modules)
            if run.layout["recompute"] == "none":
                assert "recompute none, as the 25.11 recipe ran" in assumed
            else:
                assert "1F1B keeps 2 micro-batches' activations" in assumed
    assert over == []
    assert all(r.layout.items() >= _DSV3_OPTIMIZER.items() for r in MOE if r.model == "deepseek-v3")


def test_a_published_layout_its_own_authors_beat_is_named() -> None:
    # Megatron-Bridge's page, 64 B200s, GBS 1280, MBS 4, sequence 4096, bf16: 26.02 at EP 64, 8,047 tokens/s/GPU:
    # 1280 x 4096 / (8047 x 64) = 10.18 s; 26.04.01 at EP 8, 13,568: 1280 x 4096 / (13568 x 64) = 6.04 s, 1.69x faster
    runs = {r.name: r for r in RUNS + MOE}
    slow, fast = runs["gpt-oss-120b ep64 b4 B200"], runs["gpt-oss-120b ep8 b4 B200"]
    assert faster_published(slow, RUNS + MOE) is fast
    assert faster_published(fast, RUNS + MOE) is None
    # Korthikanti et al.'s full recompute (18.13 s) beside their selective (13.75 s): the recipe differs, not the job
    assert not same_job(runs["175B t8 p8 full"], runs["175B t8 p8 sp+sel"])
    assert faster_published(runs["175B t8 p8 full"], RUNS + MOE) is None


def test_the_eager_bf16_step_of_bridges_cuda_graph_guide() -> None:
    """Megatron-Bridge docs/training/cuda-graphs.md (#3868): Qwen3 30B-A3B, H100 BF16, 2 nodes x 8 GPUs, EP 16, MBS 1,
    GBS 1,024, the all-to-all dispatcher, eager iterations 5-8 averaging 41.36 s. By hand: 1,024 / (1 x 16) = 64
    micro-batches of 4,096 tokens on each GPU; within issue 39's 25% (predicted 33.00 s, -20.2%)."""
    run = next(r for r in MOE if "eager" in r.name)
    assert (run.gpus, run.global_batch, run.layout["micro_batches"], run.seq) == (16, 1024, 64, 4096)
    assert run.layout["moe_dispatcher"] == "alltoall" and run.layout["ep"] == 16 and "fp8" not in run.layout
    p = predict(run)
    assert p.measured_s == 41.36 and -0.25 <= p.error < 0
    # its EP 16 was chosen for the recipe's HybridEP, not for the dispatcher the guide ran: the one run the planner
    # comparison lists apart (benchmarks/published_runs.py --plan: 1.536x, the planner's EP 8 inside a node)
    assert [r.name for r in RUNS + MOE if r.layout_chosen_for] == [run.name] and "HybridEP" in run.layout_chosen_for


def test_the_nemotron_3_nano_rows() -> None:
    """Megatron-Bridge's Nemotron 3 Nano rows of 26.02.01 and the B200's of 26.04.01 (``published_runs.NANO``): the
    hybrid's own graph
    (Mamba-2, MoE and attention layers, ``symbolic.mamba``), its recipe's layout, held out. By hand from the page:
    GB300, 512 x 8,192 tokens / (37,664 tokens/s x 8 GPUs) = 4,194,304 / 301,312 = 13.9201 s a step; H100, 1,024 x
    8,192 / (14,890 x 16) = 8,388,608 / 238,240 = 35.2107 s. memderive's model FLOPs agree with the page's TFLOP/s
    (Megatron-Bridge's own count of the hybrid) within 2%: measured MFU 33.2% against the page's 839 / 2,500 = 33.6%
    on GB300. Predicted (measured): -30.1% GB300, -37.0% GB200, -30.4% B300, -18.9% H100, -36.9% B200, too fast as
    the other Megatron-Bridge MoE rows; every layout fits (GB300 188.5 of 288 GiB, H100 59.4 of 80)."""
    rows = {r.name: r for r in NANO}
    assert len(rows) == 5 and all(r in MOE and r.held_out for r in NANO)
    assert rows["Nemotron 3 Nano ep8 b4 mxfp8 GB300"].measured() == pytest.approx(13.9201, abs=1e-4)
    assert rows["Nemotron 3 Nano ep8 b1 fp8cs H100"].measured() == pytest.approx(35.2107, abs=1e-4)
    gb300 = rows["Nemotron 3 Nano ep8 b4 mxfp8 GB300"]
    assert gb300.measured_mfu() == pytest.approx(839 / 2500, rel=0.02)
    est = gb300.estimate()
    assert est.model.arch.hybrid is not None and est.options.moe_dispatcher == "deepep"
    assert {k: est.model.sizes[k] for k in ("l_m", "l_e", "l_a")} == {"l_m": 23, "l_e": 23, "l_a": 6}
    for run in NANO:
        assert -0.40 < predict(run).error < 0
        assert run.estimate().number("total_bytes") <= gpu(run.gpu).memory_bytes
