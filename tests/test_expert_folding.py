"""MoE parallel folding (``--etp``, Megatron-Core's expert_tensor_parallel_size; Liu et al. 2025, arXiv:2504.14960):
the experts' grid etp x ep x edp folds the same t x cp x d ranks as the dense layers, so expert parallelism may span
tensor- and data-parallel ranks. Expected numbers are hand arithmetic on Mixtral 8x7B's sizes (h 4,096, l 32,
V 32,000, E 8, k 2, f_e 14,336, a 32, a_kv 8)."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.hardware import gpu
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.cluster import Cluster
from memderive.symbolic.expr import named_values
from memderive.symbolic.derive import evaluate
from memderive.derivations.quantities.timing import expert_group, expert_parallel_s, tp_bytes, whole_model

# TP 2 with sequence parallelism (Megatron-Core requires it for MoE with TP), EP 4 over the t x d ranks, ETP 1
FOLDED = dict(mode="train", batch=1, seq=64, tp=2, sp=True, ep=4, etp=1, zero=1, framework="megatron")

# Per GPU: the routed experts 32 x 8 x 3 x 4,096 x 14,336 = 45,097,156,608 over ep 4 and etp 1: 11,274,289,152;
# the rest split by t 2 (attention 805,306,368 + 536,870,912, embedding and head 131,072,000 each) or whole (norms
# 131,072 + 131,072 + 4,096, routers 32 x 8 x 4,096 = 1,048,576): 671,088,640 + 131,072,000 + 266,240 + 1,048,576
# = 803,475,456
EXPERTS, DENSE = 11_274_289_152, 803_475_456


def states(**changes) -> dict[str, int]:
    est = estimate("mixtral-8x7b", **{**FOLDED, **changes})
    return dict(est.quantity("model_state_bytes").term_ints(est.values))


def test_parameters_per_gpu_split_experts_over_etp_and_ep() -> None:
    est = estimate("mixtral-8x7b", **FOLDED, dp=2)
    assert est.number("parameters_per_gpu") == EXPERTS + DENSE == 12_077_764_608


@pytest.mark.parametrize(("dp", "edp"), [(2, 1), (4, 2)])
def test_expert_states_shard_over_the_folded_expert_data_parallel_ranks(dp: int, edp: int) -> None:
    # ZeRO-1 under Megatron-Core: bf16 weights (2 B), fp32 main_grad (4 B), fp32 master + Adam m, v (12 B) sharded:
    # the dense over d, the experts over edp = t d / (etp ep) = 2 d / 4 (without folding d / ep: 1/2 and 1)
    got = states(dp=dp)
    assert got["model_states/experts/weights"] == 2 * EXPERTS == 22_548_578_304
    assert got["model_states/experts/gradients"] == 4 * EXPERTS == 45_097_156_608
    assert got["model_states/experts/optimizer"] == 12 * EXPERTS // edp  # 135,291,469,824 / edp
    assert got["model_states/optimizer"] == 12 * DENSE // dp  # 9,641,705,472 / dp


def test_an_expert_gpu_computes_on_the_tokens_of_its_etp_ranks() -> None:
    # Each rank dispatches its b s / t = 32 tokens' k = 2 copies; an expert GPU gets b s k etp / t = 64 rows at the
    # whole width f_e (etp 1): forward 2 x 64 x 3 x 4,096 x 14,336 x 32 layers = 721,554,505,728 FLOPs
    est = estimate("mixtral-8x7b", **FOLDED, dp=2)
    flops = dict(est.quantity("model_flops_per_gpu").term_ints(est.values))
    assert flops["layer/moe/experts/forward"] == 721_554_505_728


def test_expert_data_parallel_group_is_etp_x_ep_apart() -> None:
    # t 2 x d 4 = 8 ranks per stage folded as etp 1 x ep 4 x edp 2: the 2 ranks holding the same experts are
    # etp x ep = 4 apart (Megatron-Core's expert grid order tp-ep-dp-pp)
    est = estimate("mixtral-8x7b", **FOLDED, dp=4)
    group = expert_group(est, 1.0, 1.0, 1)
    assert (group.ranks, group.stride) == (2, 4)


def test_all_to_all_over_ep_ranks_etp_apart() -> None:
    # MI300X nodes of 8 (448 GB/s each way inside, a 50 GB/s port out: cluster.Cluster). t 2 x d 8 = 16 ranks as
    # etp 1 x ep 16: the ep ranks 1 apart, 8 per node on 2 nodes. 4e9 dispatched bytes, 2e9 per rank (s/t tokens
    # under SP): the 8/16 bound for the other node over the port, 1/2 x 2e9 / 50e9 = 0.02 s (inside the node
    # 7/16 x 2e9 / 448e9 = 0.00195 s at once); 4 all-to-alls (dispatch, combine, their gradients): 0.08 s. Unfolded
    # (etp 2, ranks 2 apart: 4 per node on 4 nodes) it would be 4 x 12/16 x 2e9 / 50e9 = 0.12 s
    opts = Options(mode="train", batch=1, seq=64, tp=2, sp=True, dp=8, ep=16, etp=1)
    assert expert_parallel_s(Cluster(gpu("mi300x")), 4e9, opts) == pytest.approx(0.08)


def test_folded_experts_move_nothing_over_the_tensor_parallel_group() -> None:
    # etp 1: each rank dispatches its own s/t tokens; the experts' output (b s h, 1 x 64 x 4,096 x 2 bytes =
    # 524,288 per layer, 32 layers: 16,777,216) leaves the forward's partial sums and the backward's input gradients
    est = estimate("mixtral-8x7b", **FOLDED, dp=2)
    whole = whole_model(est.model.graph(activation_dtype=est.options.dtype, dropout=est.options.dropout), est.options)
    with_experts, folded = tp_bytes(whole, est.values, False), tp_bytes(whole, est.values, False, experts=False)
    assert (with_experts[0] - folded[0], with_experts[1] - folded[1]) == (16_777_216, 16_777_216)


@pytest.mark.parametrize(("options", "fragment"), [
    (dict(dp=2, ep=8), "--etp 1 x --ep 8 must divide --tp x --cp x --dp (4)"),
    (dict(dp=2, etp=4), "--etp 4 is larger than --tp 2"),
    (dict(dp=2, sp=False), "needs --sp"),
    (dict(tp=4, dp=2, ep=2, etp=2), "--etp 2 between 1 and --tp 4 is not modelled"),
])
def test_folded_layouts_that_do_not_fit_are_refused(options: dict, fragment: str) -> None:
    with pytest.raises(OptionsError) as err:
        estimate("mixtral-8x7b", **{**FOLDED, **options})
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "mixtral-8x7b", "--mode", "train", "--batch", "1", "--seq", "64",
                 "--tp", "2", "--sp", "--dp", "2", "--ep", "8", "--etp", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "must divide --tp x --cp x --dp (4)" in err


def _gathered_bytes(**changes) -> int:
    """Bytes of the routed experts' saved fc1 input (width h) per layer on one GPU."""
    est = estimate("mixtral-8x7b", **{**FOLDED, **changes})
    op = next(op for op in est.graph.block("layer").ops if op.kind == "experts")
    saved = next(x for x in op.saved if x.name.endswith(".gathered"))
    return evaluate(saved.nbytes, named_values(est.values))


def test_expert_inputs_are_gathered_over_the_expert_tensor_parallel_ranks() -> None:
    # Each rank dispatches its b s/t tokens' k copies; the expert GPU all-gathers what it receives over its etp ranks
    # (Megatron-Core's MoEAlltoAllTokenDispatcher): b s k etp/t rows of h. b 1, s 64, k 2, h 4,096, bf16:
    # etp = t = 2 (the default): 1 x 64 x 2 x 4,096 x 2 B = 1,048,576; etp 1: half, 524,288. The unfolded layout
    # first, then the folded one, in one process: the two must not share a derivation.
    assert _gathered_bytes(etp=None, dp=4) == 1_048_576
    assert _gathered_bytes(dp=2) == 524_288
