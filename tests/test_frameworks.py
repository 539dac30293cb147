"""``--framework``: each preset sets options to the framework's defaults (cited), every one overridable, all
echoed; and vLLM's start-up numbers (budget, profiling run, KV blocks, concurrency) as its source computes
them (``vllm/v1/worker/gpu_worker.py``, ``vllm/v1/core/kv_cache_utils.py``)."""

from __future__ import annotations

import json
import math

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import FRAMEWORKS, apply_framework, preset_values
from memderive.derivations.hardware import gpu
from memderive.derivations.option_table import OPTIONS_BY_NAME
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.serving import (CUDA_GRAPH_BYTES, CUDA_GRAPH_SIZES, batch_defaults,
                                                      vllm_startup)

TRAIN = {"mode": "train", "batch": 1, "seq": 64}
INFER = {"mode": "infer", "batch": 1, "seq": 64}


def test_every_setting_is_a_cited_option() -> None:
    for fw in FRAMEWORKS.values():
        assert fw.mode in ("train", "infer") and fw.settings
        for s in fw.settings:
            assert s.option in OPTIONS_BY_NAME, (fw.name, s.option)
            assert fw.mode in OPTIONS_BY_NAME[s.option].modes, (fw.name, s.option)
            assert s.source, (fw.name, s.option)
        mode = {"mode": fw.mode, "batch": 1, "seq": 64}
        assert Options.from_keywords({**mode, "framework": fw.name}).framework == fw.name


@pytest.mark.parametrize(("name", "expected"), [
    ("hf-trainer", {"dtype": "fp32", "optimizer": "adamw", "recompute": "none", "implementation": "hf"}),
    ("torchtune", {"dtype": "bf16", "optimizer": "paged-adamw-8bit", "recompute": "full", "dropout": False}),
    ("torchtitan", {"dtype": "bf16", "recompute": "selective-op", "attention": "flash", "dropout": False}),
    ("megatron", {"implementation": "megatron", "recompute": "none", "dropout": True}),
    ("deepspeed", {"dtype": "fp32", "zero": 0}),
])
def test_presets_are_the_frameworks_defaults(name: str, expected: dict) -> None:
    """The values of the cited configs: TrainingArguments (fp32 unless bf16=True, optim adamw_torch,
    gradient_checkpointing False); torchtune's 8B_full_single_device.yaml (dtype bf16, PagedAdamW8bit,
    enable_activation_checkpointing True); torchtitan's llama3_8b.toml (mode 'selective', selective_ac_option 'op'); Megatron's parser
    (no recompute, dropout 0.1); DeepSpeed's config (stage 0, fp16/bf16 off)."""
    opts = Options.from_keywords({**TRAIN, "framework": name})
    assert {k: getattr(opts, k) for k in expected} == expected


def test_an_explicit_option_wins_over_the_preset(capsys) -> None:
    assert Options.from_keywords({**TRAIN, "framework": "torchtune", "recompute": "none"}).recompute == "none"
    assert Options.from_keywords({**TRAIN, "framework": "torchtune", "dropout": True}).dropout is True
    # on the command line too, a switch either way: --dropout undoes torchtune's no-dropout
    words = ["estimate", "--model", "gpt2", "--mode", "train", "--batch", "1", "--seq", "64", "--framework",
             "torchtune", "--json"]
    assert main([*words, "--recompute", "none", "--dropout", "--optimizer", "adamw"]) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["recompute"], inputs["dropout"], inputs["optimizer"], inputs["dtype"]) == \
        ("none", True, "adamw", "bf16")  # dtype still the preset's
    assert main(words) == 0
    inputs = json.loads(capsys.readouterr().out)["inputs"]
    assert (inputs["recompute"], inputs["dropout"], inputs["optimizer"], inputs["framework"]) == \
        ("full", False, "paged-adamw-8bit", "torchtune")


def test_conditional_setting_follows_the_layout() -> None:
    """torchtitan shards with FSDP (ZeRO-3) over its data-parallel ranks; one GPU has none to shard over."""
    assert preset_values("torchtitan", {"dp": 8})["zero"] == 3
    assert Options.from_keywords({**TRAIN, "framework": "torchtitan", "dp": 8}).zero == 3
    assert Options.from_keywords({**TRAIN, "framework": "torchtitan"}).zero == 0
    assert apply_framework({"framework": None, "tp": 2}) == {"framework": None, "tp": 2}


