"""Published measurements of GPU memory in real runs, and what memderive derives for each.

Each entry names its source (a repository, file and commit or table, or an issue with the log), the full
setup as published (model, precision recipe, optimizer, batch, sequence, parallelism, recompute,
attention, framework and versions where given) and what was measured:

* ``allocated``: ``torch.cuda.max_memory_allocated`` (transformers' documentation prints it);
* ``active``: ``memory_stats()["active_bytes.all.peak"]``, torchtune's "peak memory active" (the same
  blocks as allocated, counted while in use);
* ``reserved``: ``torch.cuda.max_memory_reserved`` (torchtitan's "memory");
* ``device``: nvidia-smi / ``cudaMemGetInfo`` (transformers' ``print_gpu_utilization``);
* ``vllm_kv_memory`` and ``vllm_kv_blocks``: what vLLM logs at start-up as the memory left to the KV
  cache and its number of GPU blocks.

The derived side runs ``estimate`` with the framework's preset (``--framework``), the entry's options
and ``--gpu``, and reads the matching counter: ``runtime.allocated_bytes`` (allocated, active),
``reserved_bytes``, ``device_bytes``, or vLLM's start-up numbers (``derivations.quantities.serving``).
Settings a run used that memderive cannot express yet are in ``pending``: each is applied as soon as
``Options`` takes it (an option of that name and value), and until then the entry is evaluated without
it and says so (``unmodelled``). ``benchmarks/published_memory.py`` prints the table and the
distribution; ``tests/test_published_memory.py`` holds the distribution to the bounds achieved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.options import ArgumentError, Options, OptionsError
from tests.published_runs import TORCHTITAN_2025, TORCHTITAN_FLOAT8

__all__ = ["Measurement", "MEASUREMENTS", "KINDS", "PENDING_WHY", "BERT_LARGE", "LLAMA_3_2_3B", "LLAMA_3_1_405B", "STARCODER",
           "QWEN3_235B"]

GIB, MIB = 2**30, 2**20
KINDS = ("allocated", "active", "reserved", "device", "vllm_kv_memory", "vllm_kv_blocks")

#: google-bert/bert-large-uncased (config.json): BertModel 335,141,888 parameters (the classifier of
#: AutoModelForSequenceClassification adds 2,050).
BERT_LARGE = {"model_type": "bert", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 24,
              "intermediate_size": 4096, "vocab_size": 30522, "max_position_embeddings": 512, "type_vocab_size": 2}
#: meta-llama/Llama-3.2-3B config.json (tied embeddings).
LLAMA_3_2_3B = {"model_type": "llama", "hidden_size": 3072, "num_attention_heads": 24, "num_key_value_heads": 8,
                "num_hidden_layers": 28, "intermediate_size": 8192, "vocab_size": 128256, "head_dim": 128,
                "max_position_embeddings": 131072, "tie_word_embeddings": True, "hidden_act": "silu"}
#: meta-llama/Llama-3.1-405B config.json.
LLAMA_3_1_405B = {"model_type": "llama", "hidden_size": 16384, "num_attention_heads": 128, "num_key_value_heads": 8,
                  "num_hidden_layers": 126, "intermediate_size": 53248, "vocab_size": 128256,
                  "max_position_embeddings": 131072, "tie_word_embeddings": False, "hidden_act": "silu"}
#: bigcode/octocoder (= bigcode/starcoder's shape) config.json: GPTBigCode, multi-query attention.
STARCODER = {"model_type": "gpt_bigcode", "n_embd": 6144, "n_head": 48, "n_layer": 40, "n_positions": 8192,
             "vocab_size": 49152, "multi_query": True, "n_inner": 24576, "activation_function": "gelu_pytorch_tanh"}
#: Qwen/Qwen3-235B-A22B config.json: 94 layers, 128 experts of width 1536, 8 per token, 4 KV heads.
QWEN3_235B = {"model_type": "qwen3_moe", "hidden_size": 4096, "num_attention_heads": 64, "num_key_value_heads": 4,
              "head_dim": 128, "num_hidden_layers": 94, "intermediate_size": 12288, "moe_intermediate_size": 1536,
              "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "max_position_embeddings": 40960,
              "tie_word_embeddings": False, "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []}


#: What each pending setting changes, for the reasons of the cases outside 0.8-1.25 (issue 21, item 2).
PENDING_WHY = {
    "precision": "the precision recipe (pure bf16: no fp32 master, 16-bit optimizer states; autocast: fp32 "
                 "weights with 16-bit copies saved beside) stands in as Megatron-style master mixed precision",
    "loss_chunks": "chunked cross-entropy (one chunk of fp32 logits at a time) stands in as the whole V x s loss",
    "compile": "torch.compile's partitioner (it saves fewer, fused tensors) stands in as eager autograd",
    "optimizer_in_backward": "the optimizer step fused into backward (each gradient freed at once) stands in as "
                             "all gradients held until the step",
    "offload_params": "FSDP CPU offload of the parameters, gradients and optimizer states stands in as all on GPU",
    "fp8": "Float8 linears stand in as bf16",
    "optimizer": "Adafactor's factored second moments stand in as AdamW's two fp32 moments",
}


#: Settings ``Options`` takes whose effect is modelled only in part, and what is left out.
PARTIAL_WHY = {
    ("precision", "autocast"): "torch.autocast's model states (fp32 weights, gradients, states) are modelled; the "
                               "16-bit casts autograd saves beside the fp32 tensors are written out only for "
                               "layers symbolic.autocast covers, and the step timeline leaves autocast out (the "
                               "sum stands in for the peak)",
}


@dataclass(frozen=True)
class Measurement:
    """One published measurement: ``measured`` bytes (or blocks) of kind ``kind`` for ``model`` run as
    ``options`` say (estimate keywords; ``pending``: settings memderive cannot express yet)."""

    name: str
    source: str
    setup: str
    model: Any
    options: dict
    measured: int
    kind: str
    pending: dict = field(default_factory=dict)
    note: str = ""

    def _takes(self, key: str, value: Any) -> bool:
        try:
            Options.from_keywords({**self.options, key: value})
        except (ArgumentError, OptionsError, TypeError, ValueError):
            return False
        return True

    @property
    def unmodelled(self) -> dict:
        """The pending settings ``Options`` does not take yet (the entry is evaluated without them)."""
        return {k: v for k, v in self.pending.items() if not self._takes(k, v)}

    @property
    def partial(self) -> dict:
        """The settings applied whose effect is modelled only in part (``PARTIAL_WHY``): autocast where the
        graph's layers are not run under ``symbolic.autocast``."""
        cast = any(x.startswith("torch.autocast") for x in self.estimate().graph.strategies)
        return {k: v for k, v in self.options_used().items() if (k, v) in PARTIAL_WHY
                and not (cast and (k, v) == ("precision", "autocast"))}

    def options_used(self) -> dict:
        return {**self.options, **{k: v for k, v in self.pending.items() if k not in self.unmodelled}}

    def estimate(self) -> Any:
        return estimate(self.model, **self.options_used())

    def derived(self) -> int:
        from memderive.derivations.quantities.runtime import runtime
        from memderive.derivations.quantities.serving import vllm_startup

        est = self.estimate()
        if self.kind.startswith("vllm"):
            v = vllm_startup(est)
            return v.kv_cache_bytes if self.kind == "vllm_kv_memory" else v.kv_cache_blocks
        r = runtime(est)
        return {"allocated": r.allocated_bytes, "active": r.allocated_bytes, "reserved": r.reserved_bytes,
                "device": r.device_bytes}[self.kind]

    def ratio(self) -> float:
        return self.measured / self.derived()

    def reason(self) -> str:
        """Why the ratio may be off: the settings not modelled yet, the step's peak where the sum stands in
        for it (what the step timeline does not model, or ops run as fused calls), and the entry's note."""
        parts = [f"not modelled: {key}={value} ({PENDING_WHY[key]})" for key, value in self.unmodelled.items()]
        parts += [f"in part: {key}={value} ({PARTIAL_WHY[key, value]})" for key, value in self.partial.items()]
        return "; ".join([*parts, *([self.sum_why()] if self.sum_why() else []), *([self.note] if self.note else [])])

    def sum_why(self) -> str:
        """For a training measurement whose derived side is ``total_bytes`` (the sum of model states and saved
        tensors) rather than the step's high-water mark: why (``quantities.runtime``)."""
        from memderive.derivations.quantities.step import runs_calls

        est = self.estimate()
        if est.options.mode != "train" or self.kind.startswith("vllm"):
            return ""
        if est.peak_note():
            return f"the sum stands in for the peak: {est.peak_note().removesuffix(': no peak_bytes')}"
        if not runs_calls(est.graph):
            return "the sum stands in for the peak: the step runs as fused calls (no backward temporaries)"
        return ""


