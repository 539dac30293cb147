"""What each framework runs unless told otherwise: ``--framework`` sets the options to its defaults.

A preset is a table of settings, each an option, the value the framework's own defaults give it and
the config file or source line that says so. Options given explicitly win over the preset (a flag on
the command line, a keyword of ``estimate``, a key of a notes marker); every value, preset or given,
is echoed in the inputs. Presets are applied where options are read from keywords
(``Options.from_keywords``, the CLI, notes markers); ``Options(...)`` itself takes its fields as given.

>>> apply_framework({"framework": "torchtune", "mode": "train", "recompute": "none"})["recompute"]
'none'
>>> apply_framework({"framework": "torchtune", "mode": "train"})["recompute"]
'full'
>>> sorted(FRAMEWORKS)
['deepspeed', 'hf-trainer', 'megatron', 'torchtitan', 'torchtune', 'vllm']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Framework", "Setting", "Limit", "PlanSpace", "FRAMEWORKS", "apply_framework", "preset_values",
           "blame_preset", "plan_space"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One default of a framework: ``option`` (an ``Options`` field) set to ``value``, as ``source``
    says; ``when``, if given, says for which other given options it applies (e.g. FSDP shards only over
    more than one data-parallel rank)."""

    option: str
    value: Any
    source: str
    when: Callable[[Mapping[str, Any]], bool] | None = None


@dataclass(frozen=True, slots=True)
class Limit:
    """What a framework cannot run, for the planner (``plan --framework``): ``PlanSpace`` field ``field`` set to
    ``value``, said in ``words`` (plan's one line), as ``source`` (the framework's code or docs) shows."""

    field: str
    value: Any
    words: str
    source: str


@dataclass(frozen=True, slots=True)
class PlanSpace:
    """The layouts a framework runs: the ZeRO stages (``zeros``; ``zeros_with_pp`` with pipeline stages), the
    recompute modes, and whether it has sequence, pipeline (interleaved: ``virtual``; uneven stages: ``uneven``),
    context and expert parallelism. The default offers everything the planner searches; ``Framework.limits`` narrow
    it, each with its source.

    >>> plan_space("deepspeed").zeros_with_pp, plan_space("megatron").zeros_with_pp
    ((0, 1), (0, 1, 2, 3))
    """

    zeros: tuple[int, ...] = (0, 1, 2, 3)
    zeros_with_pp: tuple[int, ...] = (0, 1, 2, 3)
    recomputes: tuple[str, ...] = ("none", "selective", "full")
    sp: bool = True
    pp: bool = True
    virtual: bool = True
    uneven: bool = True
    cp: bool = True
    ep: bool = True
    limits: tuple[Limit, ...] = ()

    def words(self) -> str:
        """The limits in one clause each, joined (empty without limits)."""
        return "; ".join(x.words for x in self.limits)


@dataclass(frozen=True, slots=True)
class Framework:
    name: str
    title: str
    mode: str  # the mode its defaults describe: "train" or "infer"
    settings: tuple[Setting, ...]
    notes: tuple[str, ...] = ()
    limits: tuple[Limit, ...] = ()  # what it cannot run (plan searches the rest: ``plan_space``)


def _dp(given: Mapping[str, Any]) -> bool:
    return int(given.get("dp") or 1) > 1


def _tp(given: Mapping[str, Any]) -> bool:
    return int(given.get("tp") or 1) > 1


def _sixteen_bit(default: str) -> Callable[[Mapping[str, Any]], bool]:
    """The run trains in 16 bits: the given --dtype, else the framework's own (``default``)."""
    return lambda given: given.get("dtype", default) in ("bf16", "fp16")


def _bf16_below_zero2(given: Mapping[str, Any]) -> bool:
    return given.get("dtype") == "bf16" and int(given.get("zero") or 0) < 2


