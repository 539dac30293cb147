"""Fine-tuning: frozen weights, LoRA/DoRA adapters named as PEFT names them, quantized bases.

Module names follow transformers' modeling code per family (PEFT matches ``target_modules`` by
the last component of a module's name): ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``,
``gate_proj``, ``up_proj``, ``down_proj`` for LLaMA-style families, GPT-2's ``c_attn``, ``c_proj``
(attention output and MLP output) and ``c_fc``, and so on. ``all-linear`` is PEFT's shorthand:
every linear layer except the output layer. Where the graph computes q, k and v as one fused
op but the family has separate modules, the op is split first (``SplitFused``).

>>> from memderive.derivations.models.presets import preset
>>> [a.name for a in resolve_adapters(preset("gpt2"), ("all-linear",))[1]]
['c_attn', 'c_proj', 'c_fc', 'c_proj']
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, OptionsError
from memderive.derivations.quantities.model_states import (OPTIMIZERS, factored_state_bytes, factored_state_elements,
                                                           state_widths, zero_ranks)
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.dims import a, a_kv, d_h, r
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.expr import Max, ceiling, const, total
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.strategies import Freeze, KeepFrozenInputs, Strategy
from memderive.symbolic.tensor import Tensor

if TYPE_CHECKING:  # PEFT's module table and the adapters are imported for --lora-rank / --train-only only
    from memderive.derivations.quantities.peft_modules import PeftChoice
    from memderive.symbolic.lora import Adapter

__all__ = ["PEFT_NAMES", "resolve_adapters", "module_paths", "train_only", "ALL_LINEAR", "finetune_steps",
           "finetune_states", "trainable_parameters", "dequantized_weight", "finetune_notes", "nf4_bits", "quantized_bytes",
           "QLORA_CITATION", "INT8_CITATION", "LORA_CITATION", "flat_unit_elements", "bitsandbytes_base"]

ALL_LINEAR = "all-linear"
_QKV = "layer/attn/qkv"
_LLAMA = {"q_proj": ("layer/attn/q",), "k_proj": ("layer/attn/k",), "v_proj": ("layer/attn/v",),
          "o_proj": ("layer/attn/proj",), "gate_proj": ("layer/mlp/gate",), "up_proj": ("layer/mlp/up",),
          "down_proj": ("layer/mlp/fc2",)}
_NEOX = {"query_key_value": (_QKV,), "dense": ("layer/attn/proj",), "dense_h_to_4h": ("layer/mlp/fc1",),
         "dense_4h_to_h": ("layer/mlp/fc2",)}
_QKV_SEPARATE = {"q_proj": ("layer/attn/q",), "k_proj": ("layer/attn/k",), "v_proj": ("layer/attn/v",)}

#: Per family: PEFT module name -> the graph's linear ops it names, as ``block/op``; a name that
#: several modules share (GPT-2's ``c_proj``) lists groups separated by ``|``; a fused module
#: (Phi-3's ``gate_up_proj``) lists several ops in one group.
PEFT_NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    **{fam: _LLAMA for fam in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2",
                               "granite", "cohere", "stablelm")},
    "phi3": {"qkv_proj": (_QKV,), "o_proj": ("layer/attn/proj",), "gate_up_proj": ("layer/mlp/gate+layer/mlp/up",),
             "down_proj": ("layer/mlp/fc2",)},
    "gpt": {"c_attn": (_QKV,), "c_proj": ("layer/attn/proj", "layer/mlp/fc2"), "c_fc": ("layer/mlp/fc1",)},
    "gpt_bigcode": {"c_attn": (_QKV,), "c_proj": ("layer/attn/proj", "layer/mlp/fc2"), "c_fc": ("layer/mlp/fc1",)},
    "gpt_neox": _NEOX, "falcon": _NEOX, "bloom": _NEOX,
    "gptj": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "fc_in": ("layer/mlp/fc1",),
             "fc_out": ("layer/mlp/fc2",)},
    "codegen": {"qkv_proj": (_QKV,), "out_proj": ("layer/attn/proj",), "fc_in": ("layer/mlp/fc1",),
                "fc_out": ("layer/mlp/fc2",)},
    "opt": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "fc1": ("layer/mlp/fc1",), "fc2": ("layer/mlp/fc2",)},
    "phi": {**_QKV_SEPARATE, "dense": ("layer/attn/proj",), "fc1": ("layer/mlp/fc1",), "fc2": ("layer/mlp/fc2",)},
    "starcoder2": {**_QKV_SEPARATE, "o_proj": ("layer/attn/proj",), "c_fc": ("layer/mlp/fc1",),
                   "c_proj": ("layer/mlp/fc2",)},
    "gpt_neo": {**_QKV_SEPARATE, "out_proj": ("layer/attn/proj",), "c_fc": ("layer/mlp/fc1",),
                "c_proj": ("layer/mlp/fc2",)},
    "mpt": {"Wqkv": (_QKV,), "out_proj": ("layer/attn/proj",), "up_proj": ("layer/mlp/fc1",),
            "down_proj": ("layer/mlp/fc2",)},
    "bert": {"query": ("layer/attn/q",), "key": ("layer/attn/k",), "value": ("layer/attn/v",),
             "dense": ("layer/attn/proj", "layer/mlp/fc1", "layer/mlp/fc2", "head/pooler")},
}
#: Names ``--train-only`` accepts besides module names.
EXTRA_MODULES = {"embeddings": ("embed/",), "lm_head": ("head/lm_head.",), "norms": ()}


def _names(model: Model) -> dict[str, tuple[str, ...]]:
    if model.arch.family not in PEFT_NAMES:
        raise OptionsError(f"{model.name}: module names of family {model.arch.family!r} are not known; "
                           f"fine-tuning options support {', '.join(sorted(PEFT_NAMES))}")
    return PEFT_NAMES[model.arch.family]


def _ops_of(model: Model) -> set[str]:
    graph = model.graph(dropout=False)
    return {f"{blk.name}/{op.path}" for blk, op in graph.ops() if op.kind == "linear" and op.params}


def module_paths(model: Model, names: Sequence[str]) -> tuple[list[Strategy], list[tuple[str, tuple[str, ...]]]]:
    """The splits the graph needs and, per requested module, its op groups (``block/op`` paths).

    Raises:
        OptionsError: a name the family does not have, or whose op this model lacks.
    """
    from memderive.symbolic.lora import SplitFused

    table = _names(model)
    if ALL_LINEAR in names:
        names = list(dict.fromkeys([*(n for n in names if n != ALL_LINEAR), *table]))
    present = _ops_of(model)
    splits: list[Strategy] = []
    if _QKV in present and any(p in ("layer/attn/q", "layer/attn/k", "layer/attn/v")
                               for n in names for p in table.get(n, ())):
        parts = (("attn/q", a * d_h), ("attn/k", a_kv * d_h), ("attn/v", a_kv * d_h))
        splits.append(SplitFused("attn/qkv", parts))
        present |= {"layer/attn/q", "layer/attn/k", "layer/attn/v"}
    groups: list[tuple[str, tuple[str, ...]]] = []
    for name in names:
        if name not in table:
            raise OptionsError(f"{model.name} has no module named {name!r}; its linear modules are "
                               f"{', '.join(table)} (or {ALL_LINEAR})")
        for group in table[name]:
            paths = tuple(group.split("+"))
            if all(p in present for p in paths):
                groups.append((name, paths))
            elif ALL_LINEAR not in names and not any(p in present for p in paths):
                raise OptionsError(f"{model.name} has no {name} module in this architecture; its linear modules "
                                   f"are {', '.join(n for n, gs in table.items() if _has(gs, present))}")
    return splits, groups


def _has(groups: tuple[str, ...], present: set[str]) -> bool:
    return any(all(p in present for p in g.split("+")) for g in groups)


def resolve_adapters(model: Model, targets: Sequence[str]) -> tuple[list[Strategy], list[Adapter]]:
    """``SplitFused`` steps and one ``Adapter`` per wrapped module, for PEFT ``target_modules``."""
    from memderive.derivations.quantities.peft_modules import peft_choose

    return _module_steps(model, peft_choose(model, targets))


def _module_steps(model: Model, choice: PeftChoice) -> tuple[list[Strategy], list[Adapter]]:
    from memderive.symbolic.lora import Adapter, SplitFused

    ops = {f"{blk.name}/{op.path}" for blk, op in model.graph(dropout=False).ops()}
    splits: list[Strategy] = []
    used = [p for m in (*choice.modules, *(m for m, _, _ in choice.params)) for p in m.ops]
    if _QKV in ops and any(p in ("layer/attn/q", "layer/attn/k", "layer/attn/v") for p in used):
        splits.append(SplitFused("attn/qkv", (("attn/q", a * d_h), ("attn/k", a_kv * d_h), ("attn/v", a_kv * d_h))))
    adapters = [Adapter(m.name.rsplit(".", 1)[-1], tuple(p.split("/", 1)[1] for p in m.ops), m.ops[0].split("/")[0],
                        m.kind) for m in choice.modules]
    return splits, adapters


def lora_steps(model: Model, opts: Options) -> list[Strategy]:
    """PEFT's adapters for ``--lora-targets`` and ``--lora-target-parameters``: ``lora.Linear`` and
    ``lora.Embedding`` modules (``LoRA``), ``ParamWrapper`` parameters (``ParamLoRA``)."""
    from memderive.derivations.quantities.peft_modules import peft_choose
    from memderive.symbolic.lora import LoRA, ParamLoRA

    choice = peft_choose(model, opts.lora_targets, opts.lora_target_parameters)
    if choice.params and (opts.lora_dropout or opts.dora):
        raise OptionsError("PEFT's ParamWrapper (target parameters, MoE experts and routers) works with neither "
                           "--lora-dropout nor --dora (lora.ParamWrapper raises)")
    if opts.dora and any(m.kind == "embedding" for m in choice.modules):
        raise OptionsError("--dora on an embedding (lora.Embedding with DoRA) is not modelled; adapt linear modules")
    splits, adapters = _module_steps(model, choice)
    steps: list[Strategy] = [*splits]
    if adapters:
        steps.append(LoRA(r, tuple(adapters), dropout=opts.lora_dropout > 0, dora=opts.dora))
    if choice.params:
        targets = []
        for module, param, multiple in choice.params:
            block, name = param.split("/", 1)
            op = next(p for p in module.ops if name.startswith(p.split("/", 1)[1] + "."))
            targets.append((block, op.split("/", 1)[1], name, multiple))
        steps.append(ParamLoRA(r, tuple(targets)))
    return steps


def train_only(model: Model, names: Sequence[str]) -> list[Strategy]:
    """Freeze everything but the named modules (module names, ``embeddings``, ``lm_head``, ``norms``)."""
    modules = [n for n in names if n not in EXTRA_MODULES]
    splits, groups = module_paths(model, modules) if modules else ([], [])
    keep = [p + "." for _, paths in groups for p in paths]
    for name in names:
        keep += EXTRA_MODULES.get(name, ())
    norms = ("layer_norm", "rms_norm") if "norms" in names else ()
    return [*splits, Freeze(("",), tuple(keep), norms)]


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
    shard = {0: (1, 1, 1), 1: (1, 1, n), 2: (1, n, n), 3: (n, n, n)}[opts.zero]
    weights = [Term(t.path, t.expr / shard[0]) for t in _weight_terms(graph, opts)]
    graded = flat_unit_elements(graph) if opts.fsdp_flat_params else trainable.total
    grads = Term("model_states/gradients", graded * width / shard[1])
    factored = (factored_state_elements(graph, lambda blk, op, x: graph.trainable(blk.name, x.name))
                if OPTIMIZERS[opts.optimizer].factored else 0)
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
