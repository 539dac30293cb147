"""Pipeline sends on the link the pipeline spans, and Narayanan et al. 2021 §5.4.1's ranking of tensor against
pipeline parallelism.

Ranks are numbered tensor-first (Megatron-LM ``parallel_state``: tp, cp, dp, then pp), so the stages of a pipeline
are ``t cp d`` ranks apart. With t 4 and d 1 on 8-GPU nodes, stages 0 and 1 share a node but stages 1 and 2 do not;
in the 1F1B steady state every stage waits on the slowest boundary, so a pipeline that spans nodes sends at the
network's bandwidth (before: at NVLink's whenever the stride was under a node).
"""

from __future__ import annotations

import pytest

from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.cluster import Cluster
from memderive.derivations.quantities.timing import step_time
from tests.published_runs import HDR, Run, gpt, megatron_states

A100 = gpu("a100-80gb")  # NVLink 3: 600 GB/s both ways, 300 GB/s each way (datasheet)


def test_a_pipeline_that_spans_nodes_sends_over_the_network() -> None:
    c = Cluster(A100, 8, HDR)  # one 200 Gb/s HDR port per GPU: 25 GB/s, NCCL's search's 24 per channel
    gb = 10**9
    # inside a node at NCCL's per-link speed: 12 NVLink 3 links x 20.0 GB/s = 240 of the rated 300 each way
    assert c.send(gb, 4, 2) == pytest.approx(gb / 240e9)  # t4 p2: ranks 0-3 and 4-7, one node
    assert c.send(gb, 4, 16) == gb / 24e9  # t4 p16: 64 ranks over 8 nodes, every other boundary crosses one
    assert c.send(gb, 8, 2) == gb / 24e9  # stages a node apart (search.cc speedArrayInter: 24 <= 25 GB/s)
    assert c.send(gb, 1, 8) == pytest.approx(gb / 240e9)  # p8 alone: one node


def _fig13(t: int, batch: int) -> Run:
    """Narayanan et al. 2021 Figure 13 / §5.4.1: 'a 161-billion-parameter GPT model (32 transformer layers to support
    pipeline-parallel size of 32, 128 attention heads, hidden size of 20480)' on 64 A100s, (p, t) from (2, 32) to
    (32, 2). Micro-batch 1 (§5.4.2 and §5.4.3 say so for Figures 14 and 15; assumed here), no interleaving, full
    recompute and fp16 as in Table 1's runs."""
    layout = {"tp": t, "pp": 64 // t, "dp": 1, "batch": 1, "micro_batches": batch, "recompute": "full",
              "attention": "eager", **megatron_states("fp16")}
    return Run(f"161B t{t}", "Narayanan et al. 2021, Figure 13", gpt(20480, 128, 32), layout, 2048, "a100-80gb",
               HDR, 1.0)


@pytest.mark.parametrize("batch", [32, 128])  # the figure's two batch sizes (its legend)
def test_tensor_parallelism_up_to_the_node_then_pipeline(batch: int) -> None:
    """§5.4.1: 'we see peak performance when the tensor-parallel size is equal to the number of GPUs in a single
    node (8 with DGX A100 nodes)'. Before pipeline sends were put on the link the pipeline spans, batch 128 ranked
    t4 p16 first (28.97 s against t8 p8's 29.48 s: its sends timed at NVLink though the pipeline spans 8 nodes)."""
    times = {}
    for t in (2, 4, 8, 16, 32):
        run = _fig13(t, batch)
        times[t] = step_time(run.estimate(), run.cluster()).step_s
    assert min(times, key=times.__getitem__) == 8, times


def test_the_last_stage_bounds_memory_when_its_logits_outweigh_the_first_stages_micro_batches() -> None:
    """Even stages, 1F1B, full recompute (each layer keeps only its 16-bit input): Llama 3 8B (h 4,096, 32 layers,
    V 128,256) on p 4 at s 4,096, b 1, FlashAttention. By hand: the first stage holds 4 micro-batches of its 8 layers'
    inputs, 4 x 8 x 4,096 x 4,096 x 2 = 1,073,741,824 B; the last 1 micro-batch of its 8 layers, 268,435,456 B, and
    the output layer: the final norm's input and output (2 x 4,096 x 4,096 x 2 = 67,108,864) and the fp32 logits
    (4,096 x 128,256 x 4 = 2,101,346,304): 2,436,890,624 B. The last stage is the larger, so it is the GPU's."""
    from memderive.derivations.estimate import estimate

    est = estimate("llama-3-8b", mode="train", batch=1, seq=4096, pp=4, flash=True, recompute="full")
    assert "pipeline parallel (last stage)" in est.graph.strategies
    assert est.number("activation_bytes") == 8 * 4096 * 4096 * 2 + 2 * 4096 * 4096 * 2 + 4096 * 128256 * 4 \
        == 2_436_890_624
    from memderive.documents.steps import layout_text, pipeline_stage

    assert layout_text(est.options, pipeline_stage(est.graph)) == "pipeline parallel p = 4 (last stage)"
