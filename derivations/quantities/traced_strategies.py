"""Recompute, LoRA, data and tensor parallelism and FLOPs of a traced model, each through the switch people run.

A traced model (``derivations.quantities.traced``) is transformers' own model on fake tensors; the options here
change that model the way a training script does, then the saved tensors, parameters and FLOPs are measured as
before:

* ``--recompute full``: ``model.activation_checkpointing_enable()`` (transformers' checkpointing of each decoder
  layer, ``torch.utils.checkpoint`` non-reentrant: a layer keeps its inputs, the rest is recomputed in backward);
* ``--lora-rank r --lora-targets ...`` (``--lora-target-parameters``, ``--lora-dropout``, ``--dora``):
  ``peft.get_peft_model(model, LoraConfig(r, target_modules, target_parameters, lora_dropout, use_dora, task_type))`` with PEFT's defaults, so the
  adapters of a 16-bit model are fp32 (``autocast_adapter_dtype=True``) and the base is frozen; trainable
  parameters are the ones left with ``requires_grad`` (PEFT's ``get_nb_trainable_parameters``);
* ``--dp``, ``--zero 1-3``: model states sharded as the hand-written path shards them
  (``model_states.states_breakdown``); frozen base weights are sharded under ZeRO-3 only;
* ``--tp``: each rank's parameters under the model's own ``tp_plan`` (transformers'
  ``distributed/tensor_parallel.py``: ``colwise`` styles shard a weight's output dim and its bias, ``rowwise`` its
  input dim with the bias replicated, ``embedding_rowwise`` the vocabulary; DTensor's ``Shard`` gives rank 0
  ``ceil(n / t)`` rows), everything the plan does not name replicated; the weights and model states follow from
  them. Saved activations and the cache under ``--tp``: the model sharded by transformers' own
  ``maybe_distribute_model`` in a ``fake_group`` (torch's fake process group: this process rank 0 of t, collectives
  no-ops), its training forward and its prefill and decode step traced as rank 0 runs them;
* FLOPs: ``torch.utils.flop_counter.FlopCounterMode`` over the fake forward (and backward), with torch's own SDPA
  formulas for the CPU flash kernel (``sdpa_flop_count``, ``sdpa_backward_flop_count``) that its registry names only
  for the CUDA kernels.

torch, transformers and PEFT load on first use (``symbolic.lazy``): importing this module imports none of them.
"""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from memderive.derivations.models.config_fields import ConfigError
from memderive.derivations.quantities.model_states import states_breakdown
from memderive.symbolic.dims import Psi, d
from memderive.symbolic.dtypes import dtype as dtype_of
from memderive.symbolic.lazy import lazy

torch = lazy("torch")
flop_counter = lazy("torch.utils.flop_counter")
dtensor = lazy("torch.distributed.tensor")
peft = lazy("peft")
fake_pg = lazy("torch.testing._internal.distributed.fake_pg")
hf_distributed = lazy("transformers.distributed")

__all__ = ["STRATEGY_OPTIONS", "APPLIES", "NOT_YET", "StrategyError", "check", "prepare", "lora_config", "adapter_dtype",
           "trainable_parameters", "state_rows", "tp_rank_parameters", "count_flops", "Strategies"]

#: Options a traced model answers besides ``traced.TRACED_OPTIONS``.
STRATEGY_OPTIONS = ("dp", "zero", "recompute", "tp", "lora_rank", "lora_targets", "lora_target_parameters",
                    "lora_dropout", "dora", "freeze_embeddings", "train_only")

#: What applies to a traced model, and what does not yet, in the words of the refusal.
APPLIES = ("--dp, --zero 1-3, --recompute full, --lora-rank with --lora-targets or --lora-target-parameters (--lora-dropout, --dora), --freeze-embeddings, --train-only, and --tp "
           "(rank 0's parameters, model states, saved activations, weights and cache)")
