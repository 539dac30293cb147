"""Time on a GPU: training step time, throughput and MFU; prefill and decode time from a roofline.

Training, one optimizer step of m micro-batches on t x p x d GPUs (Narayanan et al. 2021):

* compute: the busiest pipeline stage's hardware FLOPs (recompute included) per micro-batch, times
  m, at ``efficiency`` x the GPU's dense peak (``DEFAULT_EFFICIENCY``, cited);
* pipeline bubble: ``(p - 1)/(m v)`` of the compute time (§2.2, interleaved schedule §2.2.2);
* communication that is not hidden, ring collectives at half the intra-node link bandwidth each
  way (NCCL's bus bandwidth: an all-reduce moves ``2(n-1)/n`` of the data, a reduce-scatter or
  all-gather ``(n-1)/n``): tensor parallelism all-reduces each row-parallel layer's output in
  forward and each column-parallel layer's input gradient in backward (sequence parallelism turns
  each into a reduce-scatter plus an all-gather: the same bytes), full recompute repeats the
  forward ones; the pipeline sends each micro-batch's activations and their gradients across a
  stage boundary (``v`` times interleaved); data parallelism reduces the 16-bit gradients once per
  step (reduce-scatter + all-gather, ``2(d-1)/d`` of the GPU's parameters; ZeRO-3 also gathers
  the weights for forward and backward, ``3(d-1)/d``, Rajbhandari et al. 2020 §7).
* ``tokens_per_s = b s m d / step``; ``mfu = model FLOPs per step / (step x GPUs x peak)``
  (Chowdhery et al. 2022, App. B), ``hfu`` the same with hardware FLOPs.

Inference, one GPU of t (roofline, Williams et al. 2009): each phase takes the longer of its
FLOPs at ``efficiency`` x peak and its bytes at the memory bandwidth (weights once, plus the KV
cache), plus its tensor-parallel all-reduces; decode reads every weight and the whole cache per
step.

>>> from memderive.derivations.estimate import estimate
>>> e = estimate("llama-2-7b", mode="train", batch=1, seq=4096, micro_batches=8)
>>> st = step_time(e, "a100-80gb")
>>> round(st.mfu, 3), round(st.tokens_per_s)  # one GPU: compute only, at 50% of peak
(0.5, 3385)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from memderive.derivations.hardware import GPU, gpu as lookup
from memderive.derivations.quantities.compute import whole_model
from memderive.symbolic.derive import evaluate
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph

__all__ = ["StepTime", "InferenceTime", "step_time", "inference_time", "DEFAULT_EFFICIENCY", "EFFICIENCY_SOURCE",
           "time_json", "time_of", "tp_bytes", "implied_mfu", "plan_step_time"]

#: The fraction of dense peak that large-model training sustains: Narayanan et al. 2021 report 52%
#: of peak per GPU end to end (1T parameters on 3,072 A100s, Table 1), 44% to 52% across their runs.
DEFAULT_EFFICIENCY = 0.5
EFFICIENCY_SOURCE = Citation("Narayanan et al. 2021", "arXiv:2104.04473", "Abstract, Table 1: 52% of peak per GPU")
NCCL = Citation("NCCL tests, performance notes", "github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md",
                "bus bandwidth: all-reduce 2(n-1)/n, reduce-scatter and all-gather (n-1)/n")


def _ring(n: int) -> float:
    """Fraction of the data each rank sends in a ring reduce-scatter or all-gather."""
    return (n - 1) / n


def _bytes(expr: Any, values: Mapping[Any, int]) -> int:
    return int(evaluate(expr, values))


def tp_bytes(graph: Graph, values: Mapping[Any, int], recompute_full: bool) -> tuple[int, int]:
    """Bytes one micro-batch all-reduces over the tensor-parallel group in forward and backward,
    read off the whole-model graph: outputs of row-parallel layers and of the vocabulary-parallel
    embedding (partial sums) in forward, inputs of column- and vocabulary-parallel layers (their
    gradients) in backward, each distinct tensor once per repeat of its block."""
    forward = backward = 0
    for blk in graph.blocks:
        inputs: dict[str, Any] = {}
        out: Any = 0
        for op in blk.ops:
            axes = {x.tp_axis for x in op.params if x.role == "weight"}
            if op.kind == "embedding" and 0 in axes:
                out += op.output.nbytes
            elif op.kind == "linear":
                rows, weight = op.flops[0].operands  # the forward product: rows x weight
                width = rows.numel * rows.dtype.nbytes
                if weight.tp_axis == 1:  # row-parallel: partial sums of the output
                    out += width * weight.shape[0]
                elif weight.tp_axis == 0:  # column/vocabulary-parallel: the input's gradient
                    inputs[op.inputs[0] if op.inputs else rows.name] = width * weight.shape[1]
        layer_fwd = _bytes(blk.repeat * out, values) if out else 0
        forward += layer_fwd * (2 if recompute_full and blk.name == "layer" else 1)
        backward += _bytes(blk.repeat * sum(inputs.values()), values) if inputs else 0
    return forward, backward


@dataclass(frozen=True, slots=True)
class StepTime:
    """One optimizer step on ``gpu``: seconds by cause, throughput and utilization."""

    gpu: GPU
    efficiency: float
    compute_s: float
    bubble_s: float
    tp_s: float
    pp_s: float
    dp_s: float
    tokens_per_step: int
    model_flops_per_step: int
    gpus: int

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.tp_s + self.pp_s + self.dp_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        return self.model_flops_per_step / (self.step_s * self.gpus * self.gpu.bf16_flops)

    def model(self) -> tuple[str, ...]:
        """How the time was modelled, one line per cause (for writeups)."""
        return (f"compute: the busiest stage's hardware FLOPs at {self.efficiency:.0%} of {self.gpu.title}'s dense "
                f"16-bit peak ({self.gpu.bf16_flops / 1e12:,.1f} TFLOP/s; efficiency: {EFFICIENCY_SOURCE})",
                "pipeline bubble: (p - 1)/(m v) of the compute time (Narayanan et al. 2021 §2.2)",
                f"communication not hidden, ring collectives at half the {self.gpu.link} bandwidth "
                f"({self.gpu.link_bandwidth / 1e9:,.0f} GB/s both ways) each way ({NCCL}): TP all-reduces per layer, "
                "PP sends per micro-batch, one DP gradient reduction per step",
                f"MFU = model FLOPs per step / (step time x {self.gpus} GPUs x peak) (Chowdhery et al. 2022, App. B)")

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu.name, "efficiency": self.efficiency, "step_time_s": self.step_s,
                "compute_time_s": self.compute_s, "bubble_time_s": self.bubble_s, "tp_comm_time_s": self.tp_s,
                "pp_comm_time_s": self.pp_s, "dp_comm_time_s": self.dp_s, "tokens_per_s": self.tokens_per_s,
                "mfu": self.mfu}


def _stage_flops(est: Any) -> int:
    """Hardware FLOPs per GPU of the busiest pipeline stage: the first (the estimate's graph) or
    the last (layers and the LM head)."""
    from memderive.derivations.quantities.compute import HARDWARE
    from memderive.symbolic.derive import flops
    from memderive.symbolic.strategies import PipelineParallel

    first = est.number("hardware_flops_per_gpu")
    if est.options.pp == 1:
        return first
    base = est.model.graph(activation_dtype=est.options.dtype, dropout=est.options.dropout)
    graph = base
    for strategy in est.options.strategies():
        if isinstance(strategy, PipelineParallel):
            strategy = replace(strategy, stage="last")
        graph = strategy(graph)
    return max(first, int(evaluate(flops(graph, phases=HARDWARE).total, est.values)))


def step_time(est: Any, gpu: GPU | str, efficiency: float = DEFAULT_EFFICIENCY) -> StepTime:
    """Time of one optimizer step of a training estimate (``mode="train"``) on ``gpu``.

    Micro-batches per step: ``options.micro_batches`` (1 when not given). The plan search ranks
    layouts by ``step_time(...).step_s``.
    """
    hw = lookup(gpu) if isinstance(gpu, str) else gpu
    if not 0 < efficiency <= 1:
        raise ValueError(f"--efficiency must be a fraction of peak in (0, 1], got {efficiency!r}")
    opts, values = est.options, est.values
    t, p, d, m, v = opts.tp, opts.pp, opts.dp, opts.micro_batches or 1, opts.virtual_stages or 1
    peak = hw.bf16_flops * efficiency
    compute = m * _stage_flops(est) / peak
    bubble = compute * (p - 1) / (m * v)
    link = hw.link_bandwidth / 2
    base = est.model.graph(activation_dtype=opts.dtype, dropout=opts.dropout)
    tp_s = pp_s = dp_s = 0.0
    if t > 1:
        fwd, bwd = tp_bytes(whole_model(base, opts), values, opts.recompute == "full")
        tp_s = m * 2 * _ring(t) * (fwd + bwd) / p / link
    if p > 1:
        boundary = _bytes(base.block("layer").input.nbytes, values)
        pp_s = m * v * 2 * boundary / link
    if d > 1:
        grads = est.number("parameters_per_gpu") * (2 if opts.dtype in ("bf16", "fp16") else 4)
        dp_s = (3 if opts.zero == 3 else 2) * _ring(d) * grads / link
    tokens = values[_sym("b")] * values[_sym("s")] * m * d
    model_flops = est.number("model_flops") * m * d
    return StepTime(hw, efficiency, compute, bubble, tp_s, pp_s, dp_s, tokens, model_flops, t * p * d)


def _sym(name: str) -> Any:
    from memderive.symbolic.dims import sym

    return sym(name)


@dataclass(frozen=True, slots=True)
class InferenceTime:
    """Prefill and per-step decode time of one GPU (roofline), and decode throughput."""

    gpu: GPU
    efficiency: float
    prefill_s: float
    decode_step_s: float
    batch: int
    new_tokens: int
    prefill_bound: str
    decode_bound: str

    @property
    def tokens_per_s(self) -> float:
        return self.batch / self.decode_step_s

    def model(self) -> tuple[str, ...]:
        return (f"roofline on {self.gpu.title}: the longer of FLOPs at {self.efficiency:.0%} of the dense peak and "
                f"bytes at {self.gpu.memory_bandwidth / 1e9:,.0f} GB/s memory bandwidth, plus TP all-reduces",
                f"prefill: b prompts of s tokens, reads the weights once ({self.prefill_bound}-bound)",
                f"decode step: one token per sequence, reads the weights and the whole KV cache at s + n tokens "
                f"({self.decode_bound}-bound); generation time = prefill + n decode steps (an upper bound)")

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu.name, "efficiency": self.efficiency, "prefill_time_s": self.prefill_s,
                "decode_time_per_token_s": self.decode_step_s, "tokens_per_s": self.tokens_per_s,
                "generate_time_s": self.prefill_s + self.new_tokens * self.decode_step_s}


def inference_time(est: Any, gpu: GPU | str, efficiency: float = DEFAULT_EFFICIENCY) -> InferenceTime:
    """Prefill and decode time of an inference estimate (``mode="infer"``) on ``gpu``."""
    from memderive.derivations.quantities.inference import inference_graph, serving_dtypes

    hw = lookup(gpu) if isinstance(gpu, str) else gpu
    opts, values = est.options, est.values
    peak = hw.peak_flops(serving_dtypes(opts)[0].name) * efficiency
    memory = est.number("weight_bytes") + est.number("kv_cache_bytes")
    batch = values[_sym("b")]
    comm_prefill = comm_decode = 0.0
    if opts.tp > 1:
        whole = inference_graph(est.model, replace(opts, tp=1))
        fwd, _ = tp_bytes(whole, values, False)
        comm_prefill = 2 * _ring(opts.tp) * fwd / (hw.link_bandwidth / 2)
        comm_decode = comm_prefill / values[_sym("s")]
    prefill = (est.number("prefill_flops_per_gpu") / peak, est.number("weight_bytes") / hw.memory_bandwidth)
    decode = (est.number("decode_flops_per_token_per_gpu") * batch / peak, memory / hw.memory_bandwidth)
    return InferenceTime(hw, efficiency, max(prefill) + comm_prefill, max(decode) + comm_decode, batch,
                         opts.new_tokens, "compute" if prefill[0] >= prefill[1] else "memory",
                         "compute" if decode[0] >= decode[1] else "memory")


def time_of(est: Any) -> StepTime | InferenceTime | None:
    """The estimate's time on its ``--gpu`` (None without one, or for parameters only)."""
    if getattr(est.options, "gpu", None) is None or est.options.mode == "params":
        return None
    fn = step_time if est.options.mode == "train" else inference_time
    return fn(est, est.options.gpu, est.options.efficiency or DEFAULT_EFFICIENCY)


def time_json(est: Any) -> dict[str, Any]:
    """The time keys of ``estimate --json`` (none without ``--gpu``)."""
    timing = time_of(est)
    return {} if timing is None else timing.to_json()


def implied_mfu(flops_per_token: int, tokens: int, gpu_hours: float, gpu: GPU | str) -> float:
    """The MFU a published run implies: its model FLOPs over its GPU time at dense peak
    (Chowdhery et al. 2022, App. B)."""
    hw = lookup(gpu) if isinstance(gpu, str) else gpu
    return flops_per_token * tokens / (gpu_hours * 3600 * hw.bf16_flops)


def plan_step_time(model: Any, base: Any, row: dict, global_batch: int, peak_flops: float | None,
                   params: int) -> tuple[int, int, float, float | None, float]:
    """``derivations.search.plan.STEP_TIME`` with this module's model: (hardware FLOPs per GPU per step,
    model FLOPs per step, bubble fraction, step time in seconds or None, MFU).

    The GPU is ``base.gpu`` (its link bandwidth times the communication); without one, a GPU of
    ``peak_flops`` with no communication modelled, or no time at all without ``peak_flops``.
    """
    from memderive.derivations.estimate import estimate
    from memderive.derivations.hardware import GPUS

    est = estimate(model, replace(base, **row))
    m, v, p = row["micro_batches"], row.get("virtual_stages") or 1, row["pp"]
    bubble = (p - 1) / (m * v)
    per_gpu = est.number("hardware_flops_per_gpu") * m
    model_flops = est.number("model_flops") * m * row["dp"]
    gpus = row["tp"] * row["pp"] * row["dp"]
    if base.gpu is None and not peak_flops:
        return per_gpu, model_flops, bubble, None, model_flops / (gpus * per_gpu * (1 + bubble))
    if base.gpu is not None:
        timing = step_time(est, base.gpu, base.efficiency or DEFAULT_EFFICIENCY)
    else:  # a bare peak: compute and bubble only (a link too fast to count)
        bare = replace(GPUS["h100-sxm"], name="given", title=f"a {peak_flops / 1e12:g} TFLOP/s GPU",
                       bf16_flops=int(peak_flops), link_bandwidth=10**30)
        timing = step_time(est, bare, base.efficiency or DEFAULT_EFFICIENCY)
    return per_gpu, model_flops, bubble, timing.step_s, timing.mfu
