"""Every option of an estimate, declared once: its flag, kind, default, the modes and commands it
applies to, its size symbol, its help text and how it prints.

The command line (argparse of every command, the "does not apply to this mode" rule), the notes-marker
keys of ``check --file``, the inputs echoed by reports, the command lines rebuilt in writeups, notebooks
and plan rows, the symbol bindings of an estimate and its cache key are all read from ``OPTIONS``. A new
option is one entry here and the code that gives it meaning (an ``Options`` field, checked 1:1 by a
test); nothing else.

>>> OPTIONS_BY_NAME["tp"].flag, OPTIONS_BY_NAME["tp"].symbol, OPTIONS_BY_NAME["dropout"].key
('--tp', 't', 'dropout')
>>> marker_option("kv-block").name, value_from_text(OPTIONS_BY_NAME["overhead_bytes"], "2GiB")
('kv_block', 2147483648)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memderive.derivations.choices import MAIN_PARAM_DTYPES, MOMENT_DTYPES
from memderive.derivations.frameworks import FRAMEWORKS
from memderive.derivations.sizes import parse_size, size_text
from memderive.symbolic.dims import by_name, sym
from memderive.symbolic.expr import Expr
from memderive.symbolic.userbuffers import UB_CONFIGS

__all__ = ["Option", "OPTIONS", "OPTIONS_BY_NAME", "KINDS", "MODES", "COMMANDS", "STRATEGY_COMMANDS",
           "options_for", "marker_option", "value_from_text", "value_text", "symbol_values", "shared_names"]

MODES = ("params", "train", "infer")
#: What an option's value is: how the command line and a notes marker read it, and how it prints.
KINDS = ("int", "bool", "choice", "text", "size", "dtype", "float", "names")
#: The commands that take the step-and-strategy options; ``plan`` takes the entries that name it.
STRATEGY_COMMANDS = ("estimate", "derive", "fit", "plot", "notebook", "check", "compare", "sweep")
COMMANDS = (*STRATEGY_COMMANDS, "plan")
_STEP, _TUNING = "step and strategy", "fine-tuning"
_PLANNED = (*STRATEGY_COMMANDS, "plan")
_SAME = object()  # cli_default: the Options default


@dataclass(frozen=True, slots=True)
class Option:
    """One option. ``name`` is its ``Options`` field; ``flag`` its command-line spelling (a ``bool``
    whose default is True is set off by its flag, ``--no-dropout``).

    ``modes``: the modes it applies to (the CLI refuses it, given, in another). ``symbol``: the name of
    the ``symbolic.dims`` size its value binds (in the modes ``binds``). ``shared``: the derivation does
    not depend on the value (a symbol, or times only), so the estimate cache key leaves it out.
    ``echo``: ``always``, ``set`` (only when true/non-empty) or ``changed`` (only when not the default)
    in the inputs line of a report, or ``never`` (the JSON inputs hold every option). ``example``: command-line words that set it to a value other than its default (the
    table's round-trip test runs them through the CLI and a notes marker)."""

    name: str
    flag: str
    kind: str
    default: Any
    help: str = ""
    choices: tuple[Any, ...] = ()
    modes: tuple[str, ...] = ("train", "infer")
    commands: tuple[str, ...] = STRATEGY_COMMANDS
    symbol: str | None = None
    binds: tuple[str, ...] = MODES
    shared: bool = False
    echo: str = "always"
    group: str = _STEP
    cli_default: Any = _SAME
    example: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.flag.startswith("--") or self.echo not in ("always", "set", "changed", "never"):
            raise ValueError(f"option {self.name}: flag {self.flag!r} or echo {self.echo!r} malformed")
        if self.symbol is not None:
            by_name(self.symbol)  # an undeclared dimension raises KeyError
        if not set(self.modes) <= set(MODES) or not set(self.commands) <= set(COMMANDS):
            raise ValueError(f"option {self.name}: unknown mode or command")

    @property
    def negated(self) -> bool:
        """A switch that is on unless its flag is given (``--no-dropout``)."""
        return self.kind == "bool" and self.default is True

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag (``no_dropout``, ``overhead``)."""
        return self.flag[2:].replace("-", "_")

    @property
    def key(self) -> str:
        """The notes-marker key and the echoed label's words: the flag's name, or the field's for a
        negated switch (``dropout``, written ``no-dropout`` to set it off)."""
        return self.name.replace("_", "-") if self.negated else self.flag[2:]

    @property
    def label(self) -> str:
        """How the echoed inputs name it (``new tokens``, ``overhead``)."""
        return self.key.replace("-", " ")

    @property
    def argument_default(self) -> Any:
        """The command line's default: the Options default unless declared (``None``: unset, decided later)."""
        if self.cli_default is not _SAME:
            return self.cli_default
        if self.kind == "size":
            return size_text(self.default)
        return ",".join(self.default) if self.kind == "names" else self.default

    @property
    def dim(self) -> Expr | None:
        return None if self.symbol is None else sym(self.symbol)


def _o(name: str, kind: str, default: Any, help: str = "", flag: str | None = None, **more: Any) -> Option:
    return Option(name, flag or "--" + name.replace("_", "-"), kind, default, help, **more)


#: Command-line words of a small step, for the examples.
_TRAIN_STEP = ("--mode", "train", "--batch", "1", "--seq", "8")
_INFER_STEP = ("--mode", "infer", "--batch", "1", "--seq", "8")
_INFER = ("infer",)
_TRAIN = ("train",)
_ALL = MODES
#: The options, in the order reports echo them (the order of ``--help`` and of rebuilt command lines).
OPTIONS: tuple[Option, ...] = (
    _o("mode", "choice", "params", choices=MODES, modes=_ALL, cli_default=None, echo="never",
       example=_TRAIN_STEP),
    _o("batch", "int", None, "micro-batch size: sequences in one micro-batch", symbol="b", shared=True,
       example=("--mode", "train", "--batch", "2", "--seq", "8")),
    _o("seq", "int", None, "tokens per sequence (the prompt, in inference)", symbol="s", shared=True, commands=_PLANNED,
       example=("--mode", "train", "--batch", "1", "--seq", "16")),
    _o("new_tokens", "int", 0, "tokens generated per sequence (inference)", modes=_INFER, symbol="n", binds=_INFER,
       shared=True, commands=_PLANNED, cli_default=None, example=(*_INFER_STEP, "--new-tokens", "4")),
    _o("weight_dtype", "dtype", None, "inference weight dtype (fp16, int8, int4, fp8, nf4; mxfp4: routed experts as "
       "gpt-oss ships them)", modes=_INFER,
       commands=_PLANNED, example=(*_INFER_STEP, "--weight-dtype", "int8")),
    _o("kv_dtype", "dtype", None, "inference KV-cache dtype", modes=_INFER, commands=_PLANNED,
       example=(*_INFER_STEP, "--kv-dtype", "fp8")),
    _o("quant_group", "int", 128, "int4/int8 quantization group size", modes=_INFER, symbol="g", binds=_INFER,
       commands=_PLANNED, example=(*_INFER_STEP, "--weight-dtype", "int4", "--quant-group", "64")),
    _o("dtype", "dtype", "bf16", "training parameter/compute dtype (bf16 = mixed precision)", modes=_TRAIN,
       commands=_PLANNED, example=(*_TRAIN_STEP, "--dtype", "fp32")),
    _o("precision", "choice", "master", "mixed-precision recipe with a 16-bit --dtype: master (16-bit weights and "
       "gradients, fp32 master copy and optimizer states: Megatron-LM, DeepSpeed), autocast (torch.autocast: fp32 "
       "weights, gradients and states, 16-bit casts saved for backward: HF Trainer), pure (16-bit weights, gradients "
       "and states, no master: torchtune)", choices=("master", "autocast", "pure"), modes=_TRAIN, commands=_PLANNED,
       echo="changed", example=(*_TRAIN_STEP, "--precision", "pure")),
    _o("grad_buffer", "choice", "param", "the gradients' buffer under --precision master: param (the weights' dtype: "
       "ZeRO's 16 bytes per parameter), fp32 (an fp32 buffer: Megatron-LM's main_grad, forced under --bf16; DeepSpeed's "
       "BF16_Optimizer: 18 bytes), param+fp32 (a 16-bit buffer and the optimizer's fp32 copy, sharded with the states: "
       "Megatron-LM under --fp16, 20 bytes); --framework megatron sets it (its param is param+fp32 unless "
       "--precision-aware-optimizer: Megatron-Core's step copies 16-bit gradients to fp32)", choices=("param", "fp32", "param+fp32"),
       modes=_TRAIN, commands=_PLANNED, echo="changed", example=(*_TRAIN_STEP, "--grad-buffer", "fp32")),
    _o("precision_aware_optimizer", "bool", False, "Megatron-Core's --use-precision-aware-optimizer (Transformer "
       "Engine's FusedAdam, with --zero 1): the moments in --moments, the main params in --main-params (fp32 ones "
       "of bf16 weights stored as 16-bit remainders), the gradients read from the buffer in place (--grad-buffer "
       "param: --main-grads-dtype bf16; fp32: its default)", modes=_TRAIN, commands=_PLANNED, echo="set",
       example=(*_TRAIN_STEP, "--dp", "2", "--zero", "1", "--precision-aware-optimizer")),
    _o("moments", "choice", "fp32", "Adam's exp_avg and exp_avg_sq dtype under --precision-aware-optimizer "
       "(Megatron-Core's --exp-avg-dtype, --exp-avg-sq-dtype)", choices=MOMENT_DTYPES,
       modes=_TRAIN, commands=_PLANNED, echo="changed",
       example=(*_TRAIN_STEP, "--dp", "2", "--zero", "1", "--precision-aware-optimizer", "--moments", "bf16")),
    _o("main_params", "choice", "fp32", "the main params' dtype under --precision-aware-optimizer (Megatron-Core's "
       "--main-params-dtype)", choices=MAIN_PARAM_DTYPES, modes=_TRAIN, commands=_PLANNED, echo="changed",
       example=(*_TRAIN_STEP, "--dp", "2", "--zero", "1", "--precision-aware-optimizer", "--main-params", "fp16")),
    _o("fp8", "choice", "none", "Float8 linears as torchao trains them (convert_to_float8_training, every nn.Linear "
       "whose dims divide by 16): tensorwise, rowwise or rowwise_with_gw_hp (torchao's Float8LinearRecipeName); the "
       "16-bit input and weight stay saved, the 8-bit casts are transients, each matmul at the GPU's fp8 rate of "
       "its shape; with --implementation hf, or --framework torchtitan (rowwise recipes, with its TP, PP, CP and "
       "op-level checkpointing, which saves every _scaled_mm output; its default, tensorwise, with its Float8 tensor "
       "parallelism at --tp > 1: 8-bit all-gathers, the linears' 8-bit inputs saved), and a "
       "16-bit --dtype. Or Transformer Engine's "
       "fp8 under Megatron-Core "
       "(--implementation megatron): te-delayed, te-current (Hopper and later), te-mxfp8 (Blackwell), every layer "
       "linear's three GEMMs at the GPU's fp8 rate, its input saved as the 8-bit cast, its 8-bit weight cached; "
       "te-nvfp4 (Blackwell: NVFP4BlockScaling), the same in 4 bits at the GPU's FP4 rate", choices=("none", "tensorwise", "rowwise",
                                                                      "rowwise_with_gw_hp", "te-delayed",
                                                                      "te-current", "te-mxfp8", "te-nvfp4"),
       modes=_TRAIN, commands=_PLANNED, echo="changed",
       example=(*_TRAIN_STEP, "--implementation", "hf", "--fp8", "tensorwise")),
    _o("fp8_param_gather", "bool", False, "Megatron-LM's --fp8-param-gather (Megatron-Bridge's fp8 recipes set it), "
       "with --fp8 te-* and the distributed optimizer (--zero 1) or Megatron-FSDP (--zero 3 --framework megatron: "
       "delayed and current scaling): the layers' linear weights built as Transformer Engine fp8 tensors "
       "(fp8_model_init), no 16-bit copy; delayed and current scaling gather them in 8 bits, MXFP8 in 16 through "
       "the gradient buffer (reuse_grad_buf_for_mxfp8_param_ag)", modes=_TRAIN,
       commands=_PLANNED, echo="set",
       example=(*_TRAIN_STEP, "--fp8", "te-current", "--dp", "2", "--zero", "1", "--fp8-param-gather")),
    _o("tp_only_amax_red", "bool", False, "Megatron-Core's --tp-only-amax-red, for times: under --fp8 te-delayed the "
       "amax all-reduces over the tensor- and context-parallel ranks only, as Megatron-Core 0.8 ran them by default; "
       "else over the stage's data-parallel ranks too (quantities.te_amax)", modes=_TRAIN, echo="set", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--fp8", "te-delayed", "--tp", "2", "--sp", "--framework", "megatron",
                "--tp-only-amax-red")),
    _o("fp8_keep_output", "bool", False, "with a torchao --fp8 recipe: the output layer left 16-bit, as torchtitan's "
       "December 2024 benchmarks ran (9dec370 float8.py: module_filter_fn=lambda mod, fqn: fqn != \"output\"); by default "
       "every linear whose dims divide by 16 is converted, the output layer too", modes=_TRAIN, commands=_PLANNED,
       echo="set", example=(*_TRAIN_STEP, "--implementation", "hf", "--fp8", "tensorwise", "--fp8-keep-output")),
    _o("optimizer", "text", "adamw", "adamw, adam, adam-8bit, paged-adamw, paged-adamw-8bit, sgd-momentum, sgd, "
       "adafactor (factored second moments), muon (Megatron-Core's: Newton-Schulz on the 2-D weights, Adam on the "
       "rest; --zero 1: its layer-wise distributed optimizer, whole parameters per data-parallel rank)",
       modes=_TRAIN, commands=_PLANNED, example=(*_TRAIN_STEP, "--optimizer", "sgd")),
    _o("optimizer_impl", "choice", "foreach", "torch's Adam/AdamW at the step: foreach (one state-sized temporary "
       "per parameter, all at once: _multi_tensor_adam's exp_avg_sq_sqrt), fused (torch._fused_adamw_: none; "
       "4-byte step counts on the device), for-loop (_single_tensor_adam: a parameter's square root and quotient)",
       choices=("foreach", "fused", "for-loop"), modes=_TRAIN, echo="changed", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--optimizer-impl", "fused")),
    _o("optimizer_in_backward", "bool", False, "each parameter updated as its gradient is ready, the gradient freed "
       "at once (torchtune's optimizer_in_bwd)", modes=_TRAIN, echo="set", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--optimizer-in-backward")),
    _o("loss_chunks", "int", 1, "chunked cross-entropy: the output layer and the loss run on 1/N of the tokens at a "
       "time (torchtune's CEWithChunkedOutputLoss: 8)", modes=_TRAIN, commands=_PLANNED, echo="changed",
       example=(*_TRAIN_STEP, "--loss-chunks", "2")),
    _o("tp", "int", 1, symbol="t", shared=True, example=(*_TRAIN_STEP, "--tp", "2")),
    _o("pp", "int", 1, modes=_TRAIN, symbol="p", shared=True, example=(*_TRAIN_STEP, "--pp", "2")),
    _o("dp", "int", 1, modes=_TRAIN, symbol="d", shared=True, example=(*_TRAIN_STEP, "--dp", "2")),
    _o("cp", "int", 1, "context parallelism: ring attention over cp ranks, each holding s/cp of every sequence "
       "(Megatron-Core --context-parallel-size, torchtitan context_parallel_degree; a fused attention kernel)",
       modes=_TRAIN, symbol="cp", shared=True, commands=_PLANNED, echo="changed",
       example=(*_TRAIN_STEP, "--flash", "--cp", "2")),
    _o("sp", "bool", False, "sequence parallelism (with --tp)", modes=_TRAIN,
       example=(*_TRAIN_STEP, "--tp", "2", "--sp")),
    _o("tp_comm_overlap", "bool", False, "Megatron-LM's --tp-comm-overlap, for times: Transformer Engine overlaps "
       "each sequence-parallel all-gather and reduce-scatter with its linear's GEMM, split into t chunks (with --tp "
       "and --sp); under --framework torchtitan, its AsyncTP (enable_async_tensor_parallel: torch's "
       "micro-pipeline TP splits the same collectives per rank behind the matmuls and _scaled_mm's)",
       modes=_TRAIN, shared=True, echo="set",
       example=(*_TRAIN_STEP, "--tp", "2", "--sp", "--tp-comm-overlap")),
    _o("tp_comm_overlap_cfg", "choice", "te", "Transformer Engine's userbuffers config under --tp-comm-overlap, "
       "for times: the SMs each overlapped communication takes from its GEMM (set_sm_margin), the GEMM timed on the "
       "rest; te (TE's defaults: 16 SMs from the row-parallel forward GEMMs and the column-parallel data- and "
       "weight-gradient GEMMs), te_v1 (TE 1.x's defaults: none), a Megatron-Bridge config by its name "
       "(comm_overlap.py's userbuffers_*) or a NeMo launcher yaml's (ub_cfg_*)",
       choices=tuple(UB_CONFIGS), modes=_TRAIN, shared=True, echo="changed",
       example=(*_TRAIN_STEP, "--tp", "4", "--sp", "--tp-comm-overlap", "--framework", "megatron",
                "--tp-comm-overlap-cfg", "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192")),
    _o("ep", "int", 1, "expert parallelism: routed experts over ep of the tp x cp x dp ranks (etp x ep must divide "
       "them)", modes=_ALL, symbol="ep",
       shared=True, echo="never", commands=_PLANNED, example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--dp", "2", "--ep", "2")),
    _o("etp", "int", None, "expert tensor parallelism (Megatron-Core's --expert-tensor-parallel-size, MoE parallel "
       "folding): the routed experts' weights split over etp of the tp ranks, their tokens all-gathered over them; "
       "default the --tp", modes=_TRAIN, symbol="etp", shared=True, echo="set",
       example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--tp", "2", "--sp", "--dp", "2", "--ep", "4", "--etp", "1")),
    _o("moe_dispatcher", "choice", "alltoall", "MoE token dispatch over the expert-parallel ranks, for times: "
       "alltoall (Megatron-Core's all-to-all dispatcher: one copy of a token per routed expert) or deepep (DeepEP: "
       "one copy per destination GPU, one per destination node across nodes, forwarded there over NVLink)",
       choices=("alltoall", "deepep"), modes=_TRAIN, shared=True, echo="changed", commands=_PLANNED,
       example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--dp", "2", "--ep", "2", "--moe-dispatcher", "deepep")),
    _o("p2p_overlap", "bool", True, "Megatron-Core's overlap_p2p_comm, for times: under --framework megatron's "
       "interleaved schedule (--virtual-stages) each pipeline send and receive runs behind a chunk's compute, "
       "Megatron-LM's default since October 2023; --no-p2p-overlap: each waited on at once, as Megatron-LM sent "
       "them before (--no-overlap-p2p-communication)", flag="--no-p2p-overlap", modes=_TRAIN, shared=True,
       echo="changed", example=(*_TRAIN_STEP, "--pp", "2", "--virtual-stages", "2", "--micro-batches", "2",
                                "--framework", "megatron", "--no-p2p-overlap")),
    _o("moe_a2a_overlap", "bool", False, "Megatron-Core's --overlap-moe-expert-parallel-comm, for times: one "
       "micro-batch's expert all-to-alls behind another's attention and expert GEMMs, layer by layer (the combined "
       "1F1B schedule: steady-state forward beside backward; warmup and cooldown alone); with --ep, --virtual-stages "
       "where --pp > 1, not with full recompute",
       modes=_TRAIN, echo="set", commands=_PLANNED,
       example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--dp", "2", "--ep", "2", "--moe-a2a-overlap")),
    _o("capacity_factor", "text", None, "MoE capacity factor c: each expert padded to ceil(c k b s / E) token slots",
       modes=_ALL, echo="never", example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--capacity-factor", "1.25")),
    _o("zero", "int", 0, choices=(0, 1, 2, 3), modes=_TRAIN,
       example=(*_TRAIN_STEP, "--dp", "2", "--zero", "3")),
    _o("offload", "bool", False, "ZeRO-Offload: gradients and optimizer states (fp32 master weights, moments) in CPU "
       "memory; the GPU keeps the 16-bit weights (plan: every layout offloads). Timed as DeepSpeed runs it: the "
       "gradients to the CPU over PCIe behind the last backward, the CPU Adam step at --host-memory-bandwidth and "
       "the parameters back, each a line of the time breakdown", modes=_TRAIN, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--offload")),
    _o("offload_params", "bool", False, "FSDP CPU offload of the parameters themselves (CPUOffloadPolicy, "
       "DeepSpeed offload_param): parameters, gradients and optimizer states in CPU memory, sharded over --dp; the "
       "GPU holds the gathered 16-bit weights of the root and of one layer. Timed as FSDP2 runs it: the shards up "
       "before each all-gather and the gradients down over PCIe, torch's AdamW on the CPU at "
       "--host-memory-bandwidth (plan: every layout offloads, ZeRO-3 sharding)", modes=_TRAIN, commands=_PLANNED,
       echo="set", example=(*_TRAIN_STEP, "--offload-params")),
    _o("activation_offload_layers", "int", 0, "Megatron-Core's CPU activation offloading (cpu_offloading, "
       "cpu_offloading_num_layers N; Transformer Engine's get_cpu_offload_context): the saved activations of the "
       "first N of a GPU's layers copied to pinned host memory after their forward and back before their backward, "
       "so the GPU holds l - N layers' at once (--framework megatron, no pipeline stages; N below the layers); "
       "their copies over the GPU's host link (NVLink-C2C on GB200/GB300, else PCIe) are timed behind the other "
       "layers' compute", modes=_TRAIN, echo="changed",
       example=("--model", "llama-3-8b", *_TRAIN_STEP, "--framework", "megatron", "--activation-offload-layers",
                "4")),
    _o("recompute", "choice", "none", "activation recompute: selective (Megatron: the attention core), full (each "
       "layer from its input), selective-op (torchtitan's op-level policy: every other matmul's and the fused "
       "attention's outputs kept)", choices=("none", "selective", "full", "selective-op"), modes=_TRAIN,
       example=(*_TRAIN_STEP, "--recompute", "full")),
    _o("recompute_method", "choice", "uniform", "with --recompute full, Megatron's --recompute-method: uniform "
       "(groups of --recompute-layers layers, each checkpointed at its input and rebuilt whole in backward) or block "
       "(only the first --recompute-layers layers of each pipeline stage's model chunk checkpointed, the others save "
       "everything)", choices=("uniform", "block"), modes=_TRAIN, echo="changed",
       example=(*_TRAIN_STEP, "--recompute", "full", "--recompute-method", "block", "--recompute-layers", "1")),
    _o("recompute_layers", "int", 1, "with --recompute full, Megatron's --recompute-num-layers: the layers of a "
       "uniform group, or of each model chunk checkpointed under block", modes=_TRAIN, echo="changed",
       example=(*_TRAIN_STEP, "--recompute", "full", "--recompute-layers", "2")),
    _o("recompute_modules", "names", (), "with --recompute selective, Megatron-Core's --recompute-modules (default "
       "core_attn): core_attn, layernorm (the norms that are modules of their own: a MoE layer's pre-MLP norm, MLA's "
       "input norm; Transformer Engine fuses the others into their linears), moe_act (the routed experts' "
       "activation), mla_up_proj (MLA's up projections and rotary), mlp (a dense layer's MLP), moe (the whole MoE "
       "layer, all-to-alls included), shared_experts (plan: every selective row, selective searched with them)",
       modes=_TRAIN, echo="set", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--recompute", "selective", "--recompute-modules", "core_attn,mlp")),
    _o("compile", "bool", False, "torch.compile: the activations AOTAutograd's min-cut partitioner (Inductor's) "
       "saves for backward, derived from transformers' ATen calls (with --implementation hf: LLaMA-style and GPT-2 "
       "code, no dropout)", modes=_TRAIN, echo="set",
       example=("--model", "llama-3-8b", *_TRAIN_STEP, "--implementation", "hf", "--compile")),
    _o("timeline", "bool", False, "estimate --json: list the step timeline op by op (each forward and backward op's "
       "highest and last bytes); without it the JSON holds the figures and the peak's moment", modes=_TRAIN,
       shared=True, echo="set", example=(*_TRAIN_STEP, "--timeline")),
    _o("kernels", "choice", "fused", "elementwise kernels, for times: fused (Megatron-LM's fused norms, SwiGLU and "
       "rotary, torch.compile's Inductor) or eager (PyTorch without torch.compile, one kernel per operation and "
       "fp32 upcasts, the AdamW step as foreach kernels: torchtitan's compile = false, transformers)",
       choices=("fused", "eager"), modes=_TRAIN, shared=True, echo="changed", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "h100-sxm", "--kernels", "eager")),
    _o("grad_sync", "choice", "overlapped", "how gradients are accumulated and reduced, for times: overlapped "
       "(DDP/FSDP buckets and Megatron-LM's --overlap-grad-reduce behind the last backward, accumulation fused into "
       "the weight-gradient GEMM) or deepspeed (DeepSpeed's engine with its bf16 optimizer, as Megatron-DeepSpeed "
       "trained BLOOM: each micro-batch's gradients added into fp32 ones, the fp32 gradients and the tied embedding's "
       "all-reduced after the last backward, ZeRO-1's gather after the step, none overlapped)",
       choices=("overlapped", "deepspeed"), modes=_TRAIN, shared=True, echo="changed", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "a100-80gb", "--grad-sync", "deepspeed")),
    _o("flash", "bool", False, "short for --attention flash", echo="never",
       example=(*_TRAIN_STEP, "--flash")),
    _o("attention", "choice", None, "attention kernel: eager holds the b*a*s*s scores, sdpa and flash do not "
       "(default, in every command: what today's frameworks run, sdpa in inference and under --implementation hf, "
       "flash in training under Megatron's layers; eager: the textbook profile, Korthikanti et al.'s assumption)", choices=("eager", "sdpa", "flash"),
       example=(*_TRAIN_STEP, "--attention", "sdpa")),
    _o("kv_block", "int", None, "inference: paged KV cache, whole blocks of this many tokens per sequence (vLLM: 16)",
       modes=_INFER, example=(*_INFER_STEP, "--kv-block", "16")),
    _o("mla_decode", "choice", None, "multi-head latent attention's decode step: absorbed (kv_b folded into the "
       "query and the output, attention over the cached latent: vLLM, SGLang; default) or expanded (every cached "
       "latent expanded through kv_b each step: transformers)", choices=("absorbed", "expanded"), modes=_INFER,
       commands=_PLANNED, echo="set", example=("--model", "deepseek-v2", *_INFER_STEP, "--mla-decode", "expanded")),
    _o("dropout", "bool", True, flag="--no-dropout", modes=_TRAIN,
       example=(*_TRAIN_STEP, "--no-dropout")),
    _o("micro_batches", "int", None, modes=_TRAIN, symbol="m", shared=True,
       example=(*_TRAIN_STEP, "--pp", "2", "--micro-batches", "4")),
    _o("virtual_stages", "int", None, modes=_TRAIN, symbol="v", shared=True,
       example=(*_TRAIN_STEP, "--pp", "2", "--virtual-stages", "2")),
    _o("first_stage_layers", "int", None, "uneven pipeline stages: layers on the first stage (Megatron-LM "
       "--decoder-first-pipeline-num-layers), the rest evenly over the others", modes=_TRAIN, echo="set",
       commands=_PLANNED, example=(*_TRAIN_STEP, "--pp", "3", "--first-stage-layers", "2")),
    _o("last_stage_layers", "int", None, "uneven pipeline stages: layers on the last stage (Megatron-LM "
       "--decoder-last-pipeline-num-layers)", modes=_TRAIN, echo="set", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--pp", "3", "--last-stage-layers", "2")),
    _o("pipeline_layout", "text", None, "Megatron-Core's --pipeline-model-parallel-layout: model chunks split by '|' "
       "(E embedding, t decoder layer, m MTP layer, L loss; x*N and (...)*N repeat), the i-th chunk on pipeline rank "
       "i mod p as virtual stage i div p; e.g. \"Et*3|(tt|)*29,m|L\" with --pp 16 --virtual-stages 2 (plan refuses it: "
       "a layout fixes pp and v, which plan searches)", modes=_TRAIN, echo="set", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--pp", "2", "--pipeline-layout", "Et*15|t*17L")),
    _o("mtp_layers", "int", 0, "Megatron-Core's --mtp-num-layers: multi-token-prediction layers after the decoder "
       "layers (DeepSeek-V3's MTP module; each: enorm, hnorm, eh_proj 2h -> h, one layer of the model's last kind, "
       "a final norm, the shared output layer and a loss), on the last pipeline stage with a copy of the embedding "
       "(or where --pipeline-layout puts its m); default 0 as Megatron-Core's (mtp_num_layers None), whatever the "
       "config's num_nextn_predict_layers", modes=_TRAIN, echo="changed", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--mtp-layers", "1")),
    _o("profile", "choice", None, "activation profile: the paper's (norm stats neglected) or every saved tensor "
       "(default: exact under --implementation hf, whose code saves them all; korthikanti under megatron)",
       choices=("korthikanti", "exact"), modes=_TRAIN, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--profile", "exact")),
    _o("implementation", "text", "megatron", "whose layers save the activations: megatron (fused kernels, the "
       "published formulas; default) or hf (transformers' modeling code); hf-eager / hf-sdpa also set the attention",
       modes=_TRAIN, commands=_PLANNED, example=(*_TRAIN_STEP, "--implementation", "hf")),
    _o("experts_implementation", "choice", "grouped_mm", "with --implementation hf, transformers' experts kernel of a "
       "MoE model: grouped_mm (its default: tokens sorted by expert, the scaled outputs not saved) or eager (a loop "
       "over the experts)", choices=("grouped_mm", "eager"), modes=_TRAIN, echo="never", commands=_PLANNED,
       example=("--model", "mixtral-8x7b", *_TRAIN_STEP, "--implementation", "hf", "--experts-implementation", "eager")),
    _o("device", "choice", "cuda", "with --implementation hf, the device whose kernels transformers' layers run: cuda "
       "(default) or cpu (dropout masks in the activation dtype, LayerNorm stats in 16 bits with 16-bit weights, "
       "SDPA's math fallback with dropout or a value head size of its own)", choices=("cuda", "cpu"), modes=_TRAIN,
       echo="never", commands=_PLANNED, example=(*_TRAIN_STEP, "--implementation", "hf", "--device", "cpu")),
    _o("overhead_bytes", "size", 0, "allowance for framework overhead, with a unit: 2GiB, 500MB", flag="--overhead",
       commands=_PLANNED, example=(*_TRAIN_STEP, "--overhead", "2GiB")),
    _o("gpu", "text", None, "accelerator for times and memory budget (memderive gpus lists them), e.g. h100-sxm",
       modes=_ALL, shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "h100-sxm")),
    _o("efficiency", "float", None,
       "fraction of dense peak FLOP/s reached (default: each product at its shape's measured rate, efficiency.py)",
       modes=_ALL, shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "h100-sxm", "--efficiency", "0.4")),
    _o("gpus_per_node", "int", 8, "GPUs per node for times: tensor parallelism stays inside one, collectives past it "
       "cross the network (DGX/HGX and Grand Teton: 8)", shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "h100-sxm", "--gpus-per-node", "4")),
    _o("inter_node_bandwidth", "float", 400.0, "network bandwidth per GPU between nodes, Gb/s each way (DGX H100: "
       "one 400 Gb/s NDR port per GPU; Llama 3's clusters 400 Gb/s)", shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "h100-sxm", "--inter-node-bandwidth", "200")),
    _o("host_memory_bandwidth", "float", 76.8, "host DRAM bandwidth per GPU, GB/s, for the CPU optimizer step "
       "(--offload, --offload-params; default: a DGX H100's two Xeon 8480C, 2 x 8 DDR5-4800 channels, over its 8 "
       "GPUs)", shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--offload", "--gpu", "h100-sxm", "--host-memory-bandwidth", "50")),
    _o("intra_node_link", "choice", None, "link between the GPUs of a node for times: nvlink (NVLink/NVSwitch, the "
       "datasheet's) or pcie (the GPU's PCIe x16 slot; default: the GPU's own link)", choices=("nvlink", "pcie"),
       shared=True, echo="never", commands=_PLANNED,
       example=(*_TRAIN_STEP, "--gpu", "a100-80gb", "--intra-node-link", "pcie")),
    _o("framework", "choice", None, "set the options to a framework's defaults, each overridable: hf-trainer, "
       "torchtune, torchtitan, megatron, deepspeed (training), vllm (serving)", choices=tuple(FRAMEWORKS),
       commands=_PLANNED, echo="set", example=(*_TRAIN_STEP, "--framework", "torchtune")),
    _o("cuda_module_loading", "choice", "lazy", "CUDA_MODULE_LOADING of the run, for device memory with --gpu: "
       "lazy (CUDA >= 11.7, PyTorch's default) or eager (older CUDA: every kernel loaded, a larger context)",
       choices=("lazy", "eager"), commands=_PLANNED, echo="never",
       example=(*_TRAIN_STEP, "--gpu", "v100-16gb", "--cuda-module-loading", "eager")),
    _o("gpu_memory_utilization", "float", None, "vLLM: fraction of the GPU's memory the engine may use (vllm: 0.9)",
       modes=_INFER, commands=_PLANNED, echo="set",
       example=(*_INFER_STEP, "--framework", "vllm", "--gpu-memory-utilization", "0.8")),
    _o("max_num_batched_tokens", "int", None, "vLLM: tokens of one forward, the size of the profiling run "
       "(default: as vllm serve sets it for the GPU)", modes=_INFER, commands=_PLANNED, echo="set",
       example=(*_INFER_STEP, "--framework", "vllm", "--max-num-batched-tokens", "4096")),
    _o("max_num_seqs", "int", None, "vLLM: sequences decoded at once, the rows of the profiled sampler "
       "(default: as vllm serve sets it for the GPU)", modes=_INFER, commands=_PLANNED, echo="set",
       example=(*_INFER_STEP, "--framework", "vllm", "--max-num-seqs", "64")),
    _o("lora_rank", "int", None, "LoRA rank r (with --lora-targets)", modes=_TRAIN, symbol="r", shared=True,
       echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj")),
    _o("lora_targets", "names", (), ("modules as PEFT names them (q_proj,v_proj) or all-linear; under --framework "
                                     "megatron Megatron-Core's (linear_qkv, linear_proj, linear_fc1, linear_fc2: "
                                     "Megatron-Bridge's LoRA)"), modes=_TRAIN,
       echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj,v_proj")),
    _o("lora_target_parameters", "names", (), "parameters as PEFT's target_parameters names them: MoE expert "
       "stacks (gate_up_proj,down_proj) or a router's mlp.gate.weight", modes=_TRAIN, echo="set", group=_TUNING,
       commands=_PLANNED, example=("--model", "mixtral-8x7b", "--mode", "train", "--batch", "1", "--seq", "512",
                                   "--lora-rank", "8", "--lora-target-parameters", "gate_up_proj,down_proj")),
    _o("lora_dropout", "float", 0.0, "adapter dropout (> 0 saves a mask)", modes=_TRAIN, echo="set", group=_TUNING,
       commands=_PLANNED, example=(*_TRAIN_STEP, "--lora-rank", "8",
                                   "--lora-targets", "q_proj", "--lora-dropout", "0.1")),
    _o("dora", "bool", False, "DoRA: a magnitude vector per adapted output feature", modes=_TRAIN, echo="set",
       group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj", "--dora")),
    _o("base_dtype", "dtype", None, "frozen base weights: bf16, fp16, fp32, int8 (LLM.int8()), nf4 (QLoRA)",
       modes=_TRAIN, echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj",
                "--base-dtype", "nf4")),
    _o("no_double_quant", "bool", False, "NF4 base without double quantization: one fp32 absmax per 64 weights "
       "(bnb_4bit_use_double_quant false)", modes=_TRAIN, echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj", "--base-dtype", "nf4",
                "--no-double-quant")),
    _o("fsdp_flat_params", "bool", False, "FSDP1 with use_orig_params=True: a wrapped unit (a layer; the root: "
       "embeddings, final norm, head) that holds any trainable parameter gets a gradient for all of it, frozen "
       "parameters included (pytorch issue 91165)", modes=_TRAIN, echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--lora-rank", "8", "--lora-targets", "q_proj", "--zero", "3", "--dp", "2",
                "--fsdp-flat-params")),
    _o("freeze_embeddings", "bool", False, "no gradients for the embeddings", modes=_TRAIN, echo="set", group=_TUNING,
       commands=_PLANNED, example=(*_TRAIN_STEP, "--freeze-embeddings")),
    _o("train_only", "names", (), "freeze all but these modules (names, embeddings, lm_head, norms)", modes=_TRAIN,
       echo="set", group=_TUNING, commands=_PLANNED,
       example=(*_TRAIN_STEP, "--train-only", "lm_head")),
    _o("images", "int", None, "images per sequence of a vision-language model traced from its config.json (llava, "
       "gemma3; qwen2_vl and qwen2_5_vl up to 1), each at the model's resolution before the --seq text tokens "
       "(default 1 for such a model; 0: text only, what a hand-written family derives)", echo="changed",
       commands=_PLANNED, example=(*_TRAIN_STEP, "--images", "0")),
)
OPTIONS_BY_NAME: Mapping[str, Option] = {o.name: o for o in OPTIONS}
_BY_KEY = {o.key: o for o in OPTIONS}


def options_for(command: str) -> tuple[Option, ...]:
    """The options ``command`` takes, in table order."""
    return tuple(o for o in OPTIONS if command in o.commands)


def marker_option(key: str) -> Option | None:
    """The option a notes-marker key names (``kv-block``, ``kv_block``, ``overhead``), or None."""
    key = key.replace("_", "-")
    return _BY_KEY.get(key) or OPTIONS_BY_NAME.get(key.replace("-", "_"))


_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def value_from_text(option: Option, text: str) -> Any:
    """The ``Options`` value of ``text`` as a notes marker writes it (a ``ValueError`` says why not)."""
    if option.kind == "int":
        if not text.strip().isdigit():
            raise ValueError(f"{option.key} must be a whole number, not {text!r}")
        return int(text)
    if option.kind == "bool":
        if text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise ValueError(f"{option.key} must be true or false, not {text!r}")
    if option.kind == "size":
        return parse_size(text, option.key)
    if option.kind == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{option.key} must be a number, not {text!r}") from None
    return text


def value_text(option: Option, value: Any) -> str:
    """``value`` as the command line writes it (read back by the CLI to the same value)."""
    if option.kind == "size":
        return size_text(value)
    if option.kind == "names" and not isinstance(value, str):
        return ",".join(value)
    return str(value)


def symbol_values(options: Any) -> dict[Expr, int]:
    """The size symbols the options bind (``t`` = --tp, ``b`` = --batch, ...), those set, in the modes each binds."""
    out: dict[Expr, int] = {}
    for o in OPTIONS:
        value = getattr(options, o.name)
        if o.symbol is not None and value is not None and options.mode in o.binds:
            out[o.dim] = value
    return out


def shared_names() -> frozenset[str]:
    """Options whose value the derivation does not depend on (the estimate cache key leaves them out)."""
    return frozenset(o.name for o in OPTIONS if o.shared)