NOT_YET = ("--pp, --cp, --sp, --ep, selective recompute, offload, quantized or other-dtype bases, "
           "FLOPs per GPU under --tp, --tp with LoRA, times")


class StrategyError(ConfigError):
    """An option a traced model cannot take, said in one line."""


def check(name: str, options: Any) -> None:
    """Refuse, in one line, a strategy option's value a traced model cannot take (``APPLIES``)."""
    if options.recompute not in ("none", "full"):
        raise StrategyError(f"{name}: --recompute {options.recompute} is not traced: transformers' own switch "
                            "(activation_checkpointing_enable) recomputes whole decoder layers; give --recompute full")
    if options.tp > 1 and options.lora_rank is not None:
        raise StrategyError(f"{name}: --tp with --lora-rank is not traced yet; give one of them")
    if options.lora_rank is not None and not options.lora_targets and not options.lora_target_parameters:
        raise StrategyError(f"{name}: --lora-rank needs --lora-targets (module names as PEFT matches them, or "
                            "all-linear) or --lora-target-parameters")


def lora_config(options: Any, task: str | None = "CAUSAL_LM") -> Any:
    """PEFT's ``LoraConfig`` of the options, its ``task_type`` ``task`` (``prepare``: as a fine-tuning script gives
    it). ``lora_alpha`` scales the adapters' output only: no byte depends on it."""
    targets = options.lora_targets
    return peft.LoraConfig(r=options.lora_rank, lora_alpha=2 * options.lora_rank,
                           target_modules="all-linear" if "all-linear" in targets else list(targets),
                           target_parameters=list(options.lora_target_parameters) or None,
                           lora_dropout=options.lora_dropout, use_dora=options.dora,
                           task_type=task)


