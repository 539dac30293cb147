"""Fine-tuning: frozen weights, LoRA/DoRA adapters named as PEFT names them, quantized bases.

Module names follow transformers' modeling code per family (PEFT matches ``target_modules`` by
the last component of a module's name): ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
``gate_proj``, ``up_proj``, ``down_proj`` for LLaMA-style families, GPT-2's ``c_attn``, ``c_proj``
(attention output and MLP output) and ``c_fc``, and so on. ``all-linear`` is PEFT's shorthand:
every linear layer except the output layer. Where the graph computes q, k and v as one fused
op but the family has separate modules, the op is split first (``SplitFused``).

The adapters and module names themselves (PEFT's, ``SplitFused``) are ``quantities.adapters``, imported for
``--lora-rank`` / ``--train-only`` only.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from memderive.derivations.models.model import Model
from memderive.derivations.options import Options
from memderive.derivations.quantities.model_states import (OPTIMIZERS, factored_state_bytes, second_state_elements,
                                                           pipelined_fsdp2, state_widths, zero_ranks,
                                                           zero_shards)
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.expr import Max, ceiling, const, total
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.strategies import Freeze, KeepFrozenInputs, Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["finetune_steps",
           "finetune_states", "trainable_parameters", "dequantized_weight", "finetune_notes", "nf4_bits", "quantized_bytes",
           "QLORA_CITATION", "INT8_CITATION", "LORA_CITATION", "flat_unit_elements", "bitsandbytes_base"]

def nf4_bits() -> Fraction:
    """Bits per NF4 weight with double quantization (Dettmers et al. 2023 §3): 4 + 8/64 + 32/(64*256).

    >>> nf4_bits(), float(nf4_bits())
    (Fraction(2113, 512), 4.126953125)
    """
    return 4 + Fraction(8, 64) + Fraction(32, 64 * 256)


QLORA_CITATION = Citation("dettmers-2023",
                          "§3: NF4 blocks of 64, double-quantized absmax (8-bit, one fp32 per 256 blocks), "
                          "4.127 bits per weight; paged optimizers")
INT8_CITATION = Citation("dettmers-2022",
                         "§3: int8 weights with one fp32 scale per row (bitsandbytes Int8Params CB, SCB)")
LORA_CITATION = Citation("hu-2021", "§4.1: A (r x in), B (out x r) per adapted "
                         "matrix; frozen base: no gradients or optimizer states")


def finetune_steps(model: Model, opts: Options) -> list[Strategy]:
    """The graph transforms of the fine-tuning options, applied before every other strategy."""
    steps: list[Strategy] = []
    if opts.lora_rank is not None or opts.train_only:
        # lazy: PEFT's module table and the adapters (symbolic.lora), ~6% of a cold estimate, for these options only
        from memderive.derivations.quantities.adapters import lora_steps, train_only

        if opts.lora_rank is not None:
            steps += lora_steps(model, opts)
        if opts.train_only:
            steps += train_only(model, opts.train_only)
    if opts.freeze_embeddings:
        steps.append(Freeze(("embed/",)))
    if bitsandbytes_base(opts):
        steps.append(KeepFrozenInputs())
    return steps


def bitsandbytes_base(opts: Options) -> bool:
    """An NF4 base that bitsandbytes runs (PEFT's QLoRA; torchtune's NF4 is torchao's ``LinearNF4``, which
    saves only the weight: ``ctx.save_for_backward(weight)``, torchao nf4_tensor.py)."""
    return opts.base_dtype == "nf4" and opts.framework != "torchtune"


def _quantized(blk: Block, op: Op, x: Tensor, graph: Graph, base: str) -> bool:
    """transformers + bitsandbytes quantize every ``nn.Linear`` (and GPT-2's ``Conv1D``) but the output
    embeddings, tied weights and the last module (``get_keys_to_not_convert`` in transformers'
    ``quantizers/base.py``, v5.24): here every linear of the layers, not the head block's (LM head,
    BERT's pooler). Embeddings and norms are not linears; biases stay 16-bit; adapters come later."""
    return (base in ("nf4", "int8") and op.kind == "linear" and x.role == "weight" and blk.name != "head"
            and not graph.trainable(blk.name, x.name))


def _weight_terms(graph: Graph, opts: Options) -> list[Term]:
    """Bytes of every parameter one GPU holds: quantized base, 16-bit frozen parts, trainable ones."""
    train = state_widths(opts.dtype, opts.optimizer, opts.precision)[0]  # autocast: fp32 trainable weights
    base = opts.base_dtype or ("fp32" if opts.precision == "autocast" else opts.dtype)
    frozen = dtype(base).nbytes if base not in ("nf4", "int8") else train
    sums: dict[str, object] = {}
    for blk, op in graph.ops():
        for x in op.params:
            copies, n = blk.repeat * op.share, x.numel
            if _quantized(blk, op, x, graph, base):
                parts = [(key, copies * value) for key, value in quantized_bytes(base, n, x.shape[0],
                                                                                 not opts.no_double_quant)]
            elif graph.trainable(blk.name, x.name):
                parts = [("trainable", copies * n * train)]
            else:
                parts = [("frozen", copies * n * frozen)]
            for key, value in parts:
                sums[key] = sums.get(key, 0) + value
    order = ("nf4", "nf4_constants", "int8", "int8_scales", "frozen", "trainable")
    return [Term(f"model_states/weights/{k}", const(sums[k])) for k in order if k in sums]


def quantized_bytes(base: str, n: Any, rows: Any, double_quant: bool = True) -> list[tuple[str, Any]]:
    """Bytes of one quantized matrix of ``n`` weights as bitsandbytes stores it.

    NF4 (``Params4bit``, double quantization): two weights per byte, one 8-bit absmax per block of
    64, one fp32 constant per 256 absmax values (QLoRA §3: 4 + 8/64 + 32/(64*256) = 4.127 bits per
    weight); without double quantization (``bnb_4bit_use_double_quant=False``) one fp32 absmax per block
    of 64 (4 + 32/64 = 4.5 bits). LLM.int8() (``Int8Params``): one byte per weight and one fp32 scale
    per row (SCB).

    >>> from memderive.symbolic.dims import h
    >>> quantized_bytes("nf4", 4096 * 4096, 4096)  # 16,777,216 weights * 4.126953125 / 8
    [('nf4', 8388608), ('nf4_constants', 266240)]
    >>> quantized_bytes("nf4", 4096 * 4096, 4096, double_quant=False)  # 262,144 blocks x 4 B: 4.5 bits
    [('nf4', 8388608), ('nf4_constants', 1048576)]
    """
    if base == "int8":
        return [("int8", const(n)), ("int8_scales", 4 * const(rows))]
    n = const(n)
    blocks = ceiling(n / 64)
    if not double_quant:
        return [("nf4", ceiling(n / 2)), ("nf4_constants", 4 * blocks)]
    return [("nf4", ceiling(n / 2)), ("nf4_constants", blocks + 4 * ceiling(blocks / 256))]


def trainable_parameters(graph: Graph) -> Breakdown:
    """Parameters that get gradients, one term per op that owns some (per GPU after TP/PP). The first layer
    that ``RequiresGrad`` splits off holds the same parameters as the others: its terms join theirs, so that
    an op held by a fraction of the layers (a MoE layer after ``l_d`` dense ones) is one whole number."""
    sums: dict[str, Any] = {}
    for blk, op in graph.ops():
        n = total(x.numel for x in op.params if graph.trainable(blk.name, x.name))
        if op.params and any(graph.trainable(blk.name, x.name) for x in op.params):
            path = f"{'layer' if blk.name == 'first_layer' else blk.name}/{op.path}"
            sums[path] = sums.get(path, 0) + blk.repeat * op.share * n
    return Breakdown(tuple(Term(path, expr) for path, expr in sums.items()), "elements")


def flat_unit_elements(graph: Graph) -> Any:
    """Elements FSDP1 keeps gradients for with ``use_orig_params=True``: every parameter of a wrapped unit that
    holds any trainable one, frozen ones included, since the unit's ``FlatParameter`` gets one gradient for all
    of it (pytorch issue 91165; the FSDP docstring's warning, PR 104967: "the gradient memory usage will be
    higher than expected (namely, equivalent to not freezing those parameters)"). Units as transformers'
    auto-wrap policy makes them: each layer, and the root (embeddings, final norm, head)."""
    units: dict[str, list[Any]] = {}
    for blk, op in graph.ops():
        unit = "layer" if blk.name in ("layer", "first_layer") else "root"
        for x in op.params:
            entry = units.setdefault(unit, [0, False])
            entry[0] = entry[0] + blk.repeat * op.share * x.numel
            entry[1] = entry[1] or graph.trainable(blk.name, x.name)
    return total(n for n, trainable in units.values() if trainable)


def finetune_states(graph: Graph, opts: Options) -> tuple[Breakdown, Breakdown, Breakdown]:
    """``(GPU model states, CPU/paged states, trainable parameters)``: every weight, gradients and
    optimizer states of the trainable parameters only; ZeRO shards them as in full training."""
    trainable = trainable_parameters(graph)
    _, width, k = state_widths(opts.dtype, opts.optimizer, opts.precision)
    n = zero_ranks(opts.cp)  # d, or d x cp under context parallelism
    whole = pipelined_fsdp2(opts.framework, opts.pp, opts.zero)  # weights and fp32 gradients whole (model_states)
    shard = zero_shards(opts.zero, n, whole)
    width = dtype("fp32").nbytes if whole else width
    weights = [Term(t.path, t.expr / shard[0]) for t in _weight_terms(graph, opts)]
    graded = flat_unit_elements(graph) if opts.fsdp_flat_params else trainable.total
    grads = Term("model_states/gradients", graded * width / shard[1])
    factored = second_state_elements(graph, opts.optimizer, lambda blk, op, x: graph.trainable(blk.name, x.name))
    states = Term("model_states/optimizer", (trainable.total * k + factored * factored_state_bytes(
        opts.dtype, opts.precision)) / shard[2])
    on_gpu, off = [*weights, grads, states], []
    if opts.offload:
        on_gpu, off = weights, [grads, states]
    elif OPTIMIZERS[opts.optimizer].paged:
        on_gpu, off = [*weights, grads], [states]
    off = [Term(t.path.replace("model_states/", "offload/"), t.expr) for t in off]
    return Breakdown(tuple(on_gpu), "bytes"), Breakdown(tuple(off), "bytes"), trainable


def dequantized_weight(graph: Graph, opts: Options) -> Breakdown:
    """The largest quantized weight dequantized to 16 bits while its layer computes (bitsandbytes
    dequantizes in forward and again in backward; one at a time)."""
    if (opts.base_dtype or "") not in ("nf4", "int8"):
        return Breakdown((), "bytes")
    sizes = {x.numel for blk, op in graph.ops() for x in op.params if _quantized(blk, op, x, graph, opts.base_dtype)}
    largest = Max(*sizes) if len(sizes) > 1 else next(iter(sizes))
    return Breakdown((Term("transient/dequantized_weight", largest * dtype(opts.dtype).nbytes),), "bytes")


def finetune_notes(opts: Options) -> tuple[str, ...]:
    notes = []
    if opts.lora_rank is not None:
        on = ", ".join((*opts.lora_targets, *opts.lora_target_parameters))
        notes.append(f"{'DoRA' if opts.dora else 'LoRA'} rank {opts.lora_rank} on {on}: "
                     "adapters computed in the activation dtype; base weights frozen (no gradients, no optimizer "
                     "states)")
    if opts.base_dtype == "nf4" and opts.no_double_quant:
        notes.append("NF4 base (bitsandbytes, no double quantization): 4 bits + one fp32 absmax per 64 weights "
                     "(4.5 bits); per-tensor code tables (64 B) neglected; embeddings, LM head, norms and biases "
                     "in 16 bit")
    elif opts.base_dtype == "nf4":
        notes.append("NF4 base (bitsandbytes, double quantization): 4 bits + 8-bit absmax per 64 weights + one fp32 "
                     "per 256 blocks; per-tensor code tables (about 1 KB) neglected; embeddings, LM head, norms "
                     "and biases in 16 bit")
        notes.append("bitsandbytes' 4-bit linears keep their input for backward (MatMul4Bit: ctx.tensors = (A, B)) "
                     "though the weight is frozen: counted in the saved activations" if bitsandbytes_base(opts) else
                     "torchao's NF4 linears (torchtune) save only the weight: a frozen linear keeps no input")
    if opts.base_dtype == "int8":
        notes.append("LLM.int8() base: int8 weights and one fp32 scale per row; embeddings, LM head, norms and "
                     "biases in 16 bit")
    if OPTIMIZERS[opts.optimizer].paged:
        notes.append("paged optimizer: its states live in unified memory and are evicted to the CPU under "
                     "pressure; reported with offloaded_bytes, not on the GPU")
    return tuple(notes)
