"""``--optimizer muon`` (Megatron-Core's Muon, its layer-wise distributed optimizer under ``--zero 1``): the states
against hand arithmetic and against torch.optim.Muon with AdamW for the rest, measured on CPU; the Newton-Schulz
FLOPs against hand arithmetic; the combinations Megatron-Core refuses, refused."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transformers

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.model_states import muon_owned, stored_parameters
from memderive.derivations.quantities.muon_step import muon_matrices, newton_schulz_flops, newton_schulz_s
from memderive.derivations.quantities.timing import step_time
from tests.hf_saved import FAMILIES

transformers.logging.set_verbosity_error()


def _states(model: object, **kw: object) -> dict[str, int]:
    e = estimate(model, mode="train", optimizer="muon", **{"batch": 1, "seq": 8, **kw})
    return {t.path: int(t.expr.evaluate(e.values)) for t in e.quantity("model_state_bytes").breakdown.terms}


def test_llama_2_7b_states_by_hand() -> None:
    # llama-2-7b: 6,738,415,616 parameters (Touvron et al. 2023); Adam owns the embedding and the LM head
    # (32,000 x 4,096 = 131,072,000 each) and the norms (2 x 4,096 per layer x 32 + 4,096 = 266,240): 262,410,240.
    # bf16 master: 2 (weights) + 2 (gradients) + 4 (fp32 main params) + 4 (a momentum, Muon's or Adam's exp_avg)
    # per parameter, + 4 (Adam's exp_avg_sq) per Adam-owned one.
    p, adam = 6_738_415_616, 262_410_240
    states = _states("llama-2-7b")
    assert sum(states.values()) == 12 * p + 4 * adam == 81_910_628_352
    # --zero 1 over 8 ranks (the layer-wise optimizer: main params and states 1/8, weights and gradients whole),
    # the fp32 gradient buffer (grad_reduce_in_fp32): 2 + 4 + (4 + 4) / 8 per parameter + 4 / 8 per Adam-owned one
    states = _states("llama-2-7b", zero=1, dp=8, grad_buffer="fp32")
    assert sum(states.values()) == 6 * p + p + adam // 2 == 47_300_114_432


def _measured_states() -> int:
    """Bytes of the states after one step of torch.optim.Muon over the tiny llama's 2-D weights but the embedding and
    the LM head (Megatron-Core's rule, applied here by name) and torch.optim.AdamW over the rest, fp32, on CPU; the
    step counts left out (memderive neglects them)."""
    cls, kwargs = FAMILIES["llama-gqa"]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs)).float()
    named = list(model.named_parameters())
    owned = [p for n, p in named if p.ndim == 2 and "embed_tokens" not in n and "lm_head" not in n]
    rest = [p for n, p in named if not any(p is q for q in owned)]
    opts = [torch.optim.Muon(owned, lr=1e-3), torch.optim.AdamW(rest, lr=1e-3)]
    ids = torch.randint(0, model.config.vocab_size, (1, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    for opt in opts:
        opt.step()
    return sum(v.untyped_storage().nbytes() for opt in opts for st in opt.state.values() for k, v in st.items()
               if torch.is_tensor(v) and k != "step")


def test_states_equal_torch_muon_with_adamw() -> None:
    # llama-gqa (h 64, a 4, a_kv 2, f 160, V 128, l 2): per layer q (64, 64) 4,096, k and v (32, 64) 2,048 each,
    # o 4,096, gate, up, down 10,240 each (Muon's: 43,008) and two norms of 64 (Adam's); the embedding and the LM
    # head (128, 64) 8,192 each and the final norm 64 (Adam's). Muon 2 x 43,008 = 86,016 elements x 4 B (momentum);
    # Adam 2 x 128 + 8,192 + 8,192 + 64 = 16,704 x 8 B: 344,064 + 133,632 = 477,696 B.
    cls, kwargs = FAMILIES["llama-gqa"]
    states = _states(getattr(transformers, cls)(**kwargs), dtype="fp32", implementation="hf")
    assert states["model_states/optimizer"] == 477_696 == _measured_states()


@pytest.mark.parametrize("argv,message", [
    (["--zero", "2", "--dp", "8"], "--optimizer muon with --zero 2"),
    (["--dtype", "fp16"], "--optimizer muon with --dtype fp16"),
    (["--zero", "1", "--dp", "8", "--framework", "torchtitan"], "only Megatron-Core runs: give --framework megatron"),
    (["--zero", "1", "--dp", "8", "--implementation", "hf"], "only Megatron-Core runs"),
])
def test_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["estimate", "--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "8",
                 "--optimizer", "muon", *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_newton_schulz_flops_by_hand() -> None:
    # One (2,048, 7,168) matrix (a routed expert's down projection of Kimi K2, h 7,168, f_e 2,048), m 2,048, n 7,168:
    # per iteration X X^T 2 m^2 n = 60,129,542,144, A A 2 m^3 = 17,179,869,184, B X 2 m^2 n = 60,129,542,144:
    # 137,438,953,472; 5 iterations: 687,194,767,360.
    assert newton_schulz_flops(2048, 7168) == newton_schulz_flops(7168, 2048) == 687_194_767_360


def _muon_flops(e: Any) -> int:
    """One step's Newton-Schulz FLOPs on the GPU of estimate ``e``, matrix by matrix."""
    return sum(int(n.evaluate(e.values) if hasattr(n, "evaluate") else n)
               * newton_schulz_flops(int(r.evaluate(e.values)), int(c.evaluate(e.values)))
               for r, c, n, _ in muon_matrices(e.graph, e))


def test_llama_2_7b_newton_schulz_flops_by_hand() -> None:
    # Megatron's layer of llama-2-7b as Muon sees it: q, k, v split from linear_qkv (muon_split_qkv) and the output
    # projection, (4,096, 4,096) each: 6 x 4,096^3 = 412,316,860,416 FLOPs per iteration each, 1,649,267,441,664;
    # linear_fc1 (gate and up, 22,016 x 4,096): 4 x 4,096^2 x 22,016 + 2 x 4,096^3 = 1,614,907,703,296;
    # linear_fc2 (4,096 x 11,008): 4 x 4,096^2 x 11,008 + 2 x 4,096^3 = 876,173,328,384. Per layer and iteration
    # 4,140,348,473,344; x 5 iterations x 32 layers = 662,455,755,735,040. The embedding, LM head and norms: Adam's.
    assert _muon_flops(estimate("llama-2-7b", mode="train", batch=1, seq=8, optimizer="muon")) == 662_455_755_735_040


def test_layer_wise_newton_schulz_waits_for_the_busiest_rank() -> None:
    # llama-2-7b under --zero 1: whole parameters dealt to the d ranks; at one FLOP per second (rate 1) the seconds are
    # the FLOPs. The GPU's 662,455,755,735,040 (above): over d 8 the mean rank's 82,806,969,466,880, more than any
    # one parameter; over d 128 the mean's 5,175,435,591,680 is less than one linear_fc1 (22,016 x 4,096) whole,
    # 1,614,907,703,296 x 5 = 8,074,538,516,480 (linear_qkv's q, k and v: 3 x 412,316,860,416 x 5 =
    # 6,184,752,906,240), which the rank dealt it steps (the mean's before).
    def flops(model: str, **kw: int) -> float:
        e = estimate(model, mode="train", batch=1, seq=8, optimizer="muon", zero=1, **kw)
        return newton_schulz_s(e, lambda dtype, m, n, k: 1.0)

    assert flops("llama-2-7b", dp=8) == 82_806_969_466_880 and flops("llama-2-7b", dp=128) == 8_074_538_516_480
    # mixtral-8x7b over d 64, ep 8 (h 4,096, a_kv 8, f_e 14,336, 32 layers), x 5 iterations: the dense part over the
    # 64 ranks: per layer q and o (4,096, 4,096) 412,316,860,416 each, k and v (1,024, 4,096) 4 x 1,024^2 x 4,096 +
    # 2 x 1,024^3 = 19,327,352,832 each, the router (8, 4,096) 1,049,600: 138,126,484,111,360 / 64 =
    # 2,158,226,314,240, less than linear_qkv whole, 450,971,566,080 x 5 = 2,254,857,830,400. The routed experts'
    # over edp 64 / 8 = 8 ranks: one expert a layer, fc1 (28,672, 4,096) 2,061,584,302,080 and fc2 (4,096, 14,336)
    # 1,099,511,627,776, x 5 x 32 = 505,775,348,776,960 / 8 = 63,221,918,597,120, more than any one of them.
    assert flops("mixtral-8x7b", dp=64, ep=8) == 2_254_857_830_400 + 63_221_918_597_120


def test_frozen_weights_are_not_orthogonalized() -> None:
    # Megatron-Core's Muon skips a parameter without requires_grad (get_megatron_muon_optimizer). llama-2-7b,
    # --train-only q_proj: the 32 (4,096, 4,096) q weights alone, 6 x 4,096^3 = 412,316,860,416 FLOPs per iteration
    # each, x 5 x 32 = 65,970,697,666,560 (the whole model's 662,455,755,735,040 before). LoRA r 8 on q_proj and
    # v_proj: per layer two A (8, 4,096) and two B (4,096, 8), m 8, n 4,096: 4 x 64 x 4,096 + 2 x 512 = 1,049,600
    # each, 4,198,400 per layer; x 5 x 32 = 671,744,000.
    kw = {"mode": "train", "batch": 1, "seq": 8, "optimizer": "muon"}
    assert _muon_flops(estimate("llama-2-7b", train_only="q_proj", **kw)) == 65_970_697_666_560
    assert _muon_flops(estimate("llama-2-7b", lora_rank=8, lora_targets="q_proj,v_proj", **kw)) == 671_744_000


def _llama_2_7b_dp8(optimizer: str, zero: int) -> Any:
    return step_time(estimate("llama-2-7b", mode="train", batch=1, seq=4096, dp=8, zero=zero, optimizer=optimizer,
                              framework="megatron", micro_batches=8, grad_buffer="fp32"), "h100-sxm")


def test_layer_wise_gather_is_exposed() -> None:
    # --zero 1 (dist_muon): the gradients all-reduced as without a distributed optimizer (AdamW's under --zero 0,
    # behind the last backward: Megatron-LM allows --overlap-grad-reduce with dist_muon), then the updated bf16
    # weights all-gathered over the 8 ranks after the step, hidden behind nothing: 2 B x 6,738,415,616 parameters.
    layer_wise, adam = _llama_2_7b_dp8("muon", 1), _llama_2_7b_dp8("adam", 0)
    gather = layer_wise.cluster.all_gather(2 * 6_738_415_616, 8, 1)
    assert layer_wise.dp_s == pytest.approx(adam.dp_s + gather, rel=1e-12) and gather > 0


def test_whole_muon_all_reduce_is_exposed() -> None:
    # --zero 0 (TensorParallelMuon without a distributed optimizer): Megatron-LM d7288711 asserts `not
    # overlap_grad_reduce` under --optimizer muon (megatron/training/arguments.py L1479), so DDP's all-reduce of the
    # fp32 gradient buffer waits for the last backward and runs whole: 4 B x 6,738,415,616 parameters =
    # 26,953,662,464 B over the 8 ranks of one node. AdamW's, launched behind that backward, is hidden (less).
    muon, adam = _llama_2_7b_dp8("muon", 0), _llama_2_7b_dp8("adam", 0)
    reduce = muon.cluster.all_reduce(26_953_662_464, 8, 1)
    assert muon.dp_s == pytest.approx(reduce, rel=1e-12) and adam.dp_s < reduce
    assert any("Megatron-LM refuses --overlap-grad-reduce" in line for line in muon.model())
    # Megatron-LM's refusal, not torch's: DDP elsewhere overlaps Muon's all-reduce as AdamW's (the same reduction)
    kw = dict(mode="train", batch=1, seq=4096, dp=8, zero=0, micro_batches=8, framework="torchtitan")
    elsewhere, adamw = (step_time(estimate("llama-2-7b", optimizer=o, **kw), "h100-sxm") for o in ("muon", "adamw"))
    assert elsewhere.dp_s == adamw.dp_s < elsewhere.cluster.all_reduce(26_953_662_464, 8, 1)
    assert not any("Megatron-LM refuses" in line for line in elsewhere.model())


def test_routed_expert_biases_are_adams() -> None:
    # gpt-oss-20b's experts keep biases stacked (E, 2 f_e) and (E, h): E vectors each, which Megatron-Core's rule
    # (len(param.shape) == 2 per expert's weight, TEGroupedLinear's bias{i} 1-D) leaves to Adam; the stacked
    # (E, rows, cols) weights are E matrices, Muon's.
    e = estimate("gpt-oss-20b", mode="train", batch=1, seq=8)
    owned = {x.name: muon_owned(blk, op, x) for blk, op in e.graph.ops() if op.kind == "experts"
             for x in stored_parameters(op)}
    assert owned == {"moe/experts.gate_up": True, "moe/experts.down": True, "moe/experts.gate_up_bias": False,
                     "moe/experts.down_bias": False}


KIMI_K2 = "tests/fixtures/kimi-k2/config.json"  # moonshotai/Kimi-K2-Instruct's sizes on DeepSeek-V3's architecture


def test_kimi_k2_gb300_expert_states_by_hand() -> None:
    # Megatron-Bridge 26.04's Kimi-K2 on 256 GB300s: PP 4, VP 4 (layout Et*4|(t*4|)*14tL), EP 64, DP 64, so the
    # experts' data-parallel group is 64 x 1 / 64 = 1 rank: the layer-wise optimizer leaves each GPU all of its
    # experts' states. Pipeline rank 0 holds chunks 0, 4, 8, 12: layers 0-3 (0 dense), 16-19, 32-35, 48-51, 15 MoE
    # layers of 384 / 64 = 6 experts, 3 x 7,168 x 2,048 = 44,040,192 elements each; 4 B main params + 4 B momentum:
    # 15 x 6 x 44,040,192 x 8 = 31,708,938,240 B.
    states = _states(KIMI_K2, seq=4096, batch=2, micro_batches=32, pp=4, virtual_stages=4, dp=64, ep=64, zero=1,
                     pipeline_layout="Et*4|(t*4|)*14tL", framework="megatron", grad_buffer="param+fp32")
    assert states["model_states/experts/optimizer"] == 31_708_938_240
    # The dense parameters are dealt whole over the 64 data-parallel ranks (shard_params' ping-pong by size): the
    # rank dealt the embedding (163,840 x 7,168 = 1,174,405,120 elements, Adam's: 4 + 8 B) holds 14,092,861,440 B of
    # states, more than the mean rank's 1/64; the experts' group is one rank, nothing to add.
    assert states["model_states/optimizer"] + states["model_states/layer_wise_busiest_rank"] == 14_092_861_440
    assert states["model_states/experts/layer_wise_busiest_rank"] == 0


def test_plan_searches_what_muon_runs(capsys: pytest.CaptureFixture[str]) -> None:
    # Megatron-Core's Muon runs ZeRO 0 or its layer-wise optimizer (1), never the distributed optimizer's 2-3: the
    # planner searches those (it stopped at Options' refusal of --zero 2 before).
    code = main(["plan", "--model", "llama-2-7b", "--gpus", "16", "--gpu", "h100-sxm", "--seq", "4096",
                 "--global-batch", "256", "--optimizer", "muon", "--framework", "megatron"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line[:6].strip().isdigit()]
    assert code == 0 and rows and {row[5] for row in rows} <= {"0", "1"}