def prepare(options: Any, recompute: bool = True, tp: bool = True) -> Callable[[Any], Any] | None:
    """What loading and a training script do to the model after building it, as ``traced.build``'s ``prepare``:
    tensor parallelism (``tp``: as the options say, else none; ``distribute``, in an open ``fake_group``), activation
    checkpointing (``recompute``: as the options say, else off), then PEFT's LoRA; None when none applies."""
    checkpoint = recompute and options.recompute == "full"
    shard = tp and options.tp > 1
    freeze = options.freeze_embeddings or bool(options.train_only)
    if not checkpoint and not shard and not freeze and options.lora_rank is None:
        return None

    def apply(model: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # transformers' deprecation notes PEFT triggers are not the user's
            return _apply(model)

    def _apply(model: Any) -> Any:
        if shard:
            model = distribute(model, options.tp)
        if checkpoint:
            if not model.supports_gradient_checkpointing:
                raise StrategyError(f"{model.config.model_type}: transformers' {type(model).__name__} does not support "
                                    "activation checkpointing; leave out --recompute")
            model.activation_checkpointing_enable()
        if freeze:
            _freeze(model, options)
        if options.lora_rank is not None:
            try:
                model = peft.get_peft_model(model, lora_config(options, _task(model)))
            except (ValueError, TypeError) as exc:  # a target PEFT finds nowhere, or a module it cannot adapt
                asked = ",".join((*options.lora_targets, *options.lora_target_parameters))
                raise StrategyError(f"{model.config.model_type}: PEFT cannot adapt {asked}: "
                                    f"{' '.join(str(exc).split())[:300]}") from None
        return model

    return apply


def adapter_dtype(model: Any, options: Any) -> str | None:
    """The dtype name of ``model``'s trainable parameters where it differs from the options' (PEFT's fp32 adapters
    on a 16-bit model), else None."""
    names = {str(p.dtype).removeprefix("torch.") for p in model.parameters() if p.requires_grad}
    name = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(next(iter(names))) if len(names) == 1 else None
    return None if name in (None, options.dtype) else name


def _freeze(model: Any, options: Any) -> None:
    """``requires_grad_(False)`` as a script freezes a model: ``--freeze-embeddings`` the input embeddings
    (``get_input_embeddings``); ``--train-only`` every parameter but those of the modules named (the last component
    of a module's name, as PEFT matches ``target_modules``), ``embeddings`` (``get_input_embeddings``), ``lm_head``
    (``get_output_embeddings``) and ``norms`` (modules whose class name ends in ``Norm``)."""
    if options.train_only:
        names = set(options.train_only)
        keep: list[Any] = []
        for path, module in model.named_modules():
            if path.rpartition(".")[2] in names or ("norms" in names and type(module).__name__.endswith("Norm")):
                keep.append(module)
        for name, getter in (("embeddings", model.get_input_embeddings), ("lm_head", model.get_output_embeddings)):
            if name in names and getter() is not None:
                keep.append(getter())
        if not keep:
            raise StrategyError(f"{model.config.model_type}: --train-only {','.join(options.train_only)} names no "
                                f"module of {type(model).__name__}")
        model.requires_grad_(False)
        for module in keep:
            module.requires_grad_(True)
    if options.freeze_embeddings:
        model.get_input_embeddings().requires_grad_(False)


def _task(model: Any) -> str | None:
    """PEFT's ``task_type`` for ``model``: SEQ_2_SEQ_LM for a whole text encoder-decoder (T5, BART), none for a speech
    one (Whisper: its encoder reads ``input_features``, which PEFT's seq2seq forward does not pass; the Whisper LoRA
    recipes give no task type), else CAUSAL_LM (a vision-language model's too)."""
    if getattr(model.config, "is_encoder_decoder", False) and callable(getattr(model, "get_encoder", None)):
        return "SEQ_2_SEQ_LM" if model.main_input_name == "input_ids" else None
    return "CAUSAL_LM"


def trainable_parameters(model: Any) -> tuple[int, int]:
    """``(trainable, all)`` parameters of ``model``, each once (a tied weight once), as PEFT's
    ``get_nb_trainable_parameters`` counts a model without quantized weights."""
    params = [local(p) for p in model.parameters()]  # a tensor-parallel rank's: its shards
    return sum(p.numel() for p in params if p.requires_grad), sum(p.numel() for p in params)


def _exact(value: Any) -> int:
    """Rank 0's share of a sharded count: a whole number, rounded up where the ranks do not divide it."""
    return math.ceil(value)


def state_rows(total: int, trainable: int, options: Any, adapter_dtype: str | None = None
               ) -> tuple[tuple[str, int], ...]:
    """Model states of one data-parallel rank: ``states_breakdown`` of the ``trainable`` parameters (in
    ``adapter_dtype`` where PEFT keeps the adapters in another dtype than the model) over ``--dp`` ranks under
    ``--zero``, and the frozen rest (``total - trainable``) in the model's dtype, sharded under ZeRO-3 only."""
    width = options.dtype if adapter_dtype is None else adapter_dtype
    precision = options.precision if adapter_dtype is None else "master"
    states = states_breakdown(Psi, width, options.optimizer, options.zero, d, precision=precision,
                              grad_buffer=options.grad_buffer)
    rows = [(t.path.removeprefix("model_states/"), _exact(t.expr.evaluate({Psi: trainable, d: options.dp})))
            for t in states.terms]
    frozen = total - trainable
    if frozen:
        base = "fp32" if options.precision == "autocast" else options.dtype
        shards = options.dp if options.zero == 3 else 1
        rows.insert(0, ("frozen_weights", _exact(frozen * dtype_of(base).nbytes / shards)))
    return tuple(rows)


#: Styles of transformers' ``ALL_PARALLEL_STYLES`` (distributed/tensor_parallel.py) by how a parameter is placed:
#: the dim each shards a weight on (a bias: ``colwise`` sharded on its only dim, ``rowwise`` replicated); styles
#: that leave parameters whole.
_COLWISE = ("colwise", "colwise_gather_output", "colwise_rep", "packed_colwise")
_ROWWISE = ("rowwise", "rowwise_rep", "rowwise_split_input", "packed_rowwise")
_WHOLE = ("replicate", "sequence_parallel", "replicated_with_grad_allreduce", "all_reduce")


def _shard_dim(style: str, param: str, ndim: int) -> int | None:
    """The dim ``style`` shards ``param`` (a parameter of ``ndim`` dims) on, None: replicated."""
    if style in _COLWISE:
        return ndim - 2 if ndim >= 2 else 0  # ColwiseParallel.shard_param: Shard(meta.ndim - 2), a bias its dim
    if style in _ROWWISE:
        return None if param == "bias" else ndim - 1  # RowwiseParallel: bias Replicate, weight Shard(-1)
    if style == "embedding_rowwise":
        return 0
    if style == "embedding_colwise":
        return 1
    if style in _WHOLE:
        return None
    raise StrategyError(f"tp_plan style {style!r} is not traced yet (traced: {', '.join(_COLWISE + _ROWWISE)}, "
                        "embedding_rowwise, embedding_colwise and the replicated ones); leave out --tp")


def tp_rank_parameters(model: Any, t: int) -> tuple[int, tuple[tuple[str, str, int], ...]]:
    """Rank 0's parameters under ``t``-way tensor parallelism with ``model.tp_plan`` (its keys module or parameter
    names, ``*`` a layer index): a parameter a style shards keeps ``ceil(n / t)`` of its ``n`` slices on that dim
    (DTensor's ``Shard``, as ``torch.chunk``); ``rows``: (plan key, style, rank 0's elements of what it names)."""
    plan = dict(getattr(model, "tp_plan", None) or {})
    if not plan:
        raise StrategyError(f"{model.config.model_type}: transformers' {type(model).__name__} has no tp_plan; "
                            "--tp cannot be traced for it")
    patterns = [(re.compile(re.escape(key).replace(r"\*", r"\d+")), key, style) for key, style in plan.items()]
    seen: set[int] = set()
    total = 0
    per_key: dict[str, int] = {}
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        module, _, leaf = name.rpartition(".")
        match = next(((key, style) for rx, key, style in patterns if rx.fullmatch(module) or rx.fullmatch(name)),
                     None)
        n = p.numel()
        if match is not None:
            dim = _shard_dim(match[1], leaf, p.dim())
            if dim is not None:
                n = n // p.shape[dim] * math.ceil(p.shape[dim] / t)
            per_key[match[0]] = per_key.get(match[0], 0) + n
        total += n
    return total, tuple((key, plan[key], n) for key, n in per_key.items())


def local(t: Any) -> Any:
    """The tensor a rank holds: a DTensor's local shard (tensor parallelism), any other tensor itself."""
    return t.to_local() if isinstance(t, dtensor.DTensor) else t


def sharded(t: Any, convert: Callable[[Any], Any]) -> Any:
    """``convert(t)``; a DTensor's local shard converted and wrapped again with its mesh, placements and global
    shape (``traced._to_fake``: a tensor-parallel model's parameters made fake)."""
    if not isinstance(t, dtensor.DTensor):
        return convert(t)
    return dtensor.DTensor.from_local(convert(t.to_local()), t.device_mesh, t.placements,
                                                       run_check=False, shape=t.shape, stride=t.stride())


@contextlib.contextmanager
def fake_group(t: int) -> Iterator[None]:
    """A process group of ``t`` ranks that exchanges nothing (torch's ``fake`` backend, ``FakeStore``), this process
    rank 0, for the duration: transformers' tensor parallelism shards the model and its forward runs as rank 0's
    does, every collective a no-op that gives tensors of the right shapes (values do not matter on fake tensors).
    Nothing happens for ``t`` 1."""
    if t == 1:
        yield
        return
    dist = torch.distributed
    if dist.is_initialized():
        raise StrategyError("--tp traces in a fake process group; this process already has one")
    dist.init_process_group("fake", rank=0, world_size=t, store=fake_pg.FakeStore())
    try:
        yield
    finally:
        dist.destroy_process_group()


def distribute(model: Any, t: int) -> Any:
    """``model`` (built on the meta device) sharded over ``t`` ranks by its own tp_plan, as ``from_pretrained(...,
    distributed_config=DistributedConfig(tp_size=t))`` does after building it (``prepare_distribute_model``,
    ``maybe_distribute_model``), in the ``fake_group`` that must be open."""
    if not getattr(model, "tp_plan", None):
        raise StrategyError(f"{model.config.model_type}: transformers' {type(model).__name__} has no tp_plan; "
                            "--tp cannot be traced for it")
    config, _, meshes = type(model).prepare_distribute_model(hf_distributed.DistributedConfig(tp_size=t), None)
    try:
        return type(model).maybe_distribute_model(model, config, meshes)
    except (ValueError, NotImplementedError, RuntimeError) as exc:
        raise StrategyError(f"{model.config.model_type}: transformers cannot shard it over {t} ranks: "
                            f"{' '.join(str(exc).split())[:300]}") from None


def _flop_mapping() -> dict[Any, Any]:
    """torch's SDPA formulas for the CPU flash kernel (``flop_counter`` registers them for CUDA's kernels only)."""
    aten = torch.ops.aten
    return {aten._scaled_dot_product_flash_attention_for_cpu:
            lambda q, k, v, *_, out_shape=None, **__: flop_counter.sdpa_flop_count(q, k, v),
            aten._scaled_dot_product_flash_attention_for_cpu_backward:
            lambda g, q, k, v, *_, out_shape=None, **__: flop_counter.sdpa_backward_flop_count(g, q, k, v)}


def count_flops(forward: Callable[[], Any], backward: bool) -> tuple[int, int]:
    """``(forward, backward)`` FLOPs that ``FlopCounterMode`` counts while ``forward()`` runs (it returns the loss)
    and, with ``backward``, while the loss's backward runs (0 without)."""
    with flop_counter.FlopCounterMode(display=False, custom_mapping=_flop_mapping()) as counter:
        loss = forward()
    ahead = counter.get_total_flops()
    if not backward:
        return ahead, 0
    with flop_counter.FlopCounterMode(display=False, custom_mapping=_flop_mapping()) as counter:
        loss.backward()
    return ahead, counter.get_total_flops()


@dataclass(frozen=True)
class Strategies:
    """What the options changed on a traced model: ``recompute`` (full or none), LoRA (``lora``: PEFT's config in
    words, ``with_adapters`` parameters), ``frozen`` (``--train-only``/``--freeze-embeddings`` in words),
    ``trainable`` parameters (LoRA or frozen), ``dp``/``zero``, ``tp`` with rank 0's parameters and the
    plan's rows, and ``flops``: (key, label, value, formula or None) rows in the hand-written path's words."""

    recompute: str = "none"
    lora: str | None = None
    trainable: int | None = None
    with_adapters: int | None = None
    dp: int = 1
    zero: int = 0
    tp: int = 1
    tp_parameters: int | None = None
    tp_rows: tuple[tuple[str, str, int], ...] = ()
    flops: tuple[tuple[str, str, int, str | None], ...] = ()
    frozen: str | None = None
    flops_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.recompute != "none":
            out["recompute"] = self.recompute
        if self.lora is not None:
            out.update(lora=self.lora, parameters_with_adapters=self.with_adapters)
        if self.frozen is not None:
            out["frozen"] = self.frozen
        if self.trainable is not None:
            out["trainable_parameters"] = self.trainable
        if self.dp > 1 or self.zero:
            out.update(dp=self.dp, zero=self.zero)
        if self.tp > 1:
            out.update(tp=self.tp, parameters_per_rank=self.tp_parameters,
                       tp_plan=[dict(key=k, style=s, rank_elements=n) for k, s, n in self.tp_rows])
        if self.flops_error is not None:
            out["flops_error"] = self.flops_error
        for key, _, value, formula in self.flops:
            out[key] = value
            out[f"{key}_formula"] = formula
        return out
