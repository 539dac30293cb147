"""Megatron-Core's ``--recompute-modules`` (``symbolic.mcore_recompute``): what each module drops and recomputes,
held to hand arithmetic from Megatron-LM's code (the module's docstring cites each line); and its refusals."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

from memderive.commands import cli

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.efficiency import gemm_products
from memderive.derivations.quantities.memory_bound import fused_elementwise_bytes, layout_int
from memderive.derivations.quantities.timing import step_time
from memderive.derivations.search.plan import PlanError, plan
from tests.in_process import estimate_cli

STEP = {"mode": "train", "batch": 1, "seq": 4096, "recompute": "selective"}


def _pair(model: str, modules: str, **more):
    """The estimate under selective recompute's default (core_attn) and under core_attn and ``modules`` (so each
    difference is ``modules``' own: core_attn checkpoints the flash kernel, below)."""
    return estimate(model, **STEP, **more), estimate(model, **STEP, recompute_modules=f"core_attn,{modules}", **more)


def test_mlp_dense_llama() -> None:
    # LLaMA-2 7B (h 4096, f 11008, 32 layers), b 1, s 4096, bf16, flash. "mlp" checkpoints the MLP with the pre-MLP
    # norm Transformer Engine fuses into fc1 (TELayerNormColumnParallelLinear): the checkpoint keeps its input, the
    # residual stream (saved anyway, by the norm), and drops the norm's output (fc1's input, b s h) and the gate,
    # up and SwiGLU outputs (three b s f), 2 bytes each:
    #   b s h = 4096 * 4096 = 16,777,216 -> 33,554,432 B;  b s f = 4096 * 11008 = 45,088,768 -> 90,177,536 B
    #   dropped per layer = 33,554,432 + 3 * 90,177,536 = 304,087,040 B (the norm's fp32 rstd is outside the
    #   korthikanti profile either way)
    # Recomputed: the MLP's three GEMMs once more, 3 * 2 b s h f per layer, 32 layers:
    #   6 * 16,777,216 * 11008 * 32 = 35,459,249,995,776 FLOPs
    plain, mlp = _pair("llama-2-7b", "mlp")
    assert plain.number("activation_bytes_per_layer") - mlp.number("activation_bytes_per_layer") == 304_087_040
    assert mlp.number("hardware_flops") - plain.number("hardware_flops") == 35_459_249_995_776
    assert mlp.number("model_flops") == plain.number("model_flops")  # MFU's count has no recompute


def test_layernorm_dense_llama_is_fused() -> None:
    # Under Transformer Engine's spec a dense layer's two norms are fused into linear_qkv and linear_fc1
    # (gpt_layer_specs.py: input_layernorm IdentityOp, pre_mlp_layernorm IdentityOp without experts), and
    # transformer_layer.py recomputes a norm only where it is not an IdentityOp: nothing changes, 0 B, 0 FLOPs.
    plain, norms = _pair("llama-2-7b", "layernorm")
    assert norms.number("activation_bytes_per_layer") == plain.number("activation_bytes_per_layer")
    assert norms.number("hardware_flops") == plain.number("hardware_flops")
    assert fused_elementwise_bytes(norms) == fused_elementwise_bytes(plain)


def test_layernorm_deepseek_v3_norms_of_their_own() -> None:
    # DeepSeek-V3 (h 7168, 61 layers, the first 3 dense), b 1, s 4096. MLA's input norm is a TENorm of its own (its
    # down projections are not column-parallel: gpt_layer_specs.py's MLA spec), recomputed in all 61 layers; the
    # pre-MLP norm is fused into fc1 in the 3 dense layers and a TENorm in the 58 MoE layers. Each drops its output,
    # b s h at 2 B = 4096 * 7168 * 2 = 58,720,256 B (the fp32 rstd is outside the korthikanti profile):
    #   (61 + 58) * 58,720,256 = 6,987,710,464 B
    plain, norms = _pair("deepseek-v3", "layernorm")
    assert plain.number("activation_bytes") - norms.number("activation_bytes") == 6_987_710_464