def _bert(name: str, measured_mib: int, batch: int, note: str = "", **options: Any) -> Measurement:
    """transformers' documentation, bert-large-uncased with Trainer on a V100 16GB, nvidia-smi at the end
    of training (``print_gpu_utilization``: ``nvmlDeviceGetMemoryInfo(handle).used // 1024**2``)."""
    pending = {k: options.pop(k) for k in ("optimizer", "precision") if k in options and
               options[k] in ("adafactor", "autocast")}
    ga = "" if batch == 4 else ", gradient_accumulation_steps=4"
    return Measurement(
        f"bert-large b{batch}{' ga4' if batch == 1 else ''} {name}", "huggingface/transformers docs/source/en/perf_train_gpu_one.md (v4.26-v4.30, "
        "2023; same runs in docs/source/zh/perf_train_gpu_one.md) and model_memory_anatomy.md",
        f"AutoModelForSequenceClassification bert-large-uncased, 512 random tokens, per_device_train_batch_size="
        f"{batch}{ga}, {name} (gc: gradient_checkpointing=True, fp16: fp16=True, adafactor: optim='adafactor', "
        "adam8bit: bitsandbytes Adam8bit); Trainer defaults otherwise (AdamW, fp32); Tesla V100-SXM2 16GB, driver "
        "460.91.03, "
        "CUDA 11.2 (eager kernel loading: 1343 MiB after the first tensor)",
        BERT_LARGE, {"mode": "train", "batch": batch, "seq": 512, "framework": "hf-trainer", "gpu": "v100-16gb",
                     "cuda_module_loading": "eager", "attention": "eager", **options},
        measured_mib * MIB, "device", pending, note or "transformers of January 2022 (v4.15) ran BERT's eager "
        "attention (BertSdpaSelfAttention came in v4.41)")


