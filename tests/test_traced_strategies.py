"""Recompute, LoRA, data and tensor parallelism and FLOPs of a traced model (derivations/quantities/traced_strategies.py).

Independent sources: real bf16 CPU training forwards measured by ``tests/hf_saved.py`` (transformers'
``activation_checkpointing_enable`` and ``peft.get_peft_model`` on real weights, counted by data pointer), PEFT's own
``get_nb_trainable_parameters`` on a real model, and hand arithmetic in the comments.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import peft
import pytest
import torch
import transformers

from memderive.derivations.estimate import estimate
from memderive.derivations.quantities import traced, traced_strategies
from memderive.derivations.options import Options
from tests.in_process import estimate_cli
from tests.hf_saved import Shape, measure_config
from tests.pdflatex import require_pdflatex
from tests.test_traced import CROSS_CHECK, SAMPLE, VLM

ROOT = Path(__file__).resolve().parents[1]

#: arcee (no hand-written family: a config.json of it takes the traced path): d 64, 4 heads x 16 (q 64 -> 64),
#: 2 KV heads x 16 (k, v 64 -> 32), o 64 -> 64, a ReLU^2 MLP up 64 -> 96, down 96 -> 64, 2 layers, vocab 128
ARCEE = dict(model_type="arcee", hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             num_hidden_layers=2, intermediate_size=96, vocab_size=128)



def _rank_lines(stdout: str) -> list[dict]:
    """Each rank's JSON record in tests/tp_worker.py's output: the processes share stdout, so two records can meet on
    one line (a flat object each: no braces inside)."""
    return [json.loads(x) for x in re.findall(r'\{"rank"[^{}]*\}', stdout)]

def _cfg() -> transformers.PretrainedConfig:
    return traced.hf_config(ARCEE)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(ARCEE))
    return estimate_cli("--model", str(path), *args)


def _ours(stderr: str) -> list[str]:
    # (an installed torchao built for another CPython prints its load failures when transformers imports it: not ours)
    return [line for line in stderr.splitlines() if "torchao" not in line and "register_constant" not in line]


def test_recompute_full_equals_cpu() -> None:
    # transformers' own checkpointing, traced on fake tensors at s in (4, 6, 8), equals real bf16 CPU forwards with
    # activation_checkpointing_enable() at s = 7, b 1 and 2; and saves less than without it
    opts = Options(mode="train", batch=1, seq=4, recompute="full")
    model, mode = traced.build(_cfg(), "eager", prepare=traced_strategies.prepare(opts))
    fit = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s))
    assert fit is not None
    cfg = _cfg()
    cfg._attn_implementation = "eager"
    real = [measure_config(cfg, Shape(b, 7), checkpointing=True).nbytes for b in (1, 2)]
    assert [fit(b, 7) for b in (1, 2)] == real
    assert real[1] < measure_config(cfg, Shape(2, 7)).nbytes


LORA = dict(r=4, target_modules=["q_proj", "v_proj"])


def test_lora_trainable_and_saved_equal_peft() -> None:
    # q_proj 64 -> 64: A 4 x 64 + B 64 x 4 = 512; v_proj 64 -> 32: 4 x 64 + 32 x 4 = 384; 2 layers: 1,792 trainable
    opts = Options(mode="train", batch=1, seq=4, lora_rank=4, lora_targets=("q_proj", "v_proj"))
    model, mode = traced.build(_cfg(), "eager", prepare=traced_strategies.prepare(opts))
    trainable, total = traced_strategies.trainable_parameters(model)
    real = peft.get_peft_model(transformers.AutoModelForCausalLM.from_config(_cfg()),
                               peft.LoraConfig(**LORA, task_type="CAUSAL_LM"))
    assert trainable == 1792 and (trainable, total) == real.get_nb_trainable_parameters()
    # PEFT's default keeps the adapters of a bf16 model in fp32 (measure_config's cast_first: cast, then wrap)
    assert traced_strategies.adapter_dtype(model, opts) == "fp32"
    fit = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s))
    assert fit is not None
    cfg = _cfg()
    cfg._attn_implementation = "eager"
    assert [fit(b, 7) for b in (1, 2)] == [measure_config(cfg, Shape(b, 7), lora=peft.LoraConfig(**LORA),
                                                          cast_first=True).nbytes for b in (1, 2)]


@pytest.mark.parametrize(("model_type", "targets", "dropout", "dora"),
                         [("arcee", ("q_proj", "down_proj"), 0.1, True), ("t5", ("q", "v"), 0.0, False)])
def test_lora_variants_saved_equal_peft(model_type: str, targets: tuple, dropout: float, dora: bool) -> None:
    # DoRA with adapter dropout (PEFT saves the dropout's mask and DoRA's weight norm) on arcee, and a whole
    # encoder-decoder (T5: PEFT's SEQ_2_SEQ_LM task): equal to real bf16 CPU forwards of the same PEFT model
    fields = ARCEE if model_type == "arcee" else {"model_type": "t5", **SAMPLE["t5"]}
    opts = Options(mode="train", batch=1, seq=4, lora_rank=4, lora_targets=targets, lora_dropout=dropout, dora=dora)
    model, mode = traced.build(traced.hf_config(fields), "eager", prepare=traced_strategies.prepare(opts))
    fit = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s))
    assert fit is not None
    cfg = traced.hf_config(fields)
    cfg._attn_implementation = "eager"
    lora = peft.LoraConfig(r=4, target_modules=list(targets), lora_dropout=dropout, use_dora=dora,
                           task_type="CAUSAL_LM" if model_type == "arcee" else "SEQ_2_SEQ_LM")
    assert [fit(b, 7) for b in (1, 2)] == [measure_config(cfg, Shape(b, 7), lora=lora, cast_first=True).nbytes
                                           for b in (1, 2)]


def test_lora_target_parameters_equal_peft() -> None:
    # PEFT's target_parameters on Jamba's MoE expert stacks (4 experts, d 64, intermediate 96, one MoE layer):
    # gate_up_proj (4 x 64 x 192) and down_proj (4 x 96 x 64), rank 4 per expert: 4 x 4 x (64 + 192) + 4 x 4 x
    # (96 + 64) = 4,096 + 2,560 = 6,656 trainable, as PEFT counts them; saved bytes equal real bf16 CPU forwards
    fields = {"model_type": "jamba", **SAMPLE["jamba"]}
    opts = Options(mode="train", batch=1, seq=4, lora_rank=4, lora_target_parameters=("gate_up_proj", "down_proj"))
    model, mode = traced.build(traced.hf_config(fields), "eager", prepare=traced_strategies.prepare(opts))
    assert traced_strategies.trainable_parameters(model)[0] == 6656
    fit = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s))
    assert fit is not None
    cfg = traced.hf_config(fields)
    cfg._attn_implementation = "eager"
    lora = peft.LoraConfig(r=4, target_modules=[], target_parameters=["gate_up_proj", "down_proj"],
                           task_type="CAUSAL_LM")
    assert [fit(b, 7) for b in (1, 2)] == [measure_config(cfg, Shape(b, 7), lora=lora, cast_first=True).nbytes
                                           for b in (1, 2)]


def test_train_only_and_frozen_embeddings(tmp_path: Path) -> None:
    # --train-only q_proj,norms: q_proj 2 x 64 x 64 = 8,192 + norms 2 x 2 x 64 + 64 = 320: 8,512 trainable; the saved
    # bytes equal a real bf16 CPU forward with the same parameters frozen (requires_grad by name, written here)
    opts = Options(mode="train", batch=1, seq=4, train_only=("q_proj", "norms"))
    model, mode = traced.build(_cfg(), "eager", prepare=traced_strategies.prepare(opts))
    assert traced_strategies.trainable_parameters(model) == (8512, 65_856)
    fit = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s))
    assert fit is not None

    def freeze(real: torch.nn.Module) -> None:
        for name, p in real.named_parameters():
            p.requires_grad_(".q_proj." in name or "norm" in name)

    cfg = _cfg()
    cfg._attn_implementation = "eager"
    assert [fit(b, 7) for b in (1, 2)] == [measure_config(cfg, Shape(b, 7), freeze=freeze).nbytes for b in (1, 2)]
    # --freeze-embeddings: 65,856 - 8,192 = 57,664 trainable; the 8,192 frozen bf16 embeddings 16,384 B
    done = _cli(tmp_path, "--mode", "train", "--batch", "2", "--seq", "7", "--freeze-embeddings", "--json")
    out = json.loads(done.stdout)
    assert out["trainable_parameters"] == 57_664 and out["model_states"]["frozen_weights"] == 16_384


def test_cli_lora_zero_states_by_hand(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--mode", "train", "--batch", "2", "--seq", "7", "--lora-rank", "4", "--lora-targets",
                "q_proj,v_proj", "--dp", "2", "--zero", "3", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    # 65,856 frozen bf16 parameters (2 x 24,704 layers + 8,192 embeddings + 64 norm + 8,192 head), sharded over 2
    # under ZeRO-3: 65,856 B; 1,792 fp32 adapters: weights 4 B, gradients 4 B, AdamW's two moments 8 B, each / 2
    assert out["model_states"] == {"frozen_weights": 65_856, "weights": 3_584, "gradients": 3_584,
                                   "optimizer": 7_168}
    assert (out["trainable_parameters"], out["parameters_with_adapters"]) == (1792, 65_856 + 1792)


def test_cli_dp_zero_states_by_hand(tmp_path: Path) -> None:
    # 65,856 bf16 parameters, mixed precision: weights 2 B, gradients 2 B, fp32 master + moments 12 B; ZeRO-2 over
    # 4 ranks shards gradients and optimizer states: 131,712 + 32,928 + 197,568
    done = _cli(tmp_path, "--mode", "train", "--batch", "1", "--seq", "5", "--dp", "4", "--zero", "2", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["model_states"] == {"weights": 131_712, "gradients": 32_928,
                                                       "optimizer": 197_568}


def test_tp_rank_parameters_by_hand() -> None:
    # arcee's tp_plan: q, k, v, up colwise (output rows / 2), o, down rowwise (input columns / 2), embeddings vocab
    # / 2, lm_head colwise; the norms (2 x 2 x 64 + 64 = 320) replicated.
    # 2 layers x (4,096 + 2,048 + 2,048 + 4,096 + 6,144 + 6,144) / 2 + 8,192 / 2 + 8,192 / 2 + 320 = 33,088
    model, _ = traced.build(_cfg(), "eager")
    per_rank, rows = traced_strategies.tp_rank_parameters(model, 2)
    assert per_rank == 33_088
    assert dict((key, n) for key, _, n in rows)["model.layers.*.self_attn.k_proj"] == 2048
    # 3 ranks: DTensor's Shard gives rank 0 ceil(n / 3) rows: q 22 of 64, k 11 of 32, up 32 of 96 ...
    per_rank, _ = traced_strategies.tp_rank_parameters(model, 3)
    assert per_rank == 2 * 64 * (22 + 11 + 11 + 22 + 32 + 32) + 2 * 43 * 64 + 320


@pytest.mark.parametrize(("model_type", "t"), [("arcee", 3), ("jamba", 2), ("llava", 2)])
def test_tp_rank_parameters_equal_a_real_tp_load(model_type: str, t: int, tmp_path: Path) -> None:
    # transformers' own tensor-parallel load (tp_plan="auto", t CPU processes over gloo) of a saved checkpoint:
    # every rank's local shards, counted; rank 0's equals ours (3 ranks: uneven, rank 0 the largest)
    fields = {"arcee": ARCEE, **{k: {"model_type": k, **v} for k, v in (("jamba", SAMPLE["jamba"]),
                                                                       ("llava", VLM["llava"]))}}[model_type]
    cfg = traced.hf_config(fields)
    vision = model_type == "llava"
    (transformers.AutoModelForImageTextToText if vision else transformers.AutoModelForCausalLM).from_config(
        cfg).save_pretrained(tmp_path / "ckpt")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(t),
                           str(ROOT / "tests" / "tp_worker.py"), str(tmp_path / "ckpt"),
                           "vision" if vision else "text"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = {r["rank"]: r["params"] for r in _rank_lines(done.stdout)}
    assert len(ranks) == t
    model, _ = traced.build(cfg, "eager")
    assert traced_strategies.tp_rank_parameters(model, t)[0] == ranks[0] == max(ranks.values())


def test_tp_saved_and_cache_equal_a_real_tp_run(tmp_path: Path) -> None:
    # rank 0's saved tensors traced in a fake process group (transformers' own maybe_distribute_model on the meta
    # model, fake tensors) equal a real 2-process gloo run's rank 0 (tests/tp_worker.py) at s = 7, b 1 and 2; the
    # model states follow rank 0's 33,088 parameters (test_tp_rank_parameters_by_hand): 2 + 2 + 12 B each
    cfg = _cfg()
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(tmp_path / "ckpt")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           str(ROOT / "tests" / "tp_worker.py"), str(tmp_path / "ckpt"), "text", "1x7", "2x7",
                           "cache:2x7"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rank0 = next(r for r in _rank_lines(done.stdout)
                 if r["rank"] == 0)
    for b in (1, 2):
        out = _cli(tmp_path, "--mode", "train", "--batch", str(b), "--seq", "7", "--tp", "2", "--json")
        assert out.returncode == 0, out.stderr[-2000:]
        got = json.loads(out.stdout)
        assert got["activation_bytes"] == rank0[f"{b}x7"]
        assert got["model_states_bytes"] == 33_088 * 16 and got["parameters_per_rank"] == 33_088
    # the cache: rank 0 holds 1 of the 2 KV heads: 2 layers x (K, V) x 16 dims x 2 B = 128 B per token, 2 x 8 tokens
    out = _cli(tmp_path, "--mode", "infer", "--batch", "2", "--seq", "7", "--tp", "2", "--json")
    got = json.loads(out.stdout)
    assert got["cache_bytes"] == rank0["cache:2x7"] == 128 * 2 * 8 and got["weight_bytes"] == 33_088 * 2


def test_flops_by_hand(tmp_path: Path) -> None:
    # forward: 2 x the matmul weights per token, 2 x (2 x 24,576 + 8,192) = 114,688 per token, and per layer
    # Q K^T and A V, 2 x 2 x 4 heads x 16 dims = 256 per s^2 (eager: the whole s x s), 2 layers: 512 b s^2;
    # backward: twice the forward (both operands of each matmul need gradients)
    done = _cli(tmp_path, "--mode", "train", "--batch", "2", "--seq", "7", "--json")
    out = json.loads(done.stdout)
    assert out["forward_flops_formula"] == "512*b*s**2 + 114688*b*s"
    assert out["forward_flops"] == 512 * 2 * 49 + 114_688 * 14
    assert out["model_flops"] == 3 * out["forward_flops"] == out["hardware_flops"]
    # recompute full: the backward reruns each layer's forward, less its last matmul (down_proj: its output is not
    # needed for backward, torch's non-reentrant checkpoint stops early): + 512 b s^2 + 2 x 2 x (24,576 - 6,144) b s
    done = _cli(tmp_path, "--mode", "train", "--batch", "2", "--seq", "7", "--recompute", "full", "--json")
    out = json.loads(done.stdout)
    assert out["hardware_flops"] == out["model_flops"] + 512 * 2 * 49 + 4 * 18_432 * 14


@pytest.mark.parametrize(("model_type", "fields"), CROSS_CHECK, ids=[f"{t}-{i}" for i, (t, _) in enumerate(CROSS_CHECK)])
def test_traced_flops_equal_hand_written(model_type: str, fields: dict) -> None:
    # the cross-check: FlopCounterMode over the fake forward and backward equals the hand-written family's derived
    # forward and model FLOPs (transformers' code as memderive's hf implementation derives it)
    config = {"model_type": model_type, **fields}
    hand = estimate(config, mode="train", batch=2, seq=7, implementation="hf", dropout=False)
    model, mode = traced.build(traced.hf_config(config), "eager")
    forward, backward = traced.flops(model, mode, 2, 7)
    assert (forward, forward + backward) == (hand.number("forward_flops"), hand.number("model_flops"))


@pytest.mark.parametrize("model_type", ["jamba", "qwen3_next"])
def test_inference_flops_of_hybrids(model_type: str, tmp_path: Path) -> None:
    # the prefill's FLOPs were counted under no_grad with trainable parameters: FlopCounterMode's module tracker
    # failed on the Mamba and gated-DeltaNet kernels' inputs ("Expected gradient function to be set") and the whole
    # estimate with it; the forward is counted with no parameter requiring a gradient
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": model_type, **SAMPLE[model_type]}))
    done = estimate_cli("--model", str(path), "--mode", "infer", "--batch", "2", "--seq", "7", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert "flops_error" not in out and out["prefill_flops"] > 0 and out["prefill_flops_formula"] is not None


def test_refusals_one_line(tmp_path: Path) -> None:
    for args, words in ((("--pp", "2"), "--pp not yet supported for a traced model"),
                        (("--recompute", "selective"), "give --recompute full"),
                        (("--lora-rank", "4", "--lora-targets", "no_such"), "PEFT cannot adapt no_such")):
        done = _cli(tmp_path, "--mode", "train", "--batch", "1", "--seq", "5", *args)
        ours = _ours(done.stderr)
        assert done.returncode == 2 and done.stdout == "" and len(ours) == 1 and words in ours[0], done.stderr
    done = _cli(tmp_path, "--mode", "train", "--batch", "1", "--seq", "5", "--tp", "2", "--lora-rank", "4",
                "--lora-targets", "q_proj")
    ours = _ours(done.stderr)
    assert done.returncode == 2 and len(ours) == 1 and "--tp with --lora-rank is not traced yet" in ours[0]


GOLDEN = ROOT / "tests" / "golden"
#: A traced training estimate with recompute and LoRA, its writeups kept golden (Markdown and LaTeX)
WRITEUP = ("--model", "tests/golden/arcee-tiny-config.json", "--mode", "train", "--batch", "2", "--seq", "7",
           "--recompute", "full", "--lora-rank", "4", "--lora-targets", "q_proj,v_proj")


@pytest.mark.parametrize(("fmt", "suffix"), [("md", "md"), ("latex", "tex")])
def test_traced_writeup_golden(fmt: str, suffix: str, update_golden: bool, tmp_path: Path) -> None:
    done = estimate_cli(*WRITEUP, "--format", fmt)
    assert done.returncode == 0, done.stderr[-2000:]
    path = GOLDEN / f"estimate-arcee-tiny-traced-train.{suffix}"
    if update_golden:
        path.write_text(done.stdout)
    assert done.stdout == path.read_text(), f"{path.name} changed; if intended, run pytest --update-golden"
    assert "1036*b*s + 4" in done.stdout if fmt == "md" else r"$1036\,b\,s + 4" in done.stdout
    if fmt == "latex":
        require_pdflatex()
        (tmp_path / "traced.tex").write_text(done.stdout)
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "traced.tex"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout[-3000:]