def test_layernorm_and_moe_act_gpt_oss() -> None:
    # gpt-oss-20b (h 2880, k 4 of 32 experts, f_e 2880, 24 layers), b 1, s 4096, --profile exact (norm stats counted).
    # layernorm: the MoE layer's pre-MLP norm is a TENorm of its own (the router reads it): its output (b s h, 2 B)
    # and fp32 rstd (b s) go; the input norm is fused into linear_qkv (nothing).
    #   4096 * 2880 * 2 + 4096 * 4 = 23,592,960 + 16,384 = 23,609,344 B
    # moe_act: the weighted SwiGLU's output, fc2's input (b s k f_e, 2 B), goes; its inputs (fc1's output, the
    # probs) stay saved by the checkpoint:
    #   4096 * 4 * 2880 * 2 = 94,371,840 B
    # per layer: 23,609,344 + 94,371,840 = 117,981,184 B
    plain, both = _pair("gpt-oss-20b", "layernorm,moe_act", profile="exact")
    assert plain.number("activation_bytes_per_layer") - both.number("activation_bytes_per_layer") == 117_981_184
    # Time: no GEMM is recomputed; the fused kernels run once more in backward (memory_bound.FUSED_MOVES): the
    # RMSNorm reads x and writes y (2 moves of b s h), the SwiGLU reads gate and up and writes y (3 moves of the
    # b s k f_e gate), 2 bytes each, 24 layers:
    #   (2 * 4096 * 2880 + 3 * 4096 * 4 * 2880) * 2 * 24 = (23,592,960 + 141,557,760) * 48 = 7,927,234,560 B
    assert both.number("hardware_flops") == plain.number("hardware_flops")
    assert fused_elementwise_bytes(both) - fused_elementwise_bytes(plain) == 7_927_234_560


def test_mla_up_proj_deepseek_v3() -> None:
    # DeepSeek-V3 (a 128, d_h 128, d_hR 64, d_v 128, d_c 512, d_cq 1536, 61 layers), b 1, s 4096, bf16, flash.
    # mla_up_proj checkpoints the up projections (with their fused q/kv norms) and rotary: per token it drops the
    # normed compressed query (d_cq) and latent (d_c) the up projections saved, and the query and key (a (d_h +
    # d_hR) each) and value (a d_v) the attention kernel saved; it adds the rotary key (d_hR), saved by the
    # checkpoint alone (2 B each; the norms' fp32 rstd is outside the korthikanti profile):
    #   (1536 + 512 + 2 * 128 * 192 + 128 * 128 - 64) * 2 = (2048 + 49,152 + 16,384 - 64) * 2 = 135,040 B per token
    #   * 4096 tokens = 553,123,840 B per layer
    # Recomputed: q_b (d_cq -> a (d_h + d_hR)) and kv_b (d_c -> a (d_h + d_v)), 2 b s in out each, 61 layers:
    #   2 * 4096 * (1536 * 24,576 + 512 * 32,768) * 61 = 8192 * 54,525,952 * 61 = 27,247,272,525,824 FLOPs
    plain, up = _pair("deepseek-v3", "mla_up_proj")
    assert plain.number("activation_bytes_per_layer") - up.number("activation_bytes_per_layer") == 553_123_840
    assert up.number("hardware_flops") - plain.number("hardware_flops") == 27_247_272_525_824


def test_moe_layer_checkpoint_keeps_only_its_input() -> None:
    # "moe" checkpoints the whole MoE layer: inside it only its input, the pre-MLP norm's output, stays saved
    # (the router's top-k indices and probs, the dispatcher's indices and every expert buffer go).
    _, moe = _pair("gpt-oss-20b", "moe")
    layer = moe.graph.block("layer")
    saved = {op.path: [x.name for x in op.saved] for op in layer.ops if op.path.startswith("moe/")}
    assert saved == {"moe/router": ["norm2.out"], "moe/experts": []}