HF_BERT = [  # gc: gradient_checkpointing=True; fp16: fp16=True; adam8bit: bitsandbytes' Adam8bit optimizer
    _bert("fp32", 14949, 4),
    _bert("fp32", 8681, 1),
    _bert("gc", 6775, 1, recompute="full"),
    _bert("fp16", 13939, 4, dtype="fp16", precision="autocast"),
    _bert("gc fp16", 7275, 1, recompute="full", dtype="fp16", precision="autocast"),
    _bert("adafactor", 12295, 4, optimizer="adafactor"),
    _bert("gc fp16 adafactor", 4847, 1, recompute="full", dtype="fp16", precision="autocast", optimizer="adafactor"),
    _bert("adam8bit", 13085, 4, optimizer="adam-8bit"),
    _bert("gc fp16 adam8bit", 5363, 1, recompute="full", dtype="fp16", precision="autocast", optimizer="adam-8bit"),
]

_TT_README = ("pytorch/torchtune README.md at 30b8519e8 (2024-09-24, 'Memory and training speed' table); "
              "configs recipes/configs/llama3_1/*.yaml at the same commit")
_TT_COMMON = ("batch size 2, no gradient accumulation, dataset packed to 2048 tokens, torch.compile on (the "
              "table's note); bf16 weights (dtype: bf16), chunked cross-entropy (CEWithChunkedOutputLoss)")
#: What torchtune's recipes run that memderive expresses with options not all of which exist yet.
_TT_PENDING = {"precision": "pure", "loss_chunks": 8, "compile": "layers"}
_LORA_8B = {"lora_rank": 8, "lora_targets": "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
            "optimizer": "adamw"}
_QLORA_8B = {**_LORA_8B, "lora_targets": "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", "base_dtype": "nf4"}
_A6000 = ("the README gives no per-row config; the A6000 rows' memory (and throughput) imply activation "
          "checkpointing off (assumed: on the 4090 it is on, as in the config)")


def _tt(name: str, gib: float, model: Any, gpu: str, setup: str, note: str = "", pending: dict | None = None,
        **options: Any) -> Measurement:
    return Measurement(f"torchtune {name}", _TT_README, f"{setup}; {_TT_COMMON}", model,
                       {"mode": "train", "batch": 2, "seq": 2048, "framework": "torchtune", "gpu": gpu, **options},
                       int(gib * GIB), "active", {**_TT_PENDING, **(pending or {})}, note)


