"""Transformer Engine's fp8 and fp4 recipes on Megatron-Core's routed experts (TEGroupedMLP's two GroupedLinears,
symbolic.mcore_experts.GROUPED_SOURCE): fc1's and fc2's inputs saved as their column-wise quantized casts, one
per-tensor scale per expert, fc1's output 16-bit for the fused SwiGLU. Expected bytes by hand below."""

from __future__ import annotations

import pytest

from memderive.derivations.estimate import estimate
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Graph
from memderive.symbolic.mcore_experts import megatron_moe
from memderive.symbolic.mcore_recompute import ModuleRecompute
from memderive.symbolic.ops import BlockBuilder
from memderive.symbolic.te_float8 import TEFloat8, workspace_terms


def _layer() -> Graph:
    """One MoE layer: b 1, s 4, h 8, E 4 experts, top-2, SwiGLU width f_e 16, bf16, as Megatron-Core saves it."""
    bb = BlockBuilder("layer", (1, 4, 8), dtype("bf16"))
    bb.router("moe/router", bb.input, 4, 2, bias=False)
    bb.experts("moe/experts", bb.input, 4, 2, 16, kind="swiglu", bias=False)
    return megatron_moe(Graph("moe", (bb.build(),)))


def _experts(g: Graph) -> dict[str, int]:
    return {x.name.removeprefix("moe/experts."): int(x.nbytes) for _, op in g.ops() if op.kind == "experts"
            for x in op.saved}


@pytest.mark.parametrize(("recipe", "expected"), [
    # bf16 (no recipe): permute_index b s E int64 1x4x4x8 = 128, sorted_indices b s k int64 4x2x8 = 64, fc1's input
    # (gathered) b s k h = 8 rows x 8 x 2 B = 128, fc1's output 8 x 2 f_e = 32 x 2 B = 512, the probs 8 x 2 B = 16,
    # fc2's input (hidden) 8 x 16 x 2 B = 256: 1,104 B.
    (None, {"permute_index": 128, "sorted_indices": 64, "gathered": 128, "fc1_out": 512, "weights": 16,
            "hidden": 256}),
    # current scaling: the two inputs 1 B per element, 64 and 128, each with one fp32 scale_inv per expert, 4 x 4 =
    # 16: 128 + 64 + 64 + 16 + 512 + 16 + 128 + 16 = 944 B.
    ("te-current", {"permute_index": 128, "sorted_indices": 64, "gathered:fp8": 64, "gathered:fp8.scale_inv": 16,
                    "fc1_out": 512, "weights": 16, "hidden:fp8": 128, "hidden:fp8.scale_inv": 16}),
    # MXFP8: 1 B per element and a 1-byte scale per 32 rows of each column: 64 / 32 = 2, 128 / 32 = 4:
    # 128 + 64 + 66 + 512 + 16 + 132 = 918 B.
    ("te-mxfp8", {"permute_index": 128, "sorted_indices": 64, "gathered:fp8": 64, "gathered:fp8.scale_inv": 2,
                  "fc1_out": 512, "weights": 16, "hidden:fp8": 128, "hidden:fp8.scale_inv": 4}),
    # NVFP4: half a byte per element (32, 64), a 1-byte scale per 16 (4, 8), an fp32 amax per expert (16 each):
    # 128 + 64 + 52 + 512 + 16 + 88 = 860 B.
    ("te-nvfp4", {"permute_index": 128, "sorted_indices": 64, "gathered:fp4": 32, "gathered:fp4.scale_inv": 4,
                  "gathered:fp4.amax": 16, "fc1_out": 512, "weights": 16, "hidden:fp4": 64,
                  "hidden:fp4.scale_inv": 8, "hidden:fp4.amax": 16}),
])
def test_one_moe_layers_grouped_linears_save_their_quantized_inputs_by_hand(recipe: str | None,
                                                                             expected: dict[str, int]) -> None:
    g = _layer() if recipe is None else TEFloat8(recipe)(_layer())
    assert _experts(g) == expected


def test_moe_act_recompute_saves_nothing_for_fc2() -> None:
    """Under moe_act recompute Megatron-Core sets save_original_input on fc2 (core_v0.15.0 moe/experts.py L808-815):
    its 16-bit input is the checkpoint's discarded output, so fc2 saves nothing that stays; MXFP8 918 - 132 = 786 B."""
    g = ModuleRecompute(("moe_act",))(TEFloat8("te-mxfp8")(_layer()))
    assert sum(_experts(g).values()) == 786


def test_expert_weight_workspaces_one_per_expert_by_hand() -> None:
    """The experts' cached 8-bit weights (GroupedLinear's cache_name f"weight{i}", one module per linear): gate_up
    4 x 32 x 8 = 1,024 and down 4 x 8 x 16 = 512 elements. Current scaling on Hopper: data and transpose, 2 B each,
    and a 4-byte scale_inv per expert: 2,048 + 16 = 2,064 and 1,024 + 16 = 1,040; on Blackwell no transpose, 1,040
    and 528; MXFP8 2 + 2/32 B per element: 2,112 and 1,056; delayed scaling adds per expert and GEMM
    4 B x 5 quantizers x (history 1 + 1) = 40 B: 160 each."""
    paths = ("layer/moe/experts.gate_up", "layer/moe/experts.down")
    hopper = {p: (2_064, 1_040)[i] for i, p in enumerate(f"{x}/weight_workspace" for x in paths)}
    assert dict(workspace_terms(_layer(), "te-current", True)) == hopper
    assert [int(v) for _, v in workspace_terms(_layer(), "te-current", False)] == [1_040, 528]
    assert [int(v) for _, v in workspace_terms(_layer(), "te-mxfp8", False)] == [2_112, 1_056]
    assert [int(v) for _, v in workspace_terms(_layer(), "te-delayed", True)] == [2_064, 160, 1_040, 160]


def test_a_megatron_moe_estimate_saves_the_casts() -> None:
    """Through the estimate (--framework megatron, EP 8): the experts op saves fc1's and fc2's 8-bit casts, fc1's
    output in bf16; without --fp8 the 16-bit inputs."""
    run = {"mode": "train", "batch": 1, "seq": 4096, "framework": "megatron", "ep": 8, "dp": 8, "gpu": "h100-sxm"}
    names = {fp8: [x.name.removeprefix("moe/experts.") for blk, op in estimate("qwen3-30b-a3b", fp8=fp8, **run)
                   .graph.ops() if op.kind == "experts" for x in op.saved] for fp8 in ("none", "te-current")}
    assert names["none"] == ["permute_index", "sorted_indices", "gathered", "fc1_out", "weights", "hidden"]
    assert names["te-current"] == ["permute_index", "sorted_indices", "gathered:fp8", "gathered:fp8.scale_inv",
                                   "fc1_out", "weights", "hidden:fp8", "hidden:fp8.scale_inv"]