def test_moe_checkpoint_reruns_the_all_to_alls() -> None:
    # The MoE layer's checkpoint runs the router, the dispatch and the combine again in backward (moe_layer.py
    # custom_forward under tensor_parallel.checkpoint): 2 all-to-alls forward, 2 for the gradients, 2 in the recompute
    # = 6 where the layer without it has 4, on the same ranks and bytes: 6 / 4 = 3/2 of the expert-parallel time.
    layout = {"dp": 8, "ep": 8}
    plain, moe = (step_time(e, "h100-sxm") for e in _pair("gpt-oss-20b", "moe", **layout))
    assert plain.ep_s > 0 and moe.ep_s / plain.ep_s == pytest.approx(1.5, rel=1e-12)


@pytest.mark.parametrize(("args", "fragment"), [
    (("--recompute", "selective", "--recompute-modules", "core_attn,bogus"), "unknown module 'bogus'"),
    (("--recompute", "full", "--recompute-modules", "mlp"), "add --recompute selective"),
    (("--recompute", "selective", "--recompute-modules", "moe_act"), "has no experts"),
    (("--recompute", "selective", "--recompute-modules", "mla_up_proj"), "has no MLA"),
])
def test_refused_in_one_line(args, fragment) -> None:
    result = estimate_cli("--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "64", *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr


def _flash_pair(**more):
    """LLaMA-2 7B, b 1, s 4096, flash, under Megatron-Core: recompute none and selective (core_attn)."""
    step = {**STEP, "framework": "megatron", "attention": "flash", **more}
    return estimate("llama-2-7b", **{**step, "recompute": "none"}), estimate("llama-2-7b", **step)


def test_core_attn_checkpoints_the_flash_kernel() -> None:
    # LLaMA-2 7B (h 4096, a 32, d_h 128, f 11008, 32 layers), b 1, s 4096, bf16, flash, Megatron-Core.
    # Without recompute a layer saves (korthikanti profile, the norms' fp32 rstd outside it), 2 B per element:
    #   the layer input, norm1's output (linear_qkv's input), q, k, v, the attention output (saved by the kernel and
    #   by linear_proj: the same tensor, once), residual1's output, norm2's output: 8 b s h = 8 * 16,777,216 * 2
    #   = 268,435,456 B; gate, up, SwiGLU output: 3 b s f = 3 * 45,088,768 * 2 = 270,532,608 B;
    #   the kernel's fp32 logsumexp, b a s = 32 * 4096 * 4 = 524,288 B;  total 539,492,352 B.
    # core_attn runs the kernel under tensor_parallel.checkpoint: q, k, v saved (its arguments), the kernel's output
    # (still linear_proj's input) and logsumexp not: 539,492,352 - 524,288 = 538,968,064 B.
    plain, selective = _flash_pair()
    assert plain.number("activation_bytes_per_layer") == 539_492_352
    assert selective.number("activation_bytes_per_layer") == 538_968_064
    # Backward runs the kernel's forward once more: q k^T and P v, 2 b a s s d_h each (the full s x s),
    #   2 * 2 * 32 * 4096 * 4096 * 128 = 274,877,906,944 per layer, 32 layers: 8,796,093,022,208 hardware FLOPs;
    # MFU's model FLOPs have none of it.
    assert selective.number("hardware_flops") - plain.number("hardware_flops") == 8_796_093_022_208
    assert selective.number("model_flops") == plain.number("model_flops")
    # The peak adds the layer rebuilt in backward: the rerun kernel's logsumexp and its new output (linear_proj keeps
    # the first): 524,288 + b s h * 2 = 524,288 + 33,554,432 = 34,078,720 B. total_bytes without recompute: 32 layers
    # * 539,492,352 + the head's inputs 4 V b s + 4 b h s = 17,263,755,264 + 591,396,864 = 17,855,152,128 B of
    # activations, and Megatron's 18 B per parameter (bf16 weight, fp32 main_grad, fp32 main param, Adam's two fp32
    # moments) * 6,738,415,616 = 121,291,481,088 B: 139,146,633,216 B. Selective: less the 32 layers' logsumexp
    # (16,777,216 B), plus the working layer: 139,146,633,216 - 16,777,216 + 34,078,720 = 139,163,934,720 B.
    working = [t for t in selective.quantity("total_bytes").breakdown.terms if t.path == "recompute/working_layer"]
    assert [t.expr.subs(selective.values) for t in working] == [34_078_720]
    assert (plain.number("total_bytes"), selective.number("total_bytes")) == (139_146_633_216, 139_163_934_720)


def test_core_attn_rerun_timed_at_the_forward_kernels_rate() -> None:
    # The rerun is the forward kernel (random.py: run_function again), so gemm_products puts it with the forward:
    # the flash row's forward FLOPs double (q k^T and P v: 274,877,906,944 per layer, 32 layers: 8,796,093,022,208),
    # the backward kernel's stay.
    rows = [[(layout_int(x, e.values) for x in row[1:]) for row in gemm_products(e.graph) if row[0] == "flash"]
            for e in _flash_pair()]
    [[(fwd, back)], [(fwd2, back2)]] = [[tuple(r) for r in x] for x in rows]
    assert (fwd, fwd2, back2) == (8_796_093_022_208, 2 * 8_796_093_022_208, back)


@pytest.mark.parametrize("more", [{"attention": "eager"}, {"framework": "deepspeed", "dtype": "bf16"},
                                  {"framework": "torchtitan"}])
def test_core_attn_leaves_eager_and_legacy_megatron_flash(more) -> None:
    # The eager core is SelectiveRecompute's (its s x s scores dropped, as before); legacy Megatron-LM (DeepSpeed's
    # Megatron) never checkpoints its flash path (transformer.py L818-832); torchtitan has no core_attn module (its
    # own policies, selective-op): no ModuleRecompute there.
    step = {**STEP, "attention": "flash", **more}
    e = estimate("llama-2-7b", **step)
    assert not any(x.startswith("Megatron-Core recompute modules") for x in e.graph.strategies)


# -- plan --recompute-modules and --pipeline-layout ------------------------------------------------------------------

PLAN = ("plan", "--model", "llama-2-7b", "--seq", "4096", "--global-batch", "8", "--gpu-memory", "80GB", "--gpus", "8")


def _cli(*args: str) -> subprocess.CompletedProcess:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_plan_passes_recompute_modules_to_its_selective_rows() -> None:
    # With the modules, plan searches selective on FlashAttention too (without them it leaves selective out there),
    # each selective row carries them and no other row does; a selective row's bytes are those estimate derives from
    # the row's options (the mlp checkpoint included: the same row without the modules holds more).
    result = _cli(*PLAN, "--recompute-modules", "mlp", "--top", "40", "--json")
    assert result.returncode == 0, result.stderr
    layouts = json.loads(result.stdout)["layouts"]
    selective = [x for x in layouts if x["options"].get("recompute") == "selective"]
    assert selective and all(x["options"]["recompute_modules"] == ["mlp"] for x in selective)
    assert all("recompute_modules" not in x["options"] for x in layouts if x not in selective)
    row = selective[0]
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in row["options"].items()}
    assert estimate("llama-2-7b", **fields).number("total_bytes") == row["total_bytes"]
    without = {**fields, "recompute_modules": ()}
    assert estimate("llama-2-7b", **without).number("total_bytes") > row["total_bytes"]


@pytest.mark.parametrize(("args", "fragment"), [
    (("--pipeline-layout", "Et*15|t*17L"), "plan searches pp and v, which --pipeline-layout fixes"),
    (("--framework", "torchtitan", "--recompute-modules", "mlp"), "searches no selective recompute"),
    (("--recompute-modules", "bogus"), "unknown module 'bogus'"),
])
def test_plan_refuses_in_one_line(args, fragment) -> None:
    result = _cli(*PLAN, *args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr


def test_plan_api_refuses_a_pipeline_layout() -> None:
    with pytest.raises(PlanError, match="which --pipeline-layout fixes"):
        plan("llama-2-7b", 80 * 10**9, 8, 4096, 8, pp=2, pipeline_layout="Et*15|t*17L")