def _master_in(dt: str) -> Callable[[Mapping[str, Any]], bool]:
    """The run keeps an fp32 master copy of ``dt`` weights: that --dtype (Megatron-LM's default bf16 for "bf16")
    and no other --precision given."""
    return lambda given: given.get("dtype", "bf16") == dt and given.get("precision", "master") == "master"


def _eager(given: Mapping[str, Any]) -> bool:
    return not given.get("compile")  # --compile: Inductor's fused kernels


def _torch_adam(given: Mapping[str, Any]) -> bool:
    return given.get("optimizer") in ("adamw", "adam")  # torchtune's configs with torch.optim.AdamW set fused: True


def _chunks(given: Mapping[str, Any]) -> bool:
    return int(given.get("seq") or 0) >= 8  # CEWithChunkedOutputLoss chunks the sequence 8 ways


_TA = "transformers src/transformers/training_args.py, TrainingArguments"
_TT = "torchtune recipes/configs/llama3_1/8B_full_single_device.yaml"
_TITAN = "torchtitan torchtitan/config_manager.py (JobConfig defaults) and train_configs/llama3_8b.toml"
_TITAN_TOML = "torchtitan train_configs/llama3_8b.toml at 0011fb9"
_MEG = "Megatron-LM megatron/training/arguments.py"
_DS = "DeepSpeed deepspeed/runtime/zero/config.py and deepspeed/runtime/config.py"
_VLLM = "vLLM vllm/config/cache.py (CacheConfig) and vllm/platforms/cuda.py (attention backend)"

_RECOMPUTES = "recomputes"
#: torchtune's full_finetune_distributed recipe (recipes/full_finetune_distributed.py, FullFinetuneRecipeDistributed
#: docstring): 'FSDP ... Resharding of parameters after the forward pass is done by default (corresponding to
#: FULL_SHARD sharding strategy), but can be disabled by setting the config fsdp_reshard_after_forward to False (this
#: corresponds to SHARD_GRAD_OP sharding strategy). DDP is currently not supported.'
_TT_FSDP = "torchtune recipes/full_finetune_distributed.py, FullFinetuneRecipeDistributed docstring"
_DS_PIPE = ("DeepSpeed deepspeed/runtime/pipe/engine.py, PipelineEngine.__init__: assert "
            "self.zero_optimization_stage() < 2, 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'")
_DS_SCHEDULE = ("DeepSpeed deepspeed/runtime/pipe/schedule.py: TrainSchedule, one 1F1B schedule over the stages "
                "(no interleaved model chunks)")
_DS_ULYSSES = ("DeepSpeed deepspeed/sequence/layer.py: DistributedAttention (Ulysses) splits the sequence with "
               "all-to-alls over the heads, not the ring attention --cp models (Megatron-Core's context parallelism)")
_NO_PIPELINE_HF = ("transformers src/transformers/training_args.py, TrainingArguments: DDP, FSDP (fsdp: full_shard, "
                   "shard_grad_op) and DeepSpeed ZeRO through accelerate; no pipeline-parallel option")
_TITAN_FSDP = ("torchtitan torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy "
               "(parallelism.fsdp_reshard_after_forward 'always' = ZeRO-3, 'never' = ZeRO-2; 'default': not with PP) "
               "and parallelism.data_parallel_replicate_degree (DDP); FSDP2 shards parameters, gradients and "
               "optimizer states together: no ZeRO-1")
_TITAN_AC = ("torchtitan torchtitan/config/job_config.py ActivationCheckpoint: mode 'none', 'full' or 'selective' "
             "(selective_ac_option 'op': the save list of parallelize_llama.py; Megatron's attention-core recompute "
             "is not among them)")
_MEG_AC = ("Megatron-LM megatron/training/arguments.py: --recompute-granularity full|selective (selective: the "
           "attention core, Korthikanti et al. 2022); torchtitan's per-op policy is not among them")

FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("hf-trainer", "Hugging Face Trainer (transformers)", "train", (
        Setting("implementation", "hf", "the Trainer trains the transformers model; attn_implementation defaults "
                "to sdpa (modeling_utils)"),
        Setting("dtype", "fp32", f"{_TA}: bf16=False, fp16=False (bf16=True runs torch.autocast)"),
        Setting("precision", "autocast", f"{_TA}: bf16=True / fp16=True make the Trainer's Accelerator run the "
                "forward under torch.autocast over the fp32 model (accelerate/accelerator.py, native_amp)",
                when=_sixteen_bit("fp32")),
        Setting("optimizer", "adamw", f"{_TA}: optim='adamw_torch'"),
        Setting("recompute", "none", f"{_TA}: gradient_checkpointing=False"),
        Setting("kernels", "eager", f"{_TA}: torch_compile=False (the model's PyTorch ops run one kernel each: "
                "LlamaRMSNorm's fp32 upcast, rotate_half, act_fn(gate) * up)", when=_eager),
    ), ("dropout as the model's config has it (model.train())",), (
        Limit("pp", False, "no pipeline stages", _NO_PIPELINE_HF),
        Limit(_RECOMPUTES, ("none", "full"), "recompute none or full (gradient_checkpointing wraps each layer whole)",
              f"{_TA}: gradient_checkpointing (transformers modeling_utils gradient_checkpointing_enable: each "
              "GradientCheckpointingLayer whole)"),
    )),
    Framework("torchtune", "torchtune full fine-tune recipe", "train", (
        Setting("implementation", "hf", "torchtune's modules: F.scaled_dot_product_attention, RMSNorm in fp32 "
                "(torchtune/modules/attention.py, rms_norm.py); transformers' sdpa graph saves the same"),
        Setting("dtype", "bf16", f"{_TT}: dtype: bf16"),
        Setting("precision", "pure", f"{_TT}: dtype: bf16 (recipes/full_finetune_single_device.py: the model built in "
                "bf16, the optimizer over its parameters: no fp32 copy)", when=_sixteen_bit("bf16")),
        Setting("optimizer_in_backward", True, f"{_TT}: optimizer_in_bwd: True (register_optim_in_bwd_hooks)"),
        Setting("loss_chunks", 8, f"{_TT}: loss: torchtune.modules.loss.CEWithChunkedOutputLoss "
                "(torchtune/modules/loss/ce_chunked_output_loss.py: num_output_chunks: int = 8)", when=_chunks),
        Setting("optimizer", "paged-adamw-8bit", f"{_TT}: optimizer: bitsandbytes.optim.PagedAdamW8bit (the "
                "LoRA and distributed configs use torch.optim.AdamW)"),
        Setting("optimizer_impl", "fused", "torchtune recipes/configs/llama3_1/8B_lora_single_device.yaml and the "
                "distributed configs: optimizer torch.optim.AdamW with fused: True", when=_torch_adam),
        Setting("recompute", "full", f"{_TT}: enable_activation_checkpointing: True (each transformer layer "
                "wrapped whole)"),
        Setting("dropout", False, "torchtune's Llama layers have no dropout (attn_dropout=0.0)"),
        Setting("kernels", "eager", f"{_TT}: compile: False (torchtune/modules/rms_norm.py upcasts to fp32 op by "
                "op)", when=_eager),
    ), ("batch_size: 2 and gradient_accumulation_steps: 1 in the same config",), (
        Limit("zeros", (2, 3), "ZeRO 2-3 with data parallelism (FSDP2: no DDP, no ZeRO-1)", _TT_FSDP),
        Limit("pp", False, "no pipeline stages", "torchtune recipes/full_finetune_distributed.py: its device mesh "
              "holds data-parallel (FSDP) and tensor-parallel dimensions only"),
        Limit(_RECOMPUTES, ("none", "full"), "recompute none or full (each layer whole)",
              f"{_TT}: enable_activation_checkpointing (torchtune/training/activations.py "
              "apply_activation_checkpointing: each TransformerSelfAttentionLayer whole)"),
    )),
    Framework("torchtitan", "torchtitan pre-training", "train", (
        Setting("implementation", "megatron", "torchtitan's Llama (torchtitan/models/llama/model.py): fused SDPA, "
                "no dropout"),
        Setting("precision", "master", f"{_TITAN}: FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16, "
                "reduce_dtype=float32) over fp32 sharded parameters, the optimizer's copy"),
        Setting("dtype", "bf16", f"{_TITAN}: training.mixed_precision_param='bfloat16' (FSDP2 keeps fp32 "
                "sharded parameters)"),
        Setting("attention", "flash", f"{_TITAN}: F.scaled_dot_product_attention (flash kernel)"),
        Setting("recompute", "selective-op", f"{_TITAN_TOML}: [activation_checkpoint] mode = 'selective', "
                "selective_ac_option = 'op' (the policy: torchtitan/parallelisms/parallelize_llama.py at 004b314, "
                "_save_list)"),
        Setting("kernels", "eager", f"{_TITAN_TOML}: [training] compile = false, [model] norm_type = 'rmsnorm' "
                "(torchtitan/models/norms.py RMSNorm, eager PyTorch ops); torchtitan/optimizer.py: AdamW foreach"),
        Setting("sp", True, "torchtitan/parallelisms/parallelize_llama.py apply_tp: the norms run "
                "SequenceParallel() and wo/w2 are RowwiseParallel(output_layouts=Shard(1))", when=_tp),
        Setting("zero", 3, f"{_TITAN}: training.data_parallel_shard_degree=-1 (FSDP over every data-parallel "
                "rank)", when=_dp),
        Setting("dropout", False, "torchtitan's Llama has no dropout"),
    ), (), (
        Limit("zeros", (0, 2, 3), "ZeRO 0, 2 or 3 (DDP or FSDP2; no ZeRO-1)", _TITAN_FSDP),
        Limit("zeros_with_pp", (0, 2, 3), "", _TITAN_FSDP),
        Limit(_RECOMPUTES, ("none", "selective-op", "full"), "recompute none, selective-op or full", _TITAN_AC),
    )),
    Framework("megatron", "Megatron-LM pre-training", "train", (
        Setting("implementation", "megatron", f"{_MEG}: the default GPT model (fused kernels)"),
        Setting("dtype", "bf16", "Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh passes --bf16 "
                "(the parser's default is fp32)"),
        Setting("attention", "flash", f"{_MEG}: --attention-backend auto (Transformer Engine flash/fused)"),
        Setting("precision", "master", "Megatron-LM megatron/core/optimizer/optimizer.py: "
                "Float16OptimizerWithFloat16Params keeps fp32 main params and grads for 16-bit models"),
        Setting("grad_buffer", "fp32", f"{_MEG}: validate_args, if args.bf16: accumulate_allreduce_grads_in_fp32 = True "
                "(unless --grad-reduce-in-bf16); megatron/core/distributed/distributed_data_parallel.py: grad_dtype = "
                "torch.float if grad_reduce_in_fp32 (the main_grad buffer; docs/source/distrib_optimizer.md: 18 "
                "bytes per parameter, 6 + 12/d distributed)", when=_master_in("bf16")),
        Setting("grad_buffer", "param+fp32", "Megatron-LM under --fp16: a 16-bit main_grad buffer (no fp32 "
                "accumulation by default), copied to fp32 each step by main_param.grad = model_param.main_grad.float() "
                "(megatron/core/optimizer/optimizer.py _copy_model_grads_to_main_grads; docs/source/"
                "distrib_optimizer.md: 20 bytes per parameter, 4 + 16/d distributed); not under "
                "--precision-aware-optimizer, which reads the 16-bit buffer in place (decoupled_grad)",
                when=lambda given: _master_in("fp16")(given) and not given.get("precision_aware_optimizer")),
        Setting("recompute", "none", f"{_MEG}: --recompute-granularity None"),
        Setting("dropout", True, f"{_MEG}: --attention-dropout 0.1, --hidden-dropout 0.1"),
    ), (), (
        Limit(_RECOMPUTES, ("none", "selective", "full"), "", _MEG_AC),  # what plan searches anyway: no line
        # every ZeRO stage, with pipeline and expert parallelism too: the distributed optimizer is ZeRO-1, Megatron
        # FSDP's sharding strategies ZeRO-1 to 3. Megatron-LM's validate_args (megatron/training/arguments.py at
        # d98e8a64) asserts pipeline_model_parallel_size == 1 and expert_model_parallel_size == 1 for
        # --use-torch-fsdp2 only, nothing of the kind for --use-megatron-fsdp (--megatron-fsdp-version 1, the
        # default); version 2, opt-in, refuses tp, pp or cp > 1 (megatron/core/distributed/fsdp/
        # mcore_fsdp_adapter.py: "MFSDP v2 does not currently support")
        Limit("zeros", (0, 1, 2, 3), "", "Megatron-LM megatron/core/distributed/distributed_data_parallel_config.py: "
              "use_distributed_optimizer (ZeRO-1); use_megatron_fsdp with data_parallel_sharding_strategy 'optim', "
              "'optim_grads' (ZeRO-2) or 'optim_grads_params' (ZeRO-3, its default)"),
    )),
    Framework("deepspeed", "DeepSpeed ZeRO", "train", (
        Setting("dtype", "fp32", f"{_DS}: fp16.enabled and bf16.enabled default false"),
        Setting("zero", 0, f"{_DS}: zero_optimization.stage default 0"),
        Setting("precision", "master", "DeepSpeed deepspeed/runtime/fp16/fused_optimizer.py and bf16_optimizer.py: "
                "fp32 master weights for fp16/bf16 (given --dtype bf16 or fp16)", when=_sixteen_bit("fp32")),
        Setting("offload", False, f"{_DS}: offload_optimizer.device default none"),
        Setting("optimizer", "adamw", f"{_DS}: optimizer Adam with adam_w_mode True (FusedAdam)"),
        Setting("grad_sync", "deepspeed", "DeepSpeed deepspeed/runtime/engine.py: bf16 under ZeRO 0-1 runs "
                "BF16_Optimizer (bf16_optimizer.py: fp32 gradients, update_hp_grads after each backward; reduced at "
                "the accumulation boundary)", when=_bf16_below_zero2),
        Setting("grad_buffer", "fp32", "DeepSpeed deepspeed/runtime/bf16_optimizer.py: BF16_Optimizer allocates "
                "fp32_groups_gradients_flat, torch.zeros_like(bf16_groups_flat, dtype=grad_acc_dtype): fp32 gradients of "
                "the whole model, the fp32 master partition and the optimizer over 1/d",
                when=lambda given: _bf16_below_zero2(given) and given.get("precision", "master") == "master"),
    ), ("a ZeRO stage and precision come from the user's ds_config; give --zero and --dtype",
        "BF16_Optimizer runs where engine.py's _do_optimizer_sanity_check returns BFLOAT16: bf16 with fp32 gradient "
        "accumulation (data_types.grad_accum_dtype; its default is the model's dtype in today's get_data_types, fp32 "
        "without ZeRO in earlier releases) under ZeRO stage 0 or 1; at stage 0 it still partitions the master and "
        "states over the d ranks as stage 1 does (give --zero 1: --zero 0 counts them whole)",), (
        Limit("zeros_with_pp", (0, 1), "ZeRO 0-1 with pipeline stages", _DS_PIPE),
        Limit("virtual", False, "no interleaved stages", _DS_SCHEDULE),
        Limit("cp", False, "no context parallelism (its sequence parallelism is Ulysses)", _DS_ULYSSES),
        Limit(_RECOMPUTES, ("none", "full"), "recompute none or full",
              "DeepSpeed deepspeed/runtime/activation_checkpointing/checkpointing.py: checkpoint() recomputes the "
              "function it wraps whole (a layer)"),
    )),
    Framework("vllm", "vLLM serving", "infer", (
        Setting("kv_block", 16, f"{_VLLM}: block_size=16"),
        Setting("attention", "flash", f"{_VLLM}: FLASH_ATTN backend on CUDA"),
        Setting("gpu_memory_utilization", 0.9, f"{_VLLM}: gpu_memory_utilization=0.9"),
    ), ("max_num_batched_tokens and max_num_seqs by GPU as vllm serve sets them "
        "(vllm/engine/arg_utils.py, EngineArgs.get_batch_defaults)",)),
)}


