"""The cluster as options (--gpus-per-node, --inter-node-bandwidth, --intra-node-link), expert-parallel all-to-alls,
the MoE layer's tensor-parallel traffic and MLA's replicated down-projections under sequence parallelism, each
against arithmetic written out here."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.options import Options
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.compute import whole_model
from memderive.derivations.quantities.timing import cluster_of, dispatched_bytes, step_time, tp_bytes

H100 = gpu("h100-sxm")  # NVLink 4: 900 GB/s both ways (datasheet); PCIe Gen5 x16: 128 GB/s both ways


def test_options_describe_the_cluster() -> None:
    opts = Options(mode="train", batch=1, seq=8, gpu="h100-sxm", gpus_per_node=4, inter_node_bandwidth=200,
                   intra_node_link="pcie")
    cluster = cluster_of(opts, H100)
    assert cluster.gpus_per_node == 4
    assert cluster.inter_node_bandwidth == 25 * 10**9  # 200 Gb/s = 25 GB/s each way
    assert cluster.intra == 64e9  # half of PCIe Gen5 x16's 128 GB/s
    assert cluster_of(Options(mode="train", batch=1, seq=8), H100).intra == 450e9  # NVLink's 900 GB/s, halved


def test_tensor_parallelism_past_a_node_crosses_the_network() -> None:
    """t = 8 on nodes of 4: each all-reduce spans 2 nodes and takes NCCL's cost model (nccl_cost; NCCL's
    src/graph/tuning.cc). By hand for X = 10^9 bytes, 4 GPUs a node each on its own 400 Gb/s port: NCCL's search
    runs a channel per NIC at 48 GB/s, busBw = 4 x 48 = 192 GB/s (under NVLink's 18 x 20.6); the ring under Simple
    moves X at 192 x 8/14 GB/s with 1.4 x (8.4 + 12 x 3.4 + 2 x 14.0) us of latency (ring LL128 at 0.92 of the
    bandwidth and trees at half are slower at this size)."""
    x = 10**9
    assert Cluster(H100, 4).all_reduce(x, 8, 1) == pytest.approx(x / (192e9 * 8 / 14) + 1.4 * 77.2e-6)
    est = estimate("llama-2-7b", mode="train", batch=1, seq=2048, tp=8, sp=True)
    narrow = estimate("llama-2-7b", mode="train", batch=1, seq=2048, tp=8, sp=True, gpus_per_node=4)
    one_node, two_nodes = step_time(est, "h100-sxm").tp_s, step_time(narrow, "h100-sxm").tp_s
    # the same calls, each one layer's activations, b s h x 2 B = 2,048 x 4,096 x 2 = 16 MiB: inside a node at
    # OpenXLA's measured 115.5 GB/s for 8 H100s at 2^24 bytes; across two nodes NCCL's fastest for 16 MiB is the ring
    # under LL128, 0.92 x 192 x 8/14 GB/s and 14.0 + 12 x 1.9 + 2 x 4.0 us (the ring under Simple: 261.0 us; the
    # trees, their bandwidth corrected to 0.7 and 0.9 at 2^18 x 64 bytes: 331.8 and 245.6 us)
    m = 16 * 2**20
    ratio = (m / (0.92 * 192e9 * 8 / 14) + 44.8e-6) / (m / 115.5e9)
    assert two_nodes / one_node == pytest.approx(ratio)


def test_a_pcie_link_the_table_does_not_have_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "8", "--gpu", "b200",
                 "--intra-node-link", "pcie"])
    err = capsys.readouterr().err
    assert code == 2 and "no PCIe figure for b200" in err and len(err.strip().splitlines()) == 1


def test_moe_tensor_parallel_traffic_by_hand() -> None:
    """Mixtral (32 layers, h 4096) at b 1, s 4096 under t = 2: per layer forward the attention output's and the
    experts' partial sums (2 b s h bf16 each), backward the QKV and experts' input gradients; plus the
    vocabulary-parallel embedding's output and the LM head's input gradient: (2 x 32 + 1) x 2 b s h each way."""
    est = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, tp=2, sp=True)
    whole = whole_model(est.model.graph(activation_dtype="bf16", dropout=True), est.options)
    bsh = 2 * 4096 * 4096
    assert tp_bytes(whole, est.values, False) == (65 * bsh, 65 * bsh)
    # one all-to-all sends each token to its k = 2 experts: b s k h bf16 per MoE layer, 32 layers
    assert dispatched_bytes(whole, est.values) == 32 * 2 * 4096 * 2 * 4096


def test_expert_parallel_all_to_all_by_hand() -> None:
    """ep = 8 inside one node (t = 1): each of the 4 all-to-alls per MoE layer (dispatch, combine, and their
    gradients) sends 7/8 of b s k h x 2 bytes over NVLink at NCCL's per-link speed, 18 x 20.6 = 370.8 GB/s of the
    rated 450 (nccl-tests#212): 4 x 32 x 7/8 x 4096 x 2 x 4096 x 2 / 370.8e9."""
    est = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, dp=8, ep=8)
    assert step_time(est, "h100-sxm").ep_s == pytest.approx(4 * 32 * 7 / 8 * 4096 * 2 * 4096 * 2 / 370.8e9)
    spread = estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, dp=8, ep=8, gpus_per_node=1)
    # one rank per node: the whole 7/8 leaves over each GPU's 50 GB/s port
    assert step_time(spread, "h100-sxm").ep_s == pytest.approx(4 * 32 * 7 / 8 * 4096 * 2 * 4096 * 2 / 50e9)
    assert step_time(estimate("mixtral-8x7b", mode="train", batch=1, seq=4096, dp=8), "h100-sxm").ep_s == 0


def test_mla_down_projections_read_each_ranks_tokens_under_sequence_parallelism() -> None:
    """DeepSeek-V3's q_a (h -> d_c' = 1536) and kv_a (h -> d_c + d_hR = 576) are replicated on every
    tensor-parallel rank (Megatron-Core builds them 'duplicated'). Under sequence parallelism each rank
    multiplies its s/t tokens, so per-GPU FLOPs times t are the whole model's; without it every rank repeats
    them on all tokens: t - 1 extra copies of 3 x 2 b s h (1536 + 576) per layer, 61 layers, and of the router's
    3 x 2 b s h E (E = 256) in the 58 MoE layers (61 less 3 dense)."""
    sp = estimate("deepseek-v3", mode="train", batch=1, seq=1024, tp=8, sp=True)
    assert sp.number("model_flops_per_gpu") * 8 == sp.number("model_flops")
    plain = estimate("deepseek-v3", mode="train", batch=1, seq=1024, tp=8)
    duplicated = 7 * 3 * 2 * 1024 * 7168 * (61 * (1536 + 576) + 58 * 256)
    assert plain.number("model_flops_per_gpu") * 8 - plain.number("model_flops") == duplicated