TORCHTUNE_README = [
    _tt("Llama 3.1 8B full, 1x 4090", 18.9, "llama-3-8b", "rtx-4090", "full_finetune_single_device, "
        "8B_full_single_device.yaml: PagedAdamW8bit, optimizer_in_bwd: True, activation checkpointing",
        pending={"optimizer_in_backward": True}),
    _tt("Llama 3.1 8B full, 1x A6000", 37.4, "llama-3-8b", "a6000", "as the 4090 row", _A6000,
        pending={"optimizer_in_backward": True}, recompute="none"),
    _tt("Llama 3.1 8B LoRA, 1x 4090", 16.2, "llama-3-8b", "rtx-4090", "lora_finetune_single_device, "
        "8B_lora_single_device.yaml: rank 8 on q, v, output_proj and the MLP, fused AdamW, checkpointing",
        **_LORA_8B),
    _tt("Llama 3.1 8B LoRA, 1x A6000", 30.3, "llama-3-8b", "a6000", "as the 4090 row", _A6000, recompute="none",
        **_LORA_8B),
    _tt("Llama 3.1 8B QLoRA, 1x 4090", 7.4, "llama-3-8b", "rtx-4090", "8B_qlora_single_device.yaml: NF4 base "
        "(torchao), rank 8 on q, k, v, output_proj and the MLP, fused AdamW, checkpointing", **_QLORA_8B),
    _tt("Llama 3.1 70B full, 8x A100", 13.9, "llama-3-70b", "a100-80gb", "full_finetune_distributed, 70B_full.yaml: "
        "FSDP over 8, fsdp_cpu_offload: True, fused AdamW in backward (the table's '**'), checkpointing",
        pending={"offload_params": True, "optimizer_in_backward": True}, dp=8, zero=3, optimizer="adamw"),
    _tt("Llama 3.1 70B LoRA, 8x A100", 27.6, "llama-3-70b", "a100-80gb", "lora_finetune_distributed, "
        "70B_lora.yaml: FSDP over 8, rank 16 on q, k, v, fused AdamW, checkpointing", dp=8, zero=3,
        lora_rank=16, lora_targets="q_proj,k_proj,v_proj", optimizer="adamw"),
    _tt("Llama 3.1 405B QLoRA, 8x A100", 44.8, LLAMA_3_1_405B, "a100-80gb", "lora_finetune_distributed, "
        "405B_qlora.yaml: FSDP over 8, NF4 base, rank 16 on q, k, v, output_proj and the MLP, fused AdamW, "
        "checkpointing", "the table prints '44.8 GB' for this row, GiB for the others (read as GiB)", dp=8,
        zero=3, lora_rank=16, lora_targets="q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
        base_dtype="nf4", optimizer="adamw"),
]

_TT_FLAGS = ("pytorch/torchtune README.md at bd2a0fc7c ('Optimization flags' table, added in 1814feb17, "
             "2024-11-18): 'Peak Memory Active (GiB)'")
_TT_FLAGS_SETUP = ("full_finetune_single_device, Llama 3.2 3B, batch size 2, max sequence length 4096, bf16, A100; "
                   "each technique on top of the previous (optimizer torch.optim.AdamW until 8-bit AdamW)")


def _flags(name: str, gib: float, pending: dict, **options: Any) -> Measurement:
    return Measurement(f"torchtune 3B {name}", _TT_FLAGS, f"{_TT_FLAGS_SETUP}: {name}", LLAMA_3_2_3B,
                       {"mode": "train", "batch": 2, "seq": 4096, "framework": "torchtune", "gpu": "a100-80gb",
                        "optimizer": "adamw", **options}, int(gib * GIB), "active",
                       {"precision": "pure", **pending}, "rows after activation offloading are left out: "
                       "memderive does not model offloaded activations")


TORCHTUNE_FLAGS = [
    # the first two rows ran before chunked cross-entropy was turned on: the whole V x s loss (loss_chunks 1)
    _flags("+ packed dataset", 60.0, {}, recompute="none", loss_chunks=1),
    _flags("+ compile", 51.0, {"compile": "layers"}, recompute="none", loss_chunks=1),
    _flags("+ chunked cross-entropy", 42.9, {"compile": "layers", "loss_chunks": 8}, recompute="none"),
    _flags("+ activation checkpointing", 24.9, {"compile": "layers", "loss_chunks": 8}),
    _flags("+ optimizer step in backward", 23.1, {"compile": "layers", "loss_chunks": 8, "optimizer_in_backward": True}),
]