def test_a_framework_in_the_wrong_mode_is_one_line(capsys) -> None:
    with pytest.raises(OptionsError, match="--mode infer"):
        Options.from_keywords({**TRAIN, "framework": "vllm"})
    code = main(["estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "8", "--framework",
                 "torchtune"])
    err = capsys.readouterr().err
    assert code == 2 and "--mode train" in err and len(err.strip().splitlines()) == 1
    code = main(["estimate", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "8",
                 "--gpu-memory-utilization", "0.5"])
    err = capsys.readouterr().err
    assert code == 2 and "--framework vllm" in err


def test_vllm_batch_defaults_by_gpu() -> None:
    """EngineArgs.get_batch_defaults, vllm serve (OPENAI_API_SERVER): 8192 tokens and 1024 sequences on
    GPUs of at least 70 GiB that are not A100s, 2048 and 256 on the rest."""
    assert batch_defaults(gpu("h100-sxm")) == batch_defaults(gpu("h200")) == (8192, 1024)
    assert batch_defaults(gpu("a100-80gb")) == batch_defaults(gpu("l40s")) == batch_defaults(gpu("t4")) == (2048, 256)


def test_vllm_blocks_and_concurrency_by_hand() -> None:
    """llama-3-8b on an H100 (total 79.22 GiB as vLLM logs it, vllm#10511), utilization 0.9: a page is
    2 * 16 * 8 * 128 * 2 B = 65,536 B per layer, 2 MiB over 32 layers. The budget is int(0.9 * total); the
    KV cache gets it less the 16,060,522,496 B of bf16 weights (8,030,261,248 parameters), the profiled
    peak and the CUDA graphs; blocks = that // 2 MiB; concurrency at 8192 tokens = blocks / 512."""
    est = estimate("llama-3-8b", **{**INFER, "seq": 8192}, framework="vllm", gpu="h100-sxm")
    v = vllm_startup(est)
    assert v.block_bytes == 2 * 16 * 8 * 128 * 2 * 32 == 2_097_152
    assert v.budget == int(int(79.22 * 2**30) * 0.9)
    assert v.weights == 2 * 8_030_261_248
    assert v.cuda_graphs == CUDA_GRAPH_SIZES * CUDA_GRAPH_BYTES and CUDA_GRAPH_SIZES == 51
    kv = v.budget - v.weights - v.activation_peak - v.cuda_graphs
    assert v.kv_cache_blocks == kv // 2_097_152 and v.kv_cache_tokens == 16 * v.kv_cache_blocks
    assert v.max_concurrent_sequences == v.kv_cache_blocks / 512
    # the sampler of the profiling run: 1024 rows of fp32 logits over V = 128,256, and one copy
    assert v.activation_peak >= 2 * 4 * 1024 * 128_256


def test_vllm_tensor_parallel_pages_and_nccl() -> None:
    """llama-3-70b over tp 4: 8 KV heads / 4 = 2 per GPU, a block is 2 * 16 * 2 * 128 * 2 B * 80 layers =
    1,310,720 B; one NCCL communicator of 4 ranks (688 MiB) is the non-torch memory."""
    est = estimate("llama-3-70b", **{**INFER, "seq": 8192}, tp=4, framework="vllm", gpu="h100-sxm")
    v = vllm_startup(est)
    assert v.block_bytes == 2 * 16 * 2 * 128 * 2 * 80 == 1_310_720
    assert v.non_torch == 688 * 2**20


def test_vllm_json_and_text(capsys) -> None:
    words = ["estimate", "--model", "llama-3-8b", "--mode", "infer", "--batch", "1", "--seq", "4000",
             "--new-tokens", "96", "--framework", "vllm", "--gpu", "a100-80gb", "--gpu-memory-utilization", "0.8"]
    assert main([*words, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["vllm"]["gpu_memory_utilization"] == 0.8 and data["vllm"]["max_model_len"] == 4096
    assert data["vllm"]["max_num_batched_tokens"] == 2048 and data["inputs"]["kv_block"] == 16
    assert data["max_concurrent_sequences"] == data["kv_cache_blocks"] / math.ceil(4096 / 16)
    assert data["device_bytes"] > data["reserved_bytes"] >= data["allocated_bytes"]
    assert main(words) == 0
    assert "# GPU blocks" in capsys.readouterr().out
    assert main([*words[:-2], "--json"]) == 0  # without the flag: vLLM's default 0.9
    assert json.loads(capsys.readouterr().out)["vllm"]["gpu_memory_utilization"] == 0.9