def plan_space(name: str | None) -> PlanSpace:
    """The layouts framework ``name`` runs (``PlanSpace`` narrowed by its ``limits``); None: every layout.

    >>> plan_space("torchtune").zeros, plan_space("torchtune").pp, plan_space(None).zeros
    ((2, 3), False, (0, 1, 2, 3))
    """
    if name is None:
        return PlanSpace()
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}")
    limits = FRAMEWORKS[name].limits
    space = PlanSpace(**{x.field: x.value for x in limits})
    # a limit on ZeRO alone holds with pipeline stages too (unless one says otherwise)
    if "zeros_with_pp" not in {x.field for x in limits}:
        space = replace(space, zeros_with_pp=space.zeros)
    return replace(space, limits=tuple(x for x in limits if x.words))


def preset_values(name: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The option values framework ``name`` sets (those whose condition ``given`` meets).

    >>> preset_values("torchtitan", {"dp": 8})["zero"], "zero" in preset_values("torchtitan", {"dp": 1})
    (3, False)
    """
    given = given or {}
    if name not in FRAMEWORKS:
        raise ValueError(f"unknown framework {name!r}; choose one of {', '.join(FRAMEWORKS)}")
    return {s.option: s.value for s in FRAMEWORKS[name].settings if s.when is None or s.when(given)}


def apply_framework(given: Mapping[str, Any]) -> dict[str, Any]:
    """``given`` with the defaults of its ``framework`` filled in where it sets nothing itself (an
    unknown framework is left for ``Options`` to refuse)."""
    name = given.get("framework")
    if name is None or name not in FRAMEWORKS:
        return dict(given)
    return {**preset_values(name, given), **given}


def blame_preset(message: str, given: Mapping[str, Any]) -> str:
    """A refusal of options ``given`` with their ``framework``'s preset filled in, naming the framework where it
    blames a value the preset set and ``given`` did not (a user who never typed ``--grad-buffer fp32`` is told who
    did); other messages as they are.

    >>> blame_preset("--grad-buffer fp32 is not modelled with --offload", {"framework": "megatron", "mode": "train",
    ...              "offload": True})
    '--framework megatron sets --grad-buffer fp32, which is not modelled with --offload'
    >>> blame_preset("--grad-buffer fp32 is not modelled with --offload", {"framework": "megatron",
    ...              "grad_buffer": "fp32", "offload": True})
    '--grad-buffer fp32 is not modelled with --offload'
    """
    name = given.get("framework")
    if name not in FRAMEWORKS or f"--framework {name}" in message:
        return message
    preset = [(o, v) for o, v in preset_values(name, given).items() if o not in given and v is not False]
    for option, value in preset:
        words = _flag(option) if value is True else f"{_flag(option)} {value}"
        if f"{words} is " in message:
            return message.replace(f"{words} is ", f"--framework {name} sets {words}, which is ", 1)
    for option, value in preset:  # the flag named (its value or another): say what the preset set it to
        if re.search(rf"(?<![\w-]){re.escape(_flag(option))}(?![\w-])", message):
            words = _flag(option) if value is True else f"{_flag(option)} {value}"
            return f"{message} (--framework {name} sets {words})"
    return message


def _flag(option: str) -> str:
    return "--" + option.replace("_", "-")