_TITAN = ("pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md (torchtitan 9dec370, torch 1963fc8, "
          "2024-12): 'Memory(GiB)', the max_reserved torchtitan logs (torchtitan/metrics.py)")


def _titan(name: str, gib: float, gpus: int, setup: str, note: str, pending: dict | None = None,
           **options: Any) -> Measurement:
    return Measurement(f"torchtitan Llama 3.1 8B {name}", _TITAN, setup, "llama-3-8b",
                       {"mode": "train", "framework": "torchtitan", "gpu": "h100-sxm", "dp": gpus, **options},
                       int(gib * GIB), "reserved", pending or {},
                       f"{note} Grand Teton H100s with 96 GB HBM2e (not in the GPU table: h100-sxm stands in; the "
                       "derived reserved bytes do not depend on the capacity)".strip())


_LOSS = ("torchtitan's op-level checkpointing is modelled in the sum (--recompute selective-op, the preset); "
         "what is left is the loss path: torchtitan's loss, cross_entropy(pred.flatten(0, 1).float(), ...), "
         "holds in backward log_softmax's fp32 output, the fp32 gradient nll_loss gives it and the fp32 gradient "
         "it gives back, 3 x b s V x 4 B = 23.5 GiB at b 2, s 8192 (the step's peak), where the sum holds the "
         "first, 7.8 GiB. The step timeline would hold all three (as it does for transformers' loss, checked on "
         "CPU), but not under FSDP (ZeRO-3) with selective recompute, so the sum stands in.")
TORCHTITAN = [
    _titan("FSDP, 8 GPUs", 82.4, 8, "Table 1: FSDP over 8 H100s, local batch 2, seq 8192 (llama3_8b.toml), "
           "selective activation checkpointing, bf16 params / fp32 reduce, AdamW", _LOSS, batch=2, seq=8192),
    _titan("FSDP, 128 GPUs", 67.0, 128, "Table 3: FSDP over 128 H100s, local batch 2, seq 8192, selective "
           "activation checkpointing", _LOSS, batch=2, seq=8192),
    _titan("FSDP, 8 GPUs, seq 32768", 83.9, 8, "Table 2: FSDP 8, CP 1, local batch 1, seq 32768, full activation "
           "checkpointing, torch.compile, Float8 linears", "The loss path at 32,768 tokens holds several V x s "
           "buffers (bf16 logits, their fp32 upcast, the fp32 gradient), one in the derivation (issue 21, item "
           "1); the allocator grows its reserve towards the 96 GB it has.", {"compile": "layers", "fp8": "tensorwise"},
           batch=1, seq=32768, recompute="full"),
]

#: Tables 5-6 (Llama 3.1 405B, FSDP 8 (x CP), TP 8, PP 8, torch.compile, Float8, AsyncTP, full checkpointing): the
#: page's 'Memory(GiB)', the largest over the PP ranks (its note 1); the layouts as tests/published_runs
#: TORCHTITAN_FLOAT8 runs them (ZeRO-2: torchtitan's reshard_after_forward False with PP, 8 micro-batches, 15-layer
#: first stage), memderive's first stage (1F1B's pp micro-batches in flight). FSDP2 under
#: torch.distributed.pipelining holds the stage's 16-bit weights and fp32 gradients whole
#: (model_states.pipelined_fsdp2): without it these rows read 1.64-1.98.
_TITAN_PP_GIB = {"405B FSDP8 TP8 PP8 1F1B Float8": 82.5, "405B FSDP8 TP8 PP8 i1F1B Float8": 72.7,
                 "405B FSDP8 CP1 TP8 PP8 Float8": 75.3, "405B FSDP4 CP2 TP8 PP8 Float8": 75.9,
                 "405B FSDP2 CP4 TP8 PP8 Float8": 77.1, "405B FSDP1 CP8 TP8 PP8 Float8": 84.9}
