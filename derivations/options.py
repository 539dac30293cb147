"""The options of an estimate: mode, sizes of a step, precision, optimizer and layout.

>>> Options(mode="train", batch=1, seq=2048, tp=8).strategy_names()
('FlashAttention', 'tensor parallel')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from memderive.derivations.frameworks import apply_framework, blame_preset
from memderive.symbolic import dims
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.errors import DerivationError, shown
from memderive.symbolic.experts import ExpertCapacity, ExpertParallel
from memderive.symbolic.expr import Expr, Min, const
from memderive.symbolic.kernel_choices import DEVICES, EXPERTS_KERNELS, RECIPES
from memderive.symbolic.mcore_recompute import MODULES as RECOMPUTE_MODULES, ModuleRecompute
from memderive.symbolic.pipeline_layout import Chunk, LayoutError, chunks_in_flight, parse_layout, rank_chunks
from memderive.symbolic.strategies import (ContextParallel, FlashAttention, FullRecompute, PipelineParallel,
                                          SelectiveRecompute,
                                 SequenceParallel, Strategy, TensorParallel)
from memderive.symbolic.te_float8 import TE_RECIPES
from memderive.symbolic.userbuffers import UB_CONFIGS
from memderive.derivations.hardware import GPUS, gpu, intra_bandwidth
from memderive.derivations.frameworks import FRAMEWORKS
from memderive.derivations.choices import (GRAD_BUFFERS, MAIN_PARAM_DTYPES, MOMENT_DTYPES, OPTIMIZERS, PRECISIONS,
                                          parse_implementation)

__all__ = ["te_transposes", "ArgumentError", "Options", "OptionsError", "derived", "block_share", "given_options", "positive_option", "capacity_bytes", "peak_flops_option", "MAX_OPTION", "MODES", "RECOMPUTE", "PROFILES", "ATTENTION", "BASE_DTYPES"]

MODES = ("params", "train", "infer")
#: MoE token dispatchers the time model knows (--moe-dispatcher; quantities.timing.expert_parallel_s).
MOE_DISPATCHERS = ("alltoall", "deepep")
#: Attention kernels: ``eager`` materialises (inference) or saves (training) the b*a*s*s scores;
#: ``sdpa`` (PyTorch's scaled_dot_product_attention, transformers' default) and ``flash``
#: (FlashAttention, as serving engines run it) never hold them.
ATTENTION = ("eager", "sdpa", "flash")
TRAIN_DTYPES = ("fp32", "bf16", "fp16")
#: The dtypes each dtype option accepts (its error lists only these).
ACCEPTED_DTYPES = {"dtype": TRAIN_DTYPES, "weight_dtype": ("fp32", "fp16", "bf16", "fp8", "int8", "int4", "nf4", "mxfp4"),
                   "kv_dtype": ("fp32", "fp16", "bf16", "fp8", "int8")}
RECOMPUTE = ("none", "selective", "full", "selective-op")
#: Megatron's --recompute-method under full recompute (megatron/core/recompute.py ``checkpointed_forward``)
RECOMPUTE_METHODS = ("uniform", "block")
#: Activation profiles: which saved tensors a profile neglects, and why.
PROFILES = {
    "exact": ((), "every tensor autograd saves"),
    "korthikanti": (("norm-stats", "token-ids", "loss-scalars"),
                    "Korthikanti et al. 2022 §4: LayerNorm statistics, token ids and loss scalars neglected"),
}


#: Dtypes of a frozen base: 16/32-bit, LLM.int8() (bitsandbytes Int8Params) or QLoRA's NF4.
BASE_DTYPES = ("fp32", "fp16", "bf16", "int8", "nf4")


def _names(value: object) -> tuple[str, ...]:
    """Module names from a tuple, a list or a comma-separated string."""
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    return tuple(x.strip() for x in items if x.strip())


def implied_profile(implementation: object) -> str:
    """The activation profile an implementation means where ``--profile`` is not given: ``exact`` under
    transformers' code (``hf``, ``hf-*``: every tensor its layers save), ``korthikanti`` under Megatron's."""
    return "exact" if isinstance(implementation, str) and implementation.split("-")[0] == "hf" else "korthikanti"


class OptionsError(DerivationError):
    """Options that contradict each other or the model."""


def _peft_target_list(value: object, option: str = "--lora-targets") -> None:
    """``--lora-targets`` as PEFT reads ``target_modules``: a name matches a module's last components exactly
    (``'q_proj '`` matches nothing), and ``all-linear`` is a shorthand only as the whole value (in a list it is a
    name no module has: PEFT adapts the other names only)."""
    items = value.split(",") if isinstance(value, str) else list(value)  # type: ignore[call-overload]
    for item in items:
        if isinstance(item, str) and item.strip() and item != item.strip() and not isinstance(value, str):
            raise OptionsError(f"{option}: {item!r} has spaces around it; PEFT matches module names exactly "
                               f"(it would match nothing): write {item.strip()!r}")
    names = [x.strip() for x in items if isinstance(x, str) and x.strip()]
    if "all-linear" in names and len(names) > 1:
        raise OptionsError("--lora-targets: all-linear is PEFT's shorthand for the whole target list; beside other "
                           "names PEFT reads it as a module name that no module has and adapts only the others: "
                           "give all-linear alone, or the names")


class ArgumentError(OptionsError):
    """An option of the wrong type or an unknown name (Python API misuse), said as the CLI says it."""


#: What each field annotation accepts, in words.
_KINDS = {"bool": "true or false (a bool)", "int": "an integer", "str": "text (a str)", "float": "a number",
          "tuple[str, ...]": "module names (a comma-separated str or a tuple of str)"}


def _accepts(kind: str, value: object) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind.startswith("tuple"):
        return isinstance(value, str) or (isinstance(value, tuple | list) and all(isinstance(x, str) for x in value))
    return isinstance(value, str)


#: The largest step size or degree (batch, seq, tp, ...): 10^15; overhead: 10^30 bytes. Past them the
#: numbers say nothing about any machine, and plots could not draw them.
MAX_OPTION = 10**15
MAX_BYTES = 10**30


def block_share(recompute_layers: Any, chunks: Any, layers: Any, low: Callable[[Any, Any], Any]) -> Any:
    """The share of the decoder layers Megatron's block method checkpoints: ``recompute_layers`` of each of
    ``chunks`` model chunks (p v) of ``layers`` (l); more than a chunk holds: all of them. ``low``: the minimum,
    ``Min`` on symbols (``Options.recompute_share``), ``columns.minimum`` on one layout's numbers or a plan's
    columns of them (``timing.full_share``).

    >>> block_share(2, 4 * 2, 32, min), block_share(5, 4 * 2, 32, min)
    (0.5, 1)
    """
    return low(1, recompute_layers * chunks / layers)


def positive_option(name: str, value: int | None, required: bool = False) -> None:
    """A positive integer up to ``MAX_OPTION`` (or None), else an ``OptionsError`` naming ``--name``.

    >>> positive_option("global-batch", 10**16)
    Traceback (most recent call last):
    ...
    memderive.derivations.options.OptionsError: --global-batch = 1.000e+16 is past the bound of 1,000,000,000,000,000 (10^15)
    """
    if value is None and required:
        raise OptionsError(f"--{name} is needed: a positive integer")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise OptionsError(f"--{name} must be a positive integer, got {shown(value)}")
    if value is not None and value > MAX_OPTION:
        raise OptionsError(f"--{name} = {value:.3e} is past the bound of {MAX_OPTION:,} (10^15)")


_positive = positive_option


def peak_flops_option(value: Any, name: str = "peak_flops", unit: str = "FLOP/s") -> None:
    """A dense peak as a plan takes it (None: none given): a real number, finite and positive; a non-number is a
    ``TypeError``, a non-finite or non-positive one an ``OptionsError``, each naming ``name``.

    >>> peak_flops_option(float("inf"))
    Traceback (most recent call last):
    ...
    memderive.derivations.options.OptionsError: peak_flops must be a finite positive number of FLOP/s (e.g. 989.5e12, an H100 SXM's dense bf16 peak), got inf
    """
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of {unit}, got {shown(value)} ({type(value).__name__})")
    if not math.isfinite(value) or value <= 0:
        example = "989.5e12" if unit == "FLOP/s" else "989.5"
        raise OptionsError(f"{name} must be a finite positive number of {unit} (e.g. {example}, an H100 SXM's "
                           f"dense bf16 peak), got {value}")


def capacity_bytes(capacity: Any) -> int:
    """One GPU's memory as a search takes it: whole bytes, 1 to 10^30, else an ``OptionsError``."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not 0 < capacity <= MAX_BYTES:
        raise OptionsError(f"the GPU memory must be a whole number of bytes, 1 to 10^30, got {shown(capacity)} "
                           "(e.g. 80 * 10**9; --gpu-memory 80GB)")
    return capacity


def given_options(options: Any, call: str = "estimate") -> Any:
    """``options`` as a call takes it: an ``Options`` or None; anything else (``sweep("gpt2", "train")``) is an
    ``ArgumentError`` that says how to call ``call``."""
    if options is not None and not isinstance(options, Options):
        raise ArgumentError(f"options must be an Options, got {shown(options)} ({type(options).__name__}); give "
                            f"fields as keywords, e.g. {call}(model, mode=\"train\", batch=1, seq=2048)")
    return options


#: Transformer Engine's fp8 recipes under Megatron-Core (--fp8): ``symbolic.te_float8.TE_RECIPES``, the one tuple.
TE_FP8 = TE_RECIPES
#: torchtitan's Float8 recipes: Float8LinearConverter.Config.recipe_name, Literal["rowwise", "rowwise_with_gw_hp"]
#: (torchtitan b5bcd76 torchtitan/components/quantization/float8.py); regular tensor parallelism, the 16-bit
#: input saved by each Float8Linear. Its default, no recipe_name, is tensorwise scaling (docs/float8.md: "For
#: float8 with tensorwise scaling ... --model.converters=float8"; the only recipe of its 2024 benchmarks,
#: ``TORCHTITAN_TENSORWISE``), which with tp > 1 runs its Float8 tensor parallelism (``Options.float8_tp_plan``).
#: torchao's three recipes (``kernel_choices.RECIPES``) are all torchtitan's.
TORCHTITAN_FP8 = ("rowwise", "rowwise_with_gw_hp")
TORCHTITAN_TENSORWISE = "tensorwise"
#: The GPUs of the table with Blackwell's MXFP8 tensor cores.
BLACKWELL = ("b200", "gb200", "b300", "gb300")


def te_transposes(fp8: str, gpu: str | None) -> bool:
    """Whether Transformer Engine keeps a transposed copy of each fp8 tensor it needs column-wise: delayed and
    current scaling on a GPU that runs only TN fp8 GEMMs (Hopper, Ada; no --gpu: Hopper), not Blackwell
    (TransformerEngine transformer_engine/pytorch/utils.py ``is_non_tn_fp8_gemm_supported``) nor MXFP8 (its
    column-wise data is a layout of its own, never a transpose)."""
    return fp8 in ("te-delayed", "te-current") and (gpu or "").strip().lower() not in BLACKWELL


def _check_gpu(name: str | None, efficiency: float | None) -> None:
    if name is not None:
        gpu(name)  # unknown names raise with the list of choices
    if efficiency is not None and (isinstance(efficiency, bool) or not isinstance(efficiency, int | float)
                                   or not 0 < efficiency <= 1):
        raise OptionsError(f"--efficiency must be a fraction of peak FLOP/s in (0, 1], got {efficiency!r}")


#: Multi-head latent attention's decode forms (``--mla-decode``): ``absorbed``, kv_b folded into the query
#: and the output as vLLM and SGLang run it (the default); ``expanded``, every cached latent expanded through
#: kv_b at each step as transformers' DeepseekV3Attention does.
MLA_DECODE = ("absorbed", "expanded")


@dataclass(frozen=True, slots=True)
class Options:
    mode: str = "params"
    batch: int | None = None
    seq: int | None = None
    new_tokens: int = 0
    dtype: str = "bf16"  # parameter / compute dtype in training
    precision: str = "master"  # master | autocast | pure (derivations.quantities.model_states.PRECISIONS)
    grad_buffer: str = "param"  # param | fp32 | param+fp32: the gradients' buffer (quantities.model_states.GRAD_BUFFERS)
    precision_aware_optimizer: bool = False  # Megatron-Core's, TE FusedAdam (quantities.precision_aware)
    moments: str = "fp32"  # its exp_avg and exp_avg_sq dtype (choices.MOMENT_DTYPES)
    main_params: str = "fp32"  # its main params' dtype (choices.MAIN_PARAM_DTYPES)
    optimizer: str = "adamw"
    optimizer_in_backward: bool = False  # each parameter updated from its post-accumulate-grad hook
    optimizer_impl: str = "foreach"  # torch's Adam/AdamW implementation: foreach | fused | for-loop
    fp8: str = "none"  # torchao Float8Linear recipe (symbolic.float8.RECIPES) or none
    fp8_param_gather: bool = False  # Megatron-LM --fp8-param-gather: TE fp8 primary weights (symbolic.te_float8)
    tp_only_amax_red: bool = False  # Megatron-Core --tp-only-amax-red: delayed scaling's amax group t x cp, for times
    fp8_keep_output: bool = False  # torchao's Float8 conversion with the output layer filtered out (16-bit)
    loss_chunks: int = 1  # torchtune's CEWithChunkedOutputLoss: the output layer and the loss per chunk of s
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1  # context-parallel degree: ring attention over cp ranks, s/cp tokens each
    sp: bool = False
    tp_comm_overlap: bool = False  # Megatron-LM --tp-comm-overlap (TE userbuffers), for times
    tp_comm_overlap_cfg: str = "te"  # TE userbuffers' per-GEMM SM margins (symbolic.userbuffers.UB_CONFIGS)
    zero: int = 0
    offload: bool = False
    offload_params: bool = False  # FSDP CPU offload: parameters, gradients, optimizer states on the host
    activation_offload_layers: int = 0  # Megatron-Core cpu_offloading_num_layers (quantities.activation_offload)
    recompute: str = "none"
    recompute_modules: tuple[str, ...] = ()  # Megatron-Core's, under selective (symbolic.mcore_recompute); () = core_attn
    recompute_method: str = "uniform"  # Megatron's --recompute-method under full: uniform | block
    recompute_layers: int = 1  # Megatron's --recompute-num-layers under full (uniform: per group; block: per chunk)
    compile: bool = False  # torch.compile: the min-cut partitioner's saved set (symbolic.compile_partition)
    timeline: bool = False  # estimate --json lists the step timeline op by op (output only)
    kernels: str = "fused"  # fused | eager: the elementwise kernels and optimizer step, for times (quantities.memory_bound)
    grad_sync: str = "overlapped"  # overlapped | deepspeed: gradient accumulation and reduction, for times
    flash: bool = False  # shorthand for attention="flash"
    attention: str | None = None  # None: the mode's default, see ``attention_kernel``
    kv_block: int | None = None  # inference: paged KV cache, tokens per block
    mla_decode: str | None = None  # inference, MLA: absorbed (None: the default, serving engines') or expanded
    dropout: bool = True
    micro_batches: int | None = None
    virtual_stages: int | None = None
    first_stage_layers: int | None = None  # uneven pipeline stages (Megatron-LM --decoder-first-pipeline-num-layers)
    last_stage_layers: int | None = None  # (--decoder-last-pipeline-num-layers); the rest evenly over the others
    pipeline_layout: str | None = None  # Megatron-Core's --pipeline-model-parallel-layout (symbolic.pipeline_layout)
    mtp_layers: int = 0  # Megatron-Core's --mtp-num-layers: multi-token-prediction layers (models.mtp)
    profile: str | None = None  # None: by the implementation (exact under hf, korthikanti under megatron)
    overhead_bytes: int = 0
    weight_dtype: str | None = None  # inference
    kv_dtype: str | None = None  # inference
    quant_group: int = 128
    implementation: str = "megatron"  # megatron | hf | hf-eager | hf-sdpa (derivations.models.implementations)
    experts_implementation: str = "grouped_mm"  # transformers' experts kernel under hf (symbolic.hf_experts)
    device: str = "cuda"  # cuda | cpu: the kernels transformers' layers run under hf (symbolic.huggingface)
    # fine-tuning (derivations.quantities.finetune)
    lora_rank: int | None = None
    lora_targets: tuple[str, ...] = ()
    lora_target_parameters: tuple[str, ...] = ()  # PEFT's target_parameters (MoE expert stacks, routers)
    lora_dropout: float = 0.0
    dora: bool = False
    base_dtype: str | None = None  # frozen base weights: fp32, fp16, bf16, int8 (LLM.int8()), nf4 (QLoRA)
    no_double_quant: bool = False  # an NF4 base with fp32 absmax (bnb_4bit_use_double_quant false)
    fsdp_flat_params: bool = False  # FSDP1 FlatParameter (use_orig_params=True): whole units get gradients
    freeze_embeddings: bool = False
    train_only: tuple[str, ...] = ()
    ep: int = 1  # expert-parallel degree: the routed experts over ep ranks of the expert grid (etp x ep x edp x pp)
    etp: int | None = None  # expert tensor-parallel degree (MoE parallel folding); None: the tp (Megatron-Core's default)
    moe_dispatcher: str = "alltoall"  # alltoall | deepep: the MoE token dispatch, for times (quantities.timing)
    p2p_overlap: bool = True  # Megatron-Core's overlap_p2p_comm under the interleaved schedule, for times
    moe_a2a_overlap: bool = False  # Megatron-Core --overlap-moe-expert-parallel-comm, for times (quantities.a2a_overlap)
    capacity_factor: str | None = None  # e.g. "1.25": experts padded to ceil(c k b s / E) token slots
    gpu: str | None = None  # a name of derivations.hardware.GPUS: times, and fit's memory budget
    efficiency: float | None = None  # fraction of dense peak (derivations.quantities.timing.DEFAULT_EFFICIENCY)
    # the cluster the times run on (derivations.quantities.cluster)
    gpus_per_node: int = 8
    inter_node_bandwidth: float = 400.0  # Gb/s per GPU, each way
    intra_node_link: str | None = None  # nvlink | pcie (None: the GPU's own link)
    host_memory_bandwidth: float = 76.8  # GB/s of host DRAM per GPU: the CPU optimizer step (*offload_time.py)
    # the framework's defaults (derivations.frameworks) and the runtime around the step
    framework: str | None = None  # a name of derivations.frameworks.FRAMEWORKS (applied by from_keywords)
    cuda_module_loading: str = "lazy"  # lazy | eager: the CUDA context in device memory
    gpu_memory_utilization: float | None = None  # vLLM: fraction of the GPU the engine takes (vllm: 0.9)
    max_num_batched_tokens: int | None = None  # vLLM: tokens of the profiling forward (None: vllm serve's)
    max_num_seqs: int | None = None  # vLLM: sequences at once (None: vllm serve's)
    images: int | None = None  # images per sequence of a traced vision-language model (None: 1; 0: text only)

    @classmethod
    def check_names(cls, given: Mapping[str, Any]) -> None:
        """An unknown name among ``given`` is an ``ArgumentError`` listing the known ones."""
        names = [f.name for f in fields(cls)]
        for key in given:
            if key not in names:
                raise ArgumentError(f"unknown option {shown(key)}; options: {', '.join(names)}")

    @classmethod
    def from_keywords(cls, given: Mapping[str, Any]) -> Options:
        """``Options(**given)``, names checked first and the ``framework``'s defaults filled in where
        ``given`` sets nothing (``derivations.frameworks``).

        >>> Options.from_keywords({"mode": "train", "batch": 1, "seq": 8, "framework": "torchtune"}).recompute
        'full'
        """
        cls.check_names(given)
        try:
            return cls(**apply_framework(given))
        except OptionsError as exc:  # a value the preset set, not the user: the refusal names the framework
            raise type(exc)(blame_preset(str(exc), given)) from None

    def _check_types(self) -> None:
        """Each field's type as annotated: ``offload="false"`` or ``zero=True`` is an error, not a truthy value."""
        for f in fields(self):
            value, annotation = getattr(self, f.name), str(f.type)
            if value is None and annotation.endswith("| None"):
                continue
            kind = annotation.split(" |")[0]
            if not _accepts(kind, value):
                raise ArgumentError(f"--{f.name.replace('_', '-')} must be {_KINDS[kind]}, got {shown(value)} "
                                    f"({type(value).__name__})")

    def __post_init__(self) -> None:
        self._check_types()
        if self.mode not in MODES:
            raise OptionsError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("batch", "seq", "tp", "pp", "dp", "micro_batches", "virtual_stages", "quant_group", "kv_block",
                     "ep", "etp", "loss_chunks", "cp", "first_stage_layers", "last_stage_layers", "recompute_layers"):
            _positive(name.replace("_", "-"), getattr(self, name))
        for name in ("new_tokens", "overhead_bytes", "mtp_layers", "activation_offload_layers"):
            value = getattr(self, name)
            flag = f"--{name.replace('_', '-').replace('-bytes', '')}"
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionsError(f"{flag} must be a whole number that is not negative, got {shown(value)}")
            if value > (MAX_BYTES if name == "overhead_bytes" else MAX_OPTION):
                raise OptionsError(f"{flag} = {value:.3e} is past the bound of 10^"
                                   f"{30 if name == 'overhead_bytes' else 15}")
        if self.images is not None and not 0 <= self.images <= MAX_OPTION:
            raise OptionsError(f"--images must be a whole number of images per sequence, 0 (text only) or more, "
                               f"got {shown(self.images)}")
        if self.recompute not in RECOMPUTE:
            raise OptionsError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.zero not in (0, 1, 2, 3):
            raise OptionsError(f"--zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.zero and self.dp * self.cp == 1:  # Megatron-LM and torchtitan shard over the dp x cp ranks
            raise OptionsError(f"ZeRO stage {self.zero} shards over the data- and context-parallel ranks; give --dp "
                               "or --cp greater than 1")
        self._check_stages()
        self._check_context()
        if self.sp and self.tp == 1:
            raise OptionsError("sequence parallelism splits over the tensor-parallel ranks; give --tp greater than 1")
        if self.tp_comm_overlap and not (self.sp and self.tp > 1):
            raise OptionsError("--tp-comm-overlap overlaps the sequence-parallel all-gathers and reduce-scatters: give "
                               "--tp greater than 1 and --sp (Megatron-LM asserts the same)")
        if self.tp_comm_overlap_cfg not in UB_CONFIGS:
            raise OptionsError(f"--tp-comm-overlap-cfg must be one of {', '.join(UB_CONFIGS)}, got "
                               f"{self.tp_comm_overlap_cfg!r}")
        if self.tp_comm_overlap_cfg != "te" and not (self.tp_comm_overlap and self.framework != "torchtitan"):
            raise OptionsError("--tp-comm-overlap-cfg names Transformer Engine's userbuffers config: give "
                               "--tp-comm-overlap (not under --framework torchtitan, whose AsyncTP has none), or drop it")
        if self.profile is not None and self.profile not in PROFILES:
            raise OptionsError(f"--profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        for name in ("dtype", "weight_dtype", "kv_dtype"):
            value = getattr(self, name)
            if value is not None:
                try:
                    dtype(value)
                except ValueError:
                    raise OptionsError(f"--{name.replace('_', '-')}: unknown dtype {value!r}; choose one of "
                                       f"{', '.join(ACCEPTED_DTYPES[name])}") from None
        if self.mode == "train" and dtype(self.dtype).name not in TRAIN_DTYPES:
            raise OptionsError(f"--dtype {self.dtype} is not a training precision; choose one of "
                               f"{', '.join(TRAIN_DTYPES)} (bf16/fp16 = mixed precision with fp32 master weights)")
        self._check_precision()
        if self.mode == "train" and self.optimizer_in_backward and (self.micro_batches or 1) > 1:
            # torchtune, recipes/full_finetune_single_device.py (FullFinetuneRecipeSingleDevice.__init__): "if
            # self._optimizer_in_bwd: ... if self._gradient_accumulation_steps > 1: raise RuntimeError('Gradient
            # accumulation is not supported with optimizer in bwd.')": the hook steps on each micro-batch's gradient
            raise OptionsError(f"--optimizer-in-backward is not supported with gradient accumulation (--micro-batches "
                               f"{self.micro_batches}): each parameter's hook steps on one micro-batch's gradient, as "
                               "torchtune refuses it; give --micro-batches 1")
        if self.attention is not None and self.attention not in ATTENTION:
            raise OptionsError(f"--attention must be one of {', '.join(ATTENTION)}, got {self.attention!r}")
        if self.flash and self.attention not in (None, "flash"):
            raise OptionsError(f"--flash is short for --attention flash; it contradicts --attention {self.attention}")
        if self.optimizer_impl not in ("foreach", "fused", "for-loop"):
            raise OptionsError(f"--optimizer-impl must be foreach, fused or for-loop, got {self.optimizer_impl!r}")
        if self.optimizer_impl != "foreach" and self.optimizer not in ("adamw", "adam"):
            raise OptionsError(f"--optimizer-impl chooses torch's Adam/AdamW code path; --optimizer {self.optimizer} "
                               "has one update")
        if self.kernels not in ("fused", "eager"):
            raise OptionsError(f"--kernels must be fused or eager, got {self.kernels!r}")
        if self.grad_sync not in ("overlapped", "deepspeed"):
            raise OptionsError(f"--grad-sync must be overlapped or deepspeed, got {self.grad_sync!r}")
        if self.mla_decode is not None and self.mla_decode not in MLA_DECODE:
            raise OptionsError(f"--mla-decode must be one of {', '.join(MLA_DECODE)}, got {self.mla_decode!r}")
        if self.mla_decode is not None and self.mode != "infer":
            raise OptionsError("--mla-decode is the form of an inference decode step; use it with --mode infer")
        if self.kv_block is not None and self.mode != "infer":
            raise OptionsError("--kv-block sizes the paged KV cache of inference; use it with --mode infer")
        _check_gpu(self.gpu, self.efficiency)
        self._check_cluster()
        if self.mode in ("train", "infer") and (self.batch is None or self.seq is None):
            raise OptionsError(f"--mode {self.mode} needs --batch and --seq")
        self._check_implementation()
        if self.profile is None:  # the implementation named is the profile
            object.__setattr__(self, "profile", implied_profile(self.implementation))
        self._check_finetuning()
        self._check_experts()
        self._check_framework()
        self._check_offload_params()
        self._check_compile()
        self._check_fp8()
        self._check_precision_aware()
        self._check_recompute_modules()
        self._check_recompute_layers()
        self._check_activation_offload()

    @property
    def recomputed_modules(self) -> tuple[str, ...]:
        """Megatron-Core's recompute modules these options run: ``--recompute-modules`` (core_attn where none is
        given) under ``--recompute selective``, none otherwise."""
        if self.recompute != "selective":
            return ()
        return self.recompute_modules or ("core_attn",)

    @property
    def core_attn_checkpointed(self) -> bool:
        """Whether core_attn checkpoints a fused attention kernel (``symbolic.mcore_recompute``): Megatron-Core's
        layers (attention.py wraps any backend) with a fused kernel; not the eager core (``SelectiveRecompute``'s),
        nor DeepSpeed's Megatron (legacy Megatron-LM skips the checkpoint on its flash path), nor torchtitan (its
        own checkpointing policies: no core_attn module)."""
        return ("core_attn" in self.recomputed_modules and self.attention_kernel != "eager"
                and self.implementation_kind == "megatron" and self.framework in (None, "megatron"))

    def _check_recompute_layers(self) -> None:
        """--recompute-method and --recompute-layers are Megatron's --recompute-method and --recompute-num-layers
        (megatron/core/recompute.py ``checkpointed_forward``), under --recompute full only. More layers than a model
        chunk holds are not refused: Megatron asserts nothing and checkpoints them all (block) or runs one group
        (uniform), as the quantities do."""
        if self.recompute_method not in RECOMPUTE_METHODS:
            raise OptionsError(f"--recompute-method must be one of {', '.join(RECOMPUTE_METHODS)}, got "
                               f"{self.recompute_method!r}")
        if (self.recompute_method, self.recompute_layers) == ("uniform", 1):
            return
        if self.recompute != "full":
            raise OptionsError("--recompute-method and --recompute-layers say which layers Megatron's full recompute "
                               "checkpoints; add --recompute full")
        if self.implementation_kind != "megatron" or self.framework not in (None, "megatron"):
            raise OptionsError("--recompute-method and --recompute-layers are Megatron-Core's (--recompute-method, "
                               "--recompute-num-layers); under another framework or implementation every layer is "
                               "checkpointed: drop them")
        if self.uneven_stages or self.pipeline_layout is not None:
            raise OptionsError("--recompute-method block or --recompute-layers above 1 with uneven pipeline stages "
                               "or a pipeline layout is not modelled (chunks of different sizes); drop one")

    def _check_activation_offload(self) -> None:
        """--activation-offload-layers is Megatron-Core's cpu_offloading_num_layers (Transformer Engine's
        ``get_cpu_offload_context`` around a TransformerBlock's layers, model_layers its config.num_layers: the
        whole model's, so one pipeline stage only); the bound by the model's layers is checked where they are known
        (``quantities.activation_offload``)."""
        if self.activation_offload_layers == 0:
            return
        if self.mode != "train":
            raise OptionsError("--activation-offload-layers offloads a training step's saved activations; use it "
                               "with --mode train")
        if self.framework != "megatron":
            raise OptionsError("--activation-offload-layers is Megatron-Core's cpu_offloading_num_layers; add "
                               "--framework megatron")
        if self.pp > 1:
            raise OptionsError("--activation-offload-layers with --pp is not modelled (Megatron-Core passes the "
                               "whole model's num_layers to each stage's offload context); drop one")

    def recompute_share(self) -> Expr:
        """The fraction of a stage's decoder layers Megatron's full recompute checkpoints: 1 (each layer, or groups
        of ``recompute_layers`` under uniform), ``recompute_layers`` of each model chunk's l/(p v) under block
        (recompute.py: ``range(self.num_layers_per_pipeline_rank)``, a TransformerBlock's own layers, one per
        virtual stage); where a chunk holds fewer (a layout the planner tries), Megatron checkpoints all of them."""
        if self.recompute != "full" or self.recompute_method != "block":
            return const(1)
        # p and v as symbols: the whole model's graph (``quantities.compute.whole_model``, pp 1) keeps the layout's
        chunks = dims.p * (dims.v if self.virtual_stages not in (None, 1) else const(1))
        return block_share(self.recompute_layers, chunks, dims.l, Min)

    def _check_recompute_modules(self) -> None:
        """--recompute-modules names Megatron-Core's modules (``symbolic.mcore_recompute``), under selective only."""
        object.__setattr__(self, "recompute_modules", tuple(dict.fromkeys(_names(self.recompute_modules))))
        modules = self.recompute_modules
        if not modules:
            return
        if self.recompute != "selective":
            raise OptionsError("--recompute-modules names what Megatron-Core's selective recompute recomputes; add "
                               "--recompute selective")
        unknown = [m for m in modules if m not in RECOMPUTE_MODULES]
        if unknown:
            raise OptionsError(f"--recompute-modules: unknown module {unknown[0]!r}; Megatron-Core's are "
                               f"{', '.join(RECOMPUTE_MODULES)}")
        if self.fp8 == "te-delayed" and {"moe_act", "layernorm"} & set(modules):
            raise OptionsError("--recompute-modules moe_act and layernorm do not run with --fp8 te-delayed: "
                               "Megatron-Core refuses delayed scaling there (transformer_config.py); use te-current")

    def _check_compile(self) -> None:
        """--compile partitions transformers' ATen calls (``symbolic.compile_partition``); what has none is refused."""
        if not self.compile:
            return
        if self.mode != "train":
            raise OptionsError("--compile derives what a compiled training step saves for backward; use it with "
                               "--mode train")
        if self.implementation_kind != "hf":
            raise OptionsError("--compile partitions transformers' ATen calls (torch.compile of a transformers "
                               "model); add --implementation hf (Megatron's fused kernels are not what it compiles)")
        unmodelled = [(self.recompute != "none", f"--recompute {self.recompute}"), (self.finetuning, "fine-tuning options"),
                      (self.loss_chunks > 1, "--loss-chunks"), (self.precision == "autocast", "--precision autocast")]
        for flag, what in unmodelled:
            if flag:
                raise OptionsError(f"--compile is not modelled with {what}")

    def _check_fp8(self) -> None:
        """--fp8 converts transformers' nn.Linear modules as torchao does; what is not modelled is refused in one
        line (the divisibility of the dims is checked against the model: ``estimate``)."""
        if self.tp_only_amax_red and self.fp8 != "te-delayed":
            raise OptionsError("--tp-only-amax-red narrows delayed scaling's amax all-reduce; give --fp8 te-delayed "
                               f"(got --fp8 {self.fp8}) or drop it")
        if self.fp8_param_gather and self.fp8 not in TE_FP8:
            raise OptionsError("--fp8-param-gather keeps the layers' linear weights as Transformer Engine fp8 tensors: "
                               "give --fp8 te-delayed, te-current or te-mxfp8")
        if self.fp8_param_gather and self.fp8 == "te-nvfp4":
            raise OptionsError("--fp8-param-gather with --fp8 te-nvfp4 (4-bit primary weights) is not modelled; "
                               "Megatron-Bridge's nvfp4 recipe sets fp8_param_gather False (mixed_precision.py "
                               "bf16_with_nvfp4_mixed): drop --fp8-param-gather")
        if self.fp8_keep_output and self.fp8 not in RECIPES:
            raise OptionsError("--fp8-keep-output filters the output layer out of torchao's Float8 conversion: give "
                               f"--fp8 {', '.join(RECIPES)}")
        if self.fp8 == "none":
            return
        if self.fp8 in TE_FP8:
            self._check_te_fp8()
            return
        if self.fp8 not in RECIPES:
            raise OptionsError(f"--fp8 must be none or one of {', '.join(RECIPES)} (torchao's "
                               f"Float8LinearRecipeName), got {self.fp8!r}")
        if self.mode != "train":
            raise OptionsError("--fp8 trains Float8 linears; use it with --mode train")
        if self.implementation_kind != "hf" and self.framework != "torchtitan":
            raise OptionsError("--fp8 converts torch.nn.Linear modules as torchao does: transformers' layers, "
                               "--implementation hf, or torchtitan's (--framework torchtitan); Megatron-Core's "
                               "linears are Transformer Engine's: use --fp8 te-delayed, te-current, te-mxfp8 or "
                               "te-nvfp4 there")
        if self.float8_tp_plan and not self.sp:
            raise OptionsError("--fp8 tensorwise with --tp under torchtitan is its Float8 tensor parallelism, whose "
                               "plan shards the sequence between the linears: give --sp (torchtitan's default)")
        if dtype(self.dtype).nbytes >= 4 or self.precision == "autocast":
            raise OptionsError(f"--fp8 is modelled for 16-bit weights and compute (--dtype bf16 or fp16, "
                               f"--precision master or pure), not --dtype {self.dtype} --precision {self.precision}")
        unmodelled = [(self.finetuning, "fine-tuning options"), (self.offload_params, "--offload-params"),
                      (self.loss_chunks > 1, "--loss-chunks"), (self.compile, "--compile")]
        for flag, what in unmodelled:
            if flag:
                raise OptionsError(f"--fp8 is not modelled with {what}")

    @property
    def float8_tp_plan(self) -> bool:
        """torchtitan's Float8 tensor parallelism: its default tensorwise recipe with --tp > 1, where ``apply_tp``
        takes torchao's ``Float8ColwiseParallel``, ``Float8RowwiseParallel`` and ``PrepareFloat8ModuleInput``
        (torchtitan 9dec370 parallelisms/parallelize_llama.py; 238fa99 models/llama3/infra/parallelize.py:
        ``enable_float8_tensorwise_tp = enable_float8_linear and not float8_is_rowwise``)."""
        return self.framework == "torchtitan" and self.fp8 == TORCHTITAN_TENSORWISE and self.tp > 1

    @property
    def async_tp(self) -> bool:
        """PyTorch's micro-pipeline TP (torchtitan's AsyncTP): --tp-comm-overlap under torchtitan, which fuses what
        PyTorch's pattern matcher finds, not what Transformer Engine's userbuffers overlap (``tp_overlap``'s NOTE);
        the one place the time model and its note decide it."""
        return self.tp_comm_overlap and self.framework == "torchtitan"

    @property
    def megatron_fsdp(self) -> bool:
        """ZeRO-3 under Megatron-Core (``--zero 3 --framework megatron``, no ``--offload-params``: FSDP2's path):
        Megatron-FSDP, its buckets and fp8 buffers its own; the one place the memory, the time model and the options
        decide it."""
        return self.zero == 3 and self.framework == "megatron" and not self.offload_params

    @property
    def fsdp_fp8_params(self) -> bool:
        """``--fp8-param-gather`` under Megatron-FSDP (``megatron_fsdp``): each weight an 8-bit shard."""
        return self.fp8_param_gather and self.megatron_fsdp

    @property
    def layer_wise(self) -> bool:
        """Megatron-Core's Muon under its layer-wise distributed optimizer (``--optimizer muon --zero 1``: whole
        parameters dealt to the data-parallel ranks, its gradients all-reduced, the updated weights gathered after
        the step): the one place the memory, the time model and its note decide it."""
        return self.optimizer == "muon" and self.zero == 1

    def _check_te_fp8(self) -> None:
        """Transformer Engine's fp8 recipes (``TE_FP8``): Megatron-Core's linears, a 16-bit --dtype, a GPU with fp8
        tensor cores (MXFP8: Blackwell's block scaling)."""
        if self.fp8_param_gather and self.zero not in (1, 3):
            raise OptionsError(f"--fp8-param-gather is modelled under Megatron-Core's distributed optimizer (--zero 1) "
                               f"and Megatron-FSDP (--zero 3 --framework megatron), not --zero {self.zero} "
                               "(Megatron-LM asserts the distributed optimizer or FSDP, arguments.py)")
        if self.fp8_param_gather and self.zero == 3 and not self.megatron_fsdp:
            raise OptionsError("--fp8-param-gather under --zero 3 is Megatron-FSDP's fp8 parameter buffer: give "
                               "--framework megatron, without --offload-params")
        if self.fsdp_fp8_params and self.fp8 == "te-mxfp8":
            raise OptionsError("--fp8-param-gather with --fp8 te-mxfp8 under --zero 3 (Megatron-FSDP's uint8 "
                               "buffer of MXFP8 tensors) is not modelled: give --fp8 te-delayed or te-current, or "
                               "--zero 1")
        if self.mode != "train":
            raise OptionsError(f"--fp8 {self.fp8} trains Transformer Engine's fp8 linears; use it with --mode train")
        if self.framework == "torchtitan":
            raise OptionsError(f"--fp8 {self.fp8} is Transformer Engine's recipe under Megatron-Core; torchtitan "
                               f"trains torchao's Float8Linear: use --fp8 {' or '.join(TORCHTITAN_FP8)}")
        if self.implementation_kind == "hf":
            raise OptionsError(f"--fp8 {self.fp8} is Transformer Engine's recipe under Megatron-Core: use "
                               "--implementation megatron (or --framework megatron); for transformers' layers use "
                               "torchao's tensorwise, rowwise or rowwise_with_gw_hp")
        if self.fp8 == "te-nvfp4" and self.tp_comm_overlap:
            raise OptionsError("--fp8 te-nvfp4 with --tp-comm-overlap is not modelled (Megatron-Bridge turns TP "
                               "overlap off for nvfp4, scripts/performance/configs/llama/llama3_llm_pretrain.py): "
                               "drop --tp-comm-overlap")
        if dtype(self.dtype).nbytes >= 4:
            raise OptionsError(f"--fp8 {self.fp8} is modelled for 16-bit weights and compute (--dtype bf16 or fp16), "
                               f"not --dtype {self.dtype}")
        if self.gpu is not None:
            hw = GPUS.get(self.gpu.strip().lower())
            if hw is not None and self.fp8 == "te-nvfp4" and hw.fp4_flops is None:
                raise OptionsError(f"--fp8 te-nvfp4 runs Blackwell's FP4 tensor cores (Transformer Engine's "
                                   f"NVFP4BlockScaling); {hw.name} has none: give a Blackwell --gpu "
                                   f"({', '.join(BLACKWELL)}) or another recipe")
            if hw is not None and hw.fp8_flops is None:
                raise OptionsError(f"--fp8 {self.fp8}: {hw.name} has no fp8 tensor cores (Transformer Engine needs "
                                   "Hopper, Ada or later)")
            if hw is not None and self.fp8 == "te-mxfp8" and hw.name not in BLACKWELL:
                raise OptionsError(f"--fp8 te-mxfp8 is Blackwell's block-scaled fp8 (Transformer Engine's "
                                   f"MXFP8BlockScaling); {hw.name} is not Blackwell: use te-delayed or te-current")

    def _check_offload_params(self) -> None:
        """--offload-params shards every state over the d ranks as ZeRO-3/FSDP do (DeepSpeed's offload_param is
        valid only with stage 3); the cases the derivation does not model are refused in one line."""
        if not self.offload_params:
            return
        if self.mode != "train":
            raise OptionsError("--offload-params offloads a training run's parameters; use it with --mode train")
        if self.zero in (1, 2):
            raise OptionsError(f"--offload-params shards parameters, gradients and optimizer states as ZeRO-3 does "
                               f"(DeepSpeed: offload_param only with stage 3); give --zero 3 or no --zero, not "
                               f"--zero {self.zero}")
        unmodelled = [(self.finetuning, "fine-tuning options"), (self.ep > 1, "--ep"),
                      (self.optimizer.startswith("paged"), f"--optimizer {self.optimizer}")]
        for flag, what in unmodelled:
            if flag:
                raise OptionsError(f"--offload-params is not modelled with {what}")

    def _check_grad_buffer(self) -> None:
        """--grad-buffer fp32 / param+fp32 are the gradient buffers of 16-bit weights with an fp32 master copy
        (Megatron-LM, DeepSpeed's BF16_Optimizer); elsewhere the gradients already are in the weights' dtype."""
        if self.grad_buffer not in GRAD_BUFFERS:
            raise OptionsError(f"--grad-buffer must be one of {', '.join(GRAD_BUFFERS)}, got {self.grad_buffer!r}")
        if self.grad_buffer == "param" and self._megatron_copies_grads():  # what Megatron runs: the copy counted
            object.__setattr__(self, "grad_buffer", "param+fp32")
        if self.grad_buffer == "param" or self.mode != "train":
            return
        if self.precision != "master" or dtype(self.dtype).nbytes >= 4:
            raise OptionsError(f"--grad-buffer {self.grad_buffer} is the gradient buffer of 16-bit weights with an fp32 "
                               f"master copy (--dtype bf16 or fp16, --precision master), not --dtype {self.dtype} "
                               f"--precision {self.precision}")
        for flag, what in self._grad_copy_unmodelled():
            if flag:
                raise OptionsError(f"--grad-buffer {self.grad_buffer} is not modelled with {what}; give --grad-buffer "
                                   f"param (gradients in the weights' dtype)")

    def _grad_copy_unmodelled(self) -> list[tuple[bool, str]]:
        """What --grad-buffer fp32 and param+fp32 are not modelled with: (set, its words)."""
        return [(self.finetuning, "fine-tuning options"), (self.offload, "--offload"),
                (self.offload_params, "--offload-params"),
                (self.optimizer.startswith("paged"), f"--optimizer {self.optimizer}")]

    def _megatron_copies_grads(self) -> bool:
        """Megatron-Core's optimizer step makes an fp32 copy of each 16-bit gradient shard: 16-bit weights with fp32
        main params under --framework megatron, without the precision-aware optimizer (Megatron-Core 0.15,
        0d8e0714: distrib_optimizer.py L2399 ``shard_main_param.grad = shard_model_grad.float()``, optimizer.py
        L755 ``main_param.grad = model_param.main_grad.float()`` without the distributed optimizer, Megatron-FSDP
        param_and_grad_buffer.py L2449 ``optimizer_grad.to(param.dtype)``). So --grad-buffer param there (Megatron's
        --grad-reduce-in-bf16, Bridge's grad_reduce_in_fp32 False) is ``param+fp32``, as the options record and echo
        it (the copy step-only: ``model_states``' fp32_gradient_copy); left param where param+fp32 is not modelled."""
        return (self.framework == "megatron" and self.mode == "train" and self.precision == "master"
                and dtype(self.dtype).nbytes < 4 and not self.precision_aware_optimizer
                and not any(flag for flag, _ in self._grad_copy_unmodelled()))

    def _check_precision_aware(self) -> None:
        """Megatron-Core's precision-aware optimizer: Transformer Engine's FusedAdam under the distributed optimizer,
        over 16-bit weights with main params (optimizer_config.py and get_megatron_optimizer assert the same)."""
        for name, choices in (("moments", MOMENT_DTYPES), ("main_params", MAIN_PARAM_DTYPES)):
            if getattr(self, name) not in choices:
                raise OptionsError(f"--{name.replace('_', '-')} must be one of {', '.join(choices)}, got "
                                   f"{getattr(self, name)!r}")
        lowered = [f"--{n.replace('_', '-')} {getattr(self, n)}" for n in ("moments", "main_params")
                   if getattr(self, n) != "fp32"]
        if not self.precision_aware_optimizer:
            if lowered and self.mode == "train":
                raise OptionsError(f"{' '.join(lowered)}: Megatron-Core keeps Adam's moments and main params in fp32 "
                                   "unless --use-precision-aware-optimizer (optimizer_config.py asserts it); give "
                                   "--precision-aware-optimizer")
            return
        if self.mode != "train":
            return
        if self.optimizer not in ("adam", "adamw"):
            raise OptionsError(f"--precision-aware-optimizer is Transformer Engine's FusedAdam (Megatron-Core asserts "
                               f"optimizer == 'adam'); not with --optimizer {self.optimizer}")
        if self.precision != "master" or dtype(self.dtype).nbytes >= 4:
            raise OptionsError("--precision-aware-optimizer keeps main params beside 16-bit weights: give --dtype "
                               f"bf16 or fp16 and --precision master, not --dtype {self.dtype} --precision "
                               f"{self.precision}")
        if self.zero != 1 and not (self.zero == 0 and self.dp == 1):  # one rank: nothing to shard
            raise OptionsError("--precision-aware-optimizer runs only under Megatron-Core's distributed optimizer "
                               f"(get_megatron_optimizer raises otherwise): give --zero 1, not --zero {self.zero}")
        if self.grad_buffer == "param+fp32":
            raise OptionsError("--precision-aware-optimizer reads a 16-bit gradient buffer in place (decoupled_grad; "
                               "an fp32 copy only under --fp8 te-current or te-mxfp8, which it counts): give "
                               "--grad-buffer param (--main-grads-dtype bf16) or fp32, not param+fp32")
        unmodelled = [(self.implementation_kind != "megatron", f"--implementation {self.implementation}"),
                      (self.framework not in (None, "megatron"), f"--framework {self.framework}"),
                      (self.finetuning, "fine-tuning options"), (self.offload, "--offload"),
                      (self.offload_params, "--offload-params"), (self.grad_sync != "overlapped",
                                                                 f"--grad-sync {self.grad_sync}")]
        for flag, what in unmodelled:
            if flag:
                raise OptionsError(f"--precision-aware-optimizer (Megatron-Core's) is not modelled with {what}")

    def _check_precision(self) -> None:
        if self.precision not in PRECISIONS:
            raise OptionsError(f"--precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        self._check_grad_buffer()
        if self.mode == "train" and self.precision != "master" and dtype(self.dtype).nbytes >= 4:
            raise OptionsError(f"--precision {self.precision} trains in 16 bits (autocast: fp32 weights, 16-bit "
                               "compute; pure: 16-bit everything); give --dtype bf16 or fp16")
        if self.mode == "train" and self.loss_chunks > 1 and self.seq is not None and self.seq < self.loss_chunks:
            raise OptionsError(f"--loss-chunks {self.loss_chunks} splits the sequence into chunks of tokens; "
                               f"it is more than --seq {self.seq}")

    def _check_context(self) -> None:
        if self.cp == 1:
            return
        if self.mode != "train":
            raise OptionsError("--cp (context parallelism, ring attention) splits training sequences; use it "
                               "with --mode train")
        if self.implementation_kind == "hf":
            raise OptionsError(f"--cp (ring attention) is not modelled with --implementation {self.implementation}: "
                               "transformers' models have no context parallelism; use --implementation megatron")
        if self.attention_kernel == "eager":
            raise OptionsError("--cp runs ring attention on a fused kernel (Megatron-Core: Transformer Engine's "
                               "flash/fused attention; torchtitan: SDPA); give --attention flash or sdpa "
                               "(--flash)")
        if self.seq % (2 * self.cp):
            raise OptionsError(f"--cp {self.cp}: --seq {self.seq} must divide into 2 x cp = {2 * self.cp} chunks "
                               "(Megatron-Core's load balancing gives each rank two, from both ends)")

    @property
    def uneven_stages(self) -> bool:
        """Whether the first or last pipeline stage holds a number of layers of its own."""
        return self.first_stage_layers is not None or self.last_stage_layers is not None

    def _check_stages(self) -> None:
        if self.pipeline_layout is not None:
            self._check_layout()
        self._check_mtp()
        if not self.uneven_stages:
            return
        given = sum(x is not None for x in (self.first_stage_layers, self.last_stage_layers))
        if self.pp < given + (0 if given == 2 else 1) or self.pp == 1:
            raise OptionsError(f"--first-stage-layers/--last-stage-layers set the layers of pipeline stages; give "
                               f"--pp greater than {max(given, 1)}")

    def _check_mtp(self) -> None:
        """``--mtp-layers``: Megatron-Core's MTP layers, trained under its own layers; a layout places exactly
        that many (``validate_layer_layout``: the layout's m count equals mtp_num_layers, or both are none)."""
        if self.mtp_layers and self.mode != "train":
            raise OptionsError("--mtp-layers adds Megatron-Core's multi-token-prediction layers to a training step; "
                               "use it with --mode train (transformers builds no MTP weights: --mode params counts "
                               "the model without them)")
        if self.mtp_layers and self.implementation_kind == "hf":
            raise OptionsError(f"--mtp-layers is Megatron-Core's MultiTokenPredictionBlock; transformers builds no "
                               f"MTP layers (--implementation {self.implementation}): use --implementation megatron")
        if self.pipeline_layout is not None and self.mode == "train" and self.pp > 1:
            placed = sum(c.mtp for c in self.layout_chunks())
            if placed != self.mtp_layers:
                raise OptionsError(f"--pipeline-layout places {placed} MTP layers (m) and --mtp-layers is "
                                   f"{self.mtp_layers}: give --mtp-layers {placed} (Megatron-Core's "
                                   "validate_layer_layout: the layout's m count equals mtp_num_layers)")

    def _check_layout(self) -> None:
        if self.mode != "train" or self.pp == 1:
            raise OptionsError("--pipeline-layout places the layers on pipeline stages: give --mode train and --pp "
                               "greater than 1")
        if self.uneven_stages:
            raise OptionsError("--pipeline-layout places every layer itself: drop --first-stage-layers and "
                               "--last-stage-layers")
        chunks = self.layout_chunks()
        v = len(chunks) // self.pp
        if v != (self.virtual_stages or 1):
            raise OptionsError(f"--pipeline-layout has {len(chunks)} chunks = --pp {self.pp} x {v} virtual stages; "
                               + (f"give --virtual-stages {v}" if v > 1 else "drop --virtual-stages"))

    def layout_chunks(self) -> tuple[Chunk, ...]:
        """The chunks of ``--pipeline-layout`` (``symbolic.pipeline_layout``); an ``OptionsError`` says what is
        wrong with the string."""
        try:
            return parse_layout(self.pipeline_layout, self.pp)
        except LayoutError as exc:
            raise OptionsError(str(exc)) from None

    def layout_ranks(self, dense: int = 0) -> tuple[str, ...]:
        """The pipeline ranks of ``--pipeline-layout`` whose memory or time can be the largest (``rank r``), rank 0
        first: a rank is left out when an earlier one holds as many decoder layers in each chunk (as many of the
        ``dense`` first layers), the same embedding, loss and MTP symbols and at least as many micro-batches in
        each chunk (its bytes and FLOPs then at least as large)."""
        chunks = self.layout_chunks()
        kept: list[tuple[tuple, tuple[int, ...], int]] = []
        for r in range(self.pp):
            held = rank_chunks(chunks, r)
            shape = tuple((c.layers, min(max(dense - c.first, 0), c.layers), c.text.replace("t", ""))
                          for c in held)
            flight = chunks_in_flight(held, self.pp, self.micro_batches)
            if not any(s == shape and all(a >= b for a, b in zip(f, flight)) for s, f, _ in kept):
                kept.append((shape, flight, r))
        return tuple(f"rank {r}" for _, _, r in kept)

    def stage_layers(self, layers: int) -> tuple[int, int | None, int]:
        """Layers of (the first, each middle (None: no middle stage), the last) pipeline stage of ``layers``;
        ``layers/p`` each without uneven stages. Raises ``OptionsError`` when the rest does not divide evenly."""
        p = self.pp
        if not self.uneven_stages:
            return layers // p, layers // p if p > 2 else None, layers // p
        fixed = [x for x in (self.first_stage_layers, self.last_stage_layers) if x is not None]
        rest, others = layers - sum(fixed), p - len(fixed)
        if others == 0:
            if rest:
                raise OptionsError(f"--first-stage-layers {self.first_stage_layers} and --last-stage-layers "
                                   f"{self.last_stage_layers} on --pp 2 must add up to the {layers} layers")
            return self.first_stage_layers, None, self.last_stage_layers
        if rest < others or rest % others:
            raise OptionsError(f"{layers} layers less {sum(fixed)} on the first/last stage leave {rest}, not "
                               f"divisible over the other {others} pipeline stages")
        middle = rest // others
        first = middle if self.first_stage_layers is None else self.first_stage_layers
        last = middle if self.last_stage_layers is None else self.last_stage_layers
        self._check_chunks(first, middle if p - 2 > 0 else None, last)
        return first, (middle if p - 2 > 0 else None), last

    def _check_chunks(self, first: int, middle: int | None, last: int) -> None:
        """Interleaved uneven stages: each stage's layers split into v model chunks, as Megatron-Core's
        TransformerConfig requires (the first and last stage's layers divisible by v), or with the embedding and the
        loss as one chunk slot each, as Llama 3 405B ran (Dubey et al. 2024 §3.3.2: 'the first model chunk on the
        first stage has only the embedding'; Megatron-Core's account_for_embedding/loss_in_pipeline_split)."""
        v = self.virtual_stages
        if v in (None, 1):
            return
        bad = [f"{name} {n}" for name, n, slot in (("first", first, 1), ("middle", middle, 0), ("last", last, 1))
               if n is not None and n % v and (n + slot) % v]
        if bad:
            raise OptionsError(f"--virtual-stages {v} with uneven stages: {', '.join(bad)} layers do not split into "
                               f"{v} model chunks (a stage's layers divisible by v, or the first/last stage's layers "
                               "plus its embedding/loss slot)")

    def _check_cluster(self) -> None:
        _positive("gpus-per-node", self.gpus_per_node)
        bw = self.inter_node_bandwidth
        if isinstance(bw, bool) or not isinstance(bw, int | float) or not 0 < bw <= 10**6:
            raise OptionsError(f"--inter-node-bandwidth is Gb/s per GPU each way, a number in (0, 10^6], got {bw!r}")
        hm = self.host_memory_bandwidth
        if isinstance(hm, bool) or not isinstance(hm, int | float) or not 0 < hm <= 10**5:
            raise OptionsError(f"--host-memory-bandwidth is GB/s of host memory per GPU, a number in (0, 10^5], "
                               f"got {hm!r}")
        if self.intra_node_link not in (None, "nvlink", "pcie"):
            raise OptionsError(f"--intra-node-link must be nvlink or pcie, got {self.intra_node_link!r}")
        if self.intra_node_link == "pcie" and self.gpu is not None:
            try:
                intra_bandwidth(gpu(self.gpu), "pcie")
            except ValueError as exc:
                raise OptionsError(str(exc)) from None

    def _check_framework(self) -> None:
        if self.framework is not None:
            if self.framework not in FRAMEWORKS:
                raise OptionsError(f"--framework must be one of {', '.join(FRAMEWORKS)}, got {self.framework!r}")
            if self.mode != FRAMEWORKS[self.framework].mode:
                kind = "serves" if FRAMEWORKS[self.framework].mode == "infer" else "trains"
                raise OptionsError(f"--framework {self.framework} {kind}: use it with --mode "
                                   f"{FRAMEWORKS[self.framework].mode}")

        if self.optimizer not in OPTIMIZERS:  # checked here, not as a KeyError deep in the derivation
            raise OptionsError(f"--optimizer must be one of {', '.join(OPTIMIZERS)}, got {self.optimizer!r}")
        if self.optimizer == "muon":
            self._check_muon()
        if self.cuda_module_loading not in ("lazy", "eager"):
            raise OptionsError(f"--cuda-module-loading must be lazy or eager, got {self.cuda_module_loading!r}")
        _positive("max-num-batched-tokens", self.max_num_batched_tokens)
        _positive("max-num-seqs", self.max_num_seqs)
        util = self.gpu_memory_utilization
        if util is not None and (isinstance(util, bool) or not isinstance(util, int | float) or not 0 < util <= 1):
            raise OptionsError(f"--gpu-memory-utilization must be a fraction in (0, 1], got {util!r}")
        given = [f"--{n.replace('_', '-')}" for n in ("gpu_memory_utilization", "max_num_batched_tokens",
                                                     "max_num_seqs") if getattr(self, n) is not None]
        if given and self.framework != "vllm":
            raise OptionsError(f"{', '.join(given)} describe vLLM's engine; add --framework vllm")

    def _check_muon(self) -> None:
        """What Megatron-Core's Muon refuses (get_megatron_muon_optimizer, Megatron-LM d7288711, the commit
        Megatron-Bridge v0.4.0 pins): 'muon with dist optimizer is not supported' (the layer-wise optimizer of
        --zero 1 shards the states only; weights and gradients stay whole), 'muon with fp16 is not supported';
        its precision-aware optimizer and CPU offload are not wired to Muon (TODO: support precision aware
        optimizer)."""
        if self.zero >= 2:
            raise OptionsError(f"--optimizer muon with --zero {self.zero}: Megatron-Core's Muon refuses the "
                               "distributed optimizer ('muon with dist optimizer is not supported'); use --zero 1 "
                               "(its layer-wise distributed optimizer) or --zero 0")
        elsewhere = (self.framework not in (None, "megatron") or self.implementation != "megatron"
                     or self.grad_sync == "deepspeed")
        if self.zero == 1 and elsewhere:
            raise OptionsError("--optimizer muon with --zero 1 is Megatron-Core's layer-wise distributed optimizer "
                               "(LayerWiseDistributedOptimizer), which only Megatron-Core runs: give --framework "
                               "megatron, or --zero 0")
        refused = [flag for flag, on in (("--dtype fp16", self.dtype == "fp16"), ("--offload", self.offload),
                                         ("--offload-params", self.offload_params),
                                         ("--precision-aware-optimizer", self.precision_aware_optimizer)) if on]
        if refused:
            raise OptionsError(f"--optimizer muon with {', '.join(refused)}: Megatron-Core's Muon supports neither "
                               "(get_megatron_muon_optimizer: 'muon with fp16 is not supported', no offload or "
                               "precision-aware path); drop it")

    def _check_experts(self) -> None:
        if self.moe_dispatcher not in MOE_DISPATCHERS:
            raise OptionsError(f"--moe-dispatcher must be one of {', '.join(MOE_DISPATCHERS)}, got {self.moe_dispatcher!r}")
        # Megatron-Core's expert grid (parallel_state.initialize_model_parallel, order tp-ep-dp-pp) folds the same
        # tp x cp x dp ranks of a pipeline stage as etp x ep x edp (MoE parallel folding, Liu et al. 2025)
        etp, ranks = self.expert_tp, self.tp * self.cp * self.dp
        if self.etp is not None and self.etp > self.tp:
            raise OptionsError(f"--etp {self.etp} is larger than --tp {self.tp}: memderive models expert tensor "
                               "parallelism within the tensor-parallel ranks; use --etp at most --tp")
        if self.etp not in (None, 1, self.tp):  # the expert-tensor group's own all-gather and reduce-scatter
            raise OptionsError(f"--etp {self.etp} between 1 and --tp {self.tp} is not modelled (the dispatcher's "
                               "all-gather over the expert tensor-parallel ranks); use --etp 1 or --etp equal to --tp")
        if ranks % (etp * self.ep):
            raise OptionsError(f"--etp {etp} x --ep {self.ep} must divide --tp x --cp x --dp ({ranks}): the experts' "
                               "grid etp x ep x edp folds the same GPUs; choose degrees whose product divides it")
        if self.capacity_factor is not None:
            self.capacity()
        if not self.p2p_overlap and self.framework not in (None, "megatron"):
            raise OptionsError(f"--no-p2p-overlap is Megatron-LM's --no-overlap-p2p-communication; --framework "
                               f"{self.framework} has no such switch: drop it or use --framework megatron")
        if self.moe_a2a_overlap:  # Megatron-Core's TransformerConfig.__post_init__ (quantities.a2a_overlap)
            if self.ep <= 1:
                raise OptionsError("--moe-a2a-overlap overlaps the expert-parallel all-to-alls: give --ep greater "
                                   "than 1 (Megatron-Core asserts the same)")
            if self.pp > 1 and (self.virtual_stages or 1) == 1:
                raise OptionsError("--moe-a2a-overlap with --pp greater than 1 runs on the interleaved schedule: "
                                   "give --virtual-stages (Megatron-Core asserts virtual_pipeline_model_parallel_size)")
            if self.framework not in (None, "megatron"):
                raise OptionsError(f"--moe-a2a-overlap is Megatron-Core's schedule; --framework {self.framework} "
                                   "runs none: drop it or use --framework megatron")
            if self.recompute == "full":
                raise OptionsError("--moe-a2a-overlap runs without full recompute (Megatron-Core asserts "
                                   "recompute_granularity != 'full'); use --recompute none or selective")

    @property
    def expert_tp(self) -> int:
        """The routed experts' tensor-parallel degree: ``--etp``, else the tp (Megatron-LM arguments.py:
        ``expert_tensor_parallel_size`` defaults to ``tensor_model_parallel_size``)."""
        return self.tp if self.etp is None else self.etp

    @property
    def folded(self) -> bool:
        """Experts over an expert tensor-parallel degree other than the tp (MoE parallel folding)."""
        return self.etp is not None and self.etp != self.tp  # plan's columns of tp leave etp None

    def capacity(self) -> Fraction | None:
        """The capacity factor as an exact fraction (None: no capacity limit)."""
        if self.capacity_factor is None:
            return None
        try:
            factor = Fraction(self.capacity_factor)
        except (ValueError, ZeroDivisionError):
            factor = Fraction(0)
        if factor <= 0:
            raise OptionsError(f"--capacity-factor must be a positive number such as 1.25, got "
                               f"{self.capacity_factor!r}")
        return factor

    def _check_implementation(self) -> None:
        try:
            kind, _ = parse_implementation(self.implementation)
        except ValueError as exc:
            raise OptionsError(str(exc)) from None
        if self.experts_implementation not in EXPERTS_KERNELS:
            raise OptionsError(f"--experts-implementation must be one of {', '.join(EXPERTS_KERNELS)} (transformers' "
                               f"experts_implementation), got {self.experts_implementation!r}")
        if self.experts_implementation != "grouped_mm" and kind != "hf":
            raise OptionsError("--experts-implementation is the experts kernel of transformers' code; add "
                               "--implementation hf (Megatron's grouped experts are the graph as built)")
        if self.device not in DEVICES:
            raise OptionsError(f"--device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.device != "cuda" and kind != "hf":
            raise OptionsError("--device is where transformers' kernels run; add --implementation hf (Megatron's "
                               "fused kernels are CUDA's)")
        if kind == "hf" and (self.tp > 1 or self.pp > 1 or self.sp or self.recompute in ("selective", "selective-op")):
            raise OptionsError("transformers' layers run whole on each GPU and checkpoint whole layers: tensor, "
                               "sequence and pipeline parallelism and selective recompute are Megatron's; use "
                               "--implementation megatron with them")
        kernel = parse_implementation(self.implementation)[1]
        chosen = getattr(self, "attention", None) or ("flash" if self.flash else None)
        if kernel and chosen not in (None, kernel) and not (kernel == "sdpa" and chosen == "flash"):
            raise OptionsError(f"--implementation {self.implementation} sets the attention kernel to {kernel}; "
                               f"it contradicts {'--flash' if self.flash else '--attention ' + str(chosen)}")

    @property
    def implementation_kind(self) -> str:
        """``megatron`` or ``hf`` (shorthands resolved)."""
        return parse_implementation(self.implementation)[0]

    @property
    def hf_attention(self) -> str:
        """The attention kernel transformers runs: the shorthand's, else ``--attention`` / ``--flash``, else
        sdpa (transformers' default ``attn_implementation``)."""
        kernel = parse_implementation(self.implementation)[1]
        chosen = getattr(self, "attention", None)
        return kernel or chosen or ("flash" if self.flash else "sdpa")

    @property
    def hf_attention_given(self) -> bool:
        """Whether the kernel of ``hf_attention`` was asked for (a shorthand, ``--attention``, ``--flash``)."""
        return bool(parse_implementation(self.implementation)[1] or getattr(self, "attention", None) or self.flash)

    @property
    def attention_kernel(self) -> str:
        """The attention kernel: ``flash`` under ``--flash``, else ``--attention``, else what today's
        frameworks run, in every command: ``sdpa`` in inference (transformers' default ``attn_implementation``,
        and what ``generate`` and serving engines run: no s x s scores held) and under ``--implementation hf``,
        ``flash`` in training under Megatron's layers (Megatron-Core's ``--attention-backend auto``: Transformer
        Engine's flash or fused kernel). ``--attention eager`` is the textbook profile (the b*a*s*s scores
        saved, Korthikanti et al.'s assumption).

        >>> Options(mode="infer", batch=1, seq=1).attention_kernel, Options(mode="train", batch=1, seq=1).attention_kernel
        ('sdpa', 'flash')
        """
        if self.flash:
            return "flash"
        if self.attention is not None:
            return self.attention
        if self.mode == "train" and self.implementation_kind == "hf":
            return self.hf_attention  # the shorthand's kernel, or transformers' default (sdpa)
        return "sdpa" if self.mode == "infer" else "flash"

    @property
    def finetuning(self) -> bool:
        """Whether some parameters are frozen (LoRA, frozen embeddings, --train-only, a quantized base)."""
        return self.lora_rank is not None or self.freeze_embeddings or bool(self.train_only)

    def _check_finetuning(self) -> None:
        _positive("lora-rank", self.lora_rank)
        _peft_target_list(self.lora_targets)
        object.__setattr__(self, "lora_targets", _names(self.lora_targets))
        _peft_target_list(self.lora_target_parameters, "--lora-target-parameters")
        object.__setattr__(self, "lora_target_parameters", _names(self.lora_target_parameters))
        if "all-linear" in self.lora_target_parameters:
            raise OptionsError("--lora-target-parameters names parameters (gate_up_proj, mlp.gate.weight); "
                               "all-linear is a --lora-targets shorthand")
        object.__setattr__(self, "train_only", _names(self.train_only))
        if (self.lora_rank is None) != (not self.lora_targets and not self.lora_target_parameters):
            raise OptionsError("--lora-rank and --lora-targets go together (e.g. --lora-rank 8 --lora-targets "
                               "q_proj,v_proj, or all-linear)")
        if not isinstance(self.lora_dropout, int | float) or not 0 <= self.lora_dropout < 1:
            raise OptionsError(f"--lora-dropout must be a probability in [0, 1), got {self.lora_dropout!r}")
        if (self.dora or self.lora_dropout) and self.lora_rank is None:
            raise OptionsError("--dora and --lora-dropout need --lora-rank and --lora-targets")
        if self.lora_rank is not None and self.train_only:
            raise OptionsError("--train-only freezes all but some modules; LoRA freezes the whole base: give one")
        if self.base_dtype is not None and self.base_dtype not in BASE_DTYPES:
            raise OptionsError(f"--base-dtype must be one of {', '.join(BASE_DTYPES)}, got {self.base_dtype!r}")
        if self.base_dtype in ("nf4", "int8") and self.lora_rank is None and not self.train_only:
            raise OptionsError(f"a {self.base_dtype} base cannot be trained; add adapters (--lora-rank, "
                               "--lora-targets) or train other modules (--train-only)")
        if self.fsdp_flat_params and (self.zero < 2 or not self.finetuning):
            raise OptionsError("--fsdp-flat-params is FSDP1's gradient of a unit that mixes frozen and trainable "
                               "parameters: give --zero 2 or 3 and fine-tuning options (--lora-rank, --train-only)")
        if self.fsdp_flat_params and self.base_dtype in ("nf4", "int8"):
            raise OptionsError("--fsdp-flat-params with a quantized base (its flat storage dtype) is not modelled; "
                               "leave out --base-dtype or --fsdp-flat-params")
        if self.no_double_quant and self.base_dtype != "nf4":
            raise OptionsError("--no-double-quant is about an NF4 base's absmax; give --base-dtype nf4")
        if self.base_dtype is not None and not self.finetuning:
            raise OptionsError("--base-dtype is the dtype of frozen base weights; freeze some (--lora-rank, "
                               "--train-only, --freeze-embeddings)")
        if self.mode == "infer" and (self.finetuning or self.base_dtype is not None):
            raise OptionsError("fine-tuning options are for --mode train or params; inference quantization is "
                               "--weight-dtype")

    def strategies(self, stage: str = "first") -> tuple[Strategy, ...]:
        """The graph transforms these options apply, in order (``sdpa`` and ``flash`` both save no
        s x s scores: the memory-efficient kernels keep the logsumexp, as FlashAttention does); ``stage``: the
        pipeline stage seen (first, middle or last)."""
        out: list[Strategy] = []
        if self.attention_kernel != "eager":
            out.append(FlashAttention(self.attention_kernel, chosen=self.implementation_kind == "hf"))
        if self.recompute == "selective":
            modules = self.recomputed_modules
            if "core_attn" in modules:
                out.append(SelectiveRecompute())
            if not self.core_attn_checkpointed:  # the fused kernel left as it is
                modules = tuple(m for m in modules if m != "core_attn")
            if modules:
                out.append(ModuleRecompute(modules))
        elif self.recompute == "full":
            out.append(FullRecompute(self.recompute_share()))
        elif self.recompute == "selective-op":
            # lazy: the op-level checkpoint transform, imported for this choice only (~1% of a cold estimate)
            from memderive.symbolic.op_checkpoint import OpSelectiveRecompute

            out.append(OpSelectiveRecompute(self.sp))
        # Degrees enter as symbols (t, p, m, v) so closed forms keep them; values come later.
        if self.capacity_factor is not None:
            out.append(ExpertCapacity(self.capacity()))
        if self.cp > 1:  # before tensor and sequence parallelism: those split the s/cp tokens further
            out.append(ContextParallel(dims.cp))
        if self.tp > 1:
            out.append(TensorParallel(dims.t, dims.etp if self.folded else None))
        if self.ep > 1:
            out.append(ExpertParallel(dims.ep))
        if self.sp:
            out.append(SequenceParallel(dims.t, dims.etp if self.folded else None))
        if self.pp > 1 and self.pipeline_layout is not None:  # the rank's chunks, p and v as numbers
            rank = {"first": 0, "middle": 1, "last": self.pp - 1}.get(stage) if not stage.startswith("rank ") else \
                int(stage.split()[-1])
            held = rank_chunks(self.layout_chunks(), rank)
            out.append(PipelineParallel(self.pp, self.virtual_stages, self.micro_batches, stage=f"rank {held[0].rank}",
                                        chunks=held, flight=chunks_in_flight(held, self.pp, self.micro_batches)))
        elif self.pp > 1:  # uneven stages: p as a number (the layers of each stage are numbers)
            out.append(PipelineParallel(self.pp if self.uneven_stages else dims.p,
                                        None if self.virtual_stages in (None, 1) else dims.v,
                                        None if self.micro_batches is None else dims.m, stage=stage,
                                        first_layers=self.first_stage_layers, last_layers=self.last_stage_layers))
        return tuple(out)

    def strategy_names(self) -> tuple[str, ...]:
        return tuple(x.name for x in self.strategies())


def derived(options: Any, **changes: Any) -> Any:
    """``dataclasses.replace(options, **changes)`` without ``Options``' checks, for options made from checked ones
    only to be read (a layout's whole model at t = p = 1, the same layout without recompute: their transforms).
    A ``search.columns.ColumnOptions`` (the layouts of one structure) derives its own (``derived``).

    >>> from dataclasses import replace
    >>> o = Options(mode="train", batch=1, seq=8, tp=2, sp=True, recompute="full")
    >>> w = derived(o, tp=1, sp=False, recompute="none")
    >>> (w.tp, w.sp, w.recompute, w.seq) == (1, False, "none", 8), w == replace(o, tp=1, sp=False, recompute="none")
    (True, True)
    """
    if type(options) is not Options:
        return options.derived(**changes)
    unknown = set(changes).difference(_FIELD_NAMES)
    if unknown:
        raise TypeError(f"Options has no field {', '.join(sorted(unknown))}")
    out = object.__new__(Options)
    for name in _FIELD_NAMES:
        object.__setattr__(out, name, changes[name] if name in changes else getattr(options, name))
    return out


_FIELD_NAMES = tuple(f.name for f in fields(Options))