TORCHTITAN_PP = [
    Measurement(f"torchtitan Llama 3.1 {run.name}", _TITAN, f"{run.source.split(', ')[-1]}: {run.note}",
                run.model, {"mode": "train", "gpu": "h100-sxm", "seq": run.seq, **run.layout},
                int(_TITAN_PP_GIB[run.name] * GIB), "reserved", {"compile": "layers"},
                "The page's maximum over the 8 pipeline ranks, memderive's first stage. Grand Teton H100s with 96 GB "
                "HBM2e (h100-sxm stands in)")
    for run in TORCHTITAN_FLOAT8 if run.name in _TITAN_PP_GIB]

_TRAINY = ("pytorch/torchtitan benchmarks/llama3-8b_h200_202506_trainy-whitefiber.md (torchtitan e7c0cae, torch "
           "2.8.0a0+5228986c39, 2025-06): 'Memory(GiB)' at the 100th step, the max_reserved torchtitan logs "
           "(torchtitan/components/metrics.py at e7c0cae L403, 'memory: {max_reserved_gib}'; the peak reset at each "
           "log, every 10 steps)")
#: Trainy's two H200 rows as tests/published_runs TORCHTITAN_2025 runs them (FSDP 32 and 64, local batch 2, seq
#: 8,192, selective-op checkpointing, Float8 tensorwise with the output layer 16-bit); torch.compile pending.
_TRAINY_GIB = {"8B H200 FSDP32 Float8": 47.96, "8B H200 FSDP64 Float8": 46.97}
TORCHTITAN_H200 = [
    Measurement(f"torchtitan Llama 3.1 {run.name}", _TRAINY, f"{run.source.split(', ')[-1]}: {run.note}",
                run.model, {"mode": "train", "gpu": "h200", "seq": run.seq, **run.layout},
                int(_TRAINY_GIB[run.name] * GIB), "reserved", {"compile": "layers"},
                "torchtitan at e7c0cae compiles the loss too (components/loss.py L27-29, torch.compile(loss_fn) "
                "under training.compile): the fp32 V x s buffers the eager loss holds (_LOSS) are not all there; "
                "FSDP's Float8 all-gather (the gathered weights in 8 bits) is not modelled either; memderive's "
                "selective-op keeps every Float8 linear's output (torchtitan's 2026 policy), e7c0cae's _save_list "
                "names aten.mm, not _scaled_mm (tests/published_runs.TITAN_2025_GAP)")
    for run in TORCHTITAN_2025 if run.name in _TRAINY_GIB]

_OCTO = ("huggingface/transformers docs/source/en/llm_tutorial_optimization.md ('Optimizing LLMs for Speed and "
         "Memory', 2023): bytes_to_giga_bytes(torch.cuda.max_memory_allocated()), bytes / 1024**3")
_OCTO_SETUP = ("bigcode/octocoder with transformers' pipeline('text-generation'), the short prompt ('Question: "
               "Please write a function in Python that transforms bytes to Giga bytes.\\n\\nAnswer:', about 20 "
               "tokens: assumed 20), max_new_tokens=60, batch 1, on an A100 (the guide runs on a 40 GB A100)")

TRANSFORMERS_GENERATE = [
    Measurement("octocoder bf16 generate", _OCTO, f"{_OCTO_SETUP}; torch_dtype=torch.bfloat16", STARCODER,
                {"mode": "infer", "batch": 1, "seq": 20, "new_tokens": 60, "gpu": "a100-40gb"},
                int(29.0260648727417 * GIB), "allocated"),
    Measurement("octocoder 8-bit generate", _OCTO, f"{_OCTO_SETUP}; load_in_8bit=True (LLM.int8(), fp16 rest)",
                {**STARCODER, "quantization_config": {"quant_method": "bitsandbytes", "_load_in_8bit": True}},
                {"mode": "infer", "batch": 1, "seq": 20, "new_tokens": 60, "gpu": "a100-40gb"},
                int(15.219234466552734 * GIB), "allocated",
                note="the quantization_config transformers writes for load_in_8bit: int8 weights, one fp32 scale "
                     "per row (SCB)"),
    Measurement("octocoder 4-bit generate", _OCTO, f"{_OCTO_SETUP}; load_in_4bit=True (bitsandbytes FP4, blocks "
                "of 64 with fp32 absmax, fp16 rest)",
                {**STARCODER, "quantization_config": {"quant_method": "bitsandbytes", "_load_in_4bit": True,
                                                      "bnb_4bit_quant_type": "fp4"}},
                {"mode": "infer", "batch": 1, "seq": 20, "new_tokens": 60, "gpu": "a100-40gb"},
                int(9.543574333190918 * GIB), "allocated",
                note="the quantization_config transformers writes for load_in_4bit: FP4 codes, one fp32 absmax per "
                     "64 weights (no double quantization)"),
]

VLLM = [
    Measurement("vLLM Llama-3-8B, H100", "vllm-project/vllm#10511 (youkaichao, 2024-12-14, sanity checks): "
                "'available_kv_cache_memory 53.29GiB'",
                "vllm serve meta-llama/Meta-Llama-3-8B, tp 1, H100 80GB (total_gpu_memory 79.22GiB), "
                "gpu_memory_utilization 0.90, V0 engine (v0.6.5 dev), max_model_len 8192, bf16; log: weights "
                "14.96GiB, non_torch_memory 1.79GiB, activation peak 1.26GiB",
                "llama-3-8b", {"mode": "infer", "batch": 1, "seq": 8192, "framework": "vllm", "gpu": "h100-sxm",
                               "max_num_batched_tokens": 8192, "max_num_seqs": 256}, int(53.29 * GIB),
                "vllm_kv_memory", note="V0 of that date captured CUDA graphs after sizing the cache (memderive "
                "subtracts them, as since v0.21); its non-torch memory 1.79 GiB at tp 1 is not modelled"),
    Measurement("vLLM Llama-2-7B, A100", "vllm-project/vllm#2031 (WoosukKwon, 2023-12-12): '# GPU blocks: 7351'",
                "Llama2-7B, tp 1, 1x A100-80GB, gpu_memory_utilization 0.9 (default), block size 16, v0.2.x",
                "llama-2-7b", {"mode": "infer", "batch": 1, "seq": 4096, "framework": "vllm", "gpu": "a100-80gb",
                               "max_num_batched_tokens": 4096, "max_num_seqs": 256}, 7351, "vllm_kv_blocks",
                note="v0.2 profiled max(max_model_len, 2560) = 4096 tokens and captured no CUDA graphs"),
    Measurement("vLLM Llama-2-70B, 4x A100", "vllm-project/vllm#2031 (WoosukKwon, 2023-12-12): "
                "'# GPU blocks: 20865'", "Llama2-70B, tp 4, 4x A100-80GB, gpu_memory_utilization 0.9, block 16, "
                "v0.2.x", "llama-2-70b", {"mode": "infer", "batch": 1, "seq": 4096, "tp": 4, "framework": "vllm",
                                          "gpu": "a100-80gb", "max_num_batched_tokens": 4096, "max_num_seqs": 256},
                20865, "vllm_kv_blocks", note="the same PR reports 31,615 blocks for main before it (profiling "
                "by torch's peak alone; memderive derives 31,766 with NCCL at 688 MiB); its new profiling "
                "counts all memory outside torch during the TP-4 profiling run (the PR saw 77.5 GB in use at "
                "gpu_memory_utilization 0.9), about 12 GiB more than the NCCL buffers memderive models"),
    Measurement("vLLM Qwen3-235B-A22B-FP8, 4x H100", "vllm-project/vllm#21348 (2025-07-22): 'Available KV cache "
                "memory: 8.11 GiB'", "vllm serve Qwen3-235B-A22B-FP8 --tensor-parallel-size 4 on 4x H100, V1 "
                "engine defaults (gpu_memory_utilization 0.9, max_model_len 40960, block 16), FP8 block-quantized "
                "weights, bf16 KV cache", QWEN3_235B,
                {"mode": "infer", "batch": 1, "seq": 40960, "tp": 4, "framework": "vllm", "gpu": "h100-sxm",
                 "weight_dtype": "fp8"}, int(8.11 * GIB), "vllm_kv_memory",
                note="the launch added an LMCache KV connector (--kv-transfer-config LMCacheConnectorV1) whose "
                     "GPU buffers are not modelled, and the KV cache is what 71.3 GiB leave after 55 GiB of FP8 "
                     "weights and the fused-MoE workspace: a small difference of large numbers"),
]

MEASUREMENTS = (HF_BERT + TORCHTUNE_README + TORCHTUNE_FLAGS + TORCHTITAN + TORCHTITAN_PP + TORCHTITAN_H200
                + TRANSFORMERS_GENERATE + VLLM)
