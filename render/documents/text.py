"""Plain-text report of an estimate: a summary, then each quantity's closed form, value and breakdown."""

from __future__ import annotations

from memderive.derivations.estimate import Estimate
from memderive.derivations.option_table import OPTIONS, Option
from memderive.derivations.options import Options
from memderive.derivations.quantity import Quantity
from memderive.derivations.references import cite
from memderive.symbolic.formula import Citation
from memderive.documents.units import format_bytes, format_count, scaled_bytes

__all__ = ["estimate_text", "inputs_text", "strategies_text", "summary_report", "citation_lines", "plain"]

#: SymPy's function names in printed formulas, and the words a reader expects.
_WORDS = (("**", "^"), ("Max(", "max("), ("Min(", "min("), ("ceiling(", "ceil("), ("floor(", "floor("))


def plain(expr: object) -> str:
    """A formula as a reader writes it: ``h^2``, ``max(..)``, ``ceil(..)`` (not ``h**2``, ``Max``).

    >>> from memderive.symbolic.dims_sympy import h, l
    >>> import sympy
    >>> plain(l * h**2 + sympy.Max(h, l))
    'h^2*l + max(h, l)'
    """
    text = str(expr)
    for old, new in _WORDS:
        text = text.replace(old, new)
    return text


def citation_lines(citation: Citation) -> list[str]:
    """One line per work a citation rests on: label, place, locus.

    >>> from memderive.symbolic.formula import Citation
    >>> citation_lines(Citation("shazeer-2019", "one K/V head", also=(Citation("ainslie-2023", "G K/V heads"),)))
    ['Shazeer 2019 (MQA), arXiv:1911.02150, one K/V head', 'Ainslie et al. 2023 (GQA), arXiv:2305.13245, G K/V heads']
    """
    return [cite(part) for part in citation.parts()]


def _amount(value: int, unit: str, precision: int = 2) -> str:
    if unit == "FLOPs":
        return f"{format_count(value, precision)} FLOPs"
    return format_bytes(value, precision) if unit == "bytes" else format_count(value, precision)


def time_lines(est: Estimate) -> list[str]:
    """Times on ``--gpu`` with the model each follows (none without ``--gpu``)."""
    # lazy: the time model and the runtime, imported with a --gpu only (~15% of a cold estimate)
    from memderive.derivations.quantities.device import runtime, time_json, time_of, vllm_refusal

    timing = time_of(est)
    if timing is None:
        return []
    values = time_json(est)
    lines = ["", f"time on {timing.gpu.title}, matmuls at {timing.efficiency:.1%} of dense peak:"]
    refusal = None if values["fits_gpu"] else vllm_refusal(est)
    if refusal is not None:
        lines.append(f"  does not fit: vLLM refuses to start ({refusal}); the times are for a GPU that would hold it")
    elif not values["fits_gpu"]:
        device = runtime(est).device_bytes  # type: ignore[union-attr]
        lines.append(f"  does not fit: {format_bytes(device)} of device memory per GPU is more than the "
                     f"{format_bytes(timing.gpu.memory_bytes)} of one {timing.gpu.title}; the times are for a GPU "
                     "that would hold it")
    lines += [f"  {key:<24} {_seconds(key, value)}" for key, value in values.items()
              if key not in ("gpu", "efficiency", "fits_gpu") and value != 0]  # a 0 (no decode, no bubble) says nothing
    return lines + [f"  model: {line}" for line in timing.model()]


def runtime_lines(est: Estimate) -> list[str]:
    """Allocated, reserved and device memory on ``--gpu`` with the terms and assumptions of each (none
    without ``--gpu``); under ``--framework vllm`` also the KV blocks and concurrency vLLM would print."""
    # lazy: as in time_lines
    from memderive.derivations.quantities.device import runtime, vllm_startup

    r = runtime(est)
    if r is None:
        return []
    lines = ["", f"on {r.gpu}: allocated {format_bytes(r.allocated_bytes)} (torch.cuda.max_memory_allocated), "
                 f"reserved {format_bytes(r.reserved_bytes)} (max_memory_reserved), device "
                 f"{format_bytes(r.device_bytes)} (nvidia-smi)"]
    lines += [f"  {t.path:<28} {format_bytes(t.bytes):>12}  ({t.counted_in}) {t.source}" for t in r.terms]
    lines += [f"  assumes: {x}" for x in r.assumptions]
    v = vllm_startup(est)
    if v is not None and v.refusal is not None:
        lines += [f"  vLLM refuses to start: {v.refusal}"]
    elif v is not None:
        lines += [f"  vLLM: # GPU blocks {v.kv_cache_blocks:,}, GPU KV cache size {v.kv_cache_tokens:,} tokens, "
                  f"maximum concurrency for {v.max_model_len:,} tokens per request {v.max_concurrent_sequences:.2f}x"]
    return lines


def _seconds(key: str, value: float) -> str:
    if key == "mfu":
        return f"{value:.1%}"
    return f"{value:,.0f}" if key.endswith("tokens_per_s") else f"{value:.4g} s"


def _grouped_rows(q: Quantity, est: Estimate, depth: int) -> list[tuple[str, int]]:
    """The breakdown rows (whole units, as in the total) summed by the first ``depth`` path parts."""
    rows: dict[str, int] = {}
    for path, value in q.term_ints(est.values):
        key = "/".join(path.split("/")[:depth])
        rows[key] = rows.get(key, 0) + value
    return list(rows.items())


def _header(est: Estimate) -> list[str]:
    m = est.model
    lines = [f"model: {m.name} ({m.arch.family}; {m.source or 'given'})",
             "sizes: " + ", ".join(f"{k}={v}" for k, v in m.sizes.items())]
    if m.window is not None:
        layers = "every layer" if m.window_layers is None else f"l_w={m.window_layers} of l={m.sizes['l']} layers"
        lines.append(f"sliding window: w={m.window} tokens in {layers}")
    lines += [f"note: {note}" for note in m.notes]
    if est.options.mode == "train":
        lines.append(f"implementation: {est.implementation()}")
    lines.append(f"inputs: {inputs_text(est)}")
    lines += [x for x in [attention_line(est.options)] if x]
    if strategies_text(est):
        lines.append(f"strategies: {strategies_text(est)}")
    return lines + [f"note: {x}" for x in est.notes()]


def _word(option: Option, value: object) -> str:
    if option.kind == "names":
        return ",".join(map(str, value))  # type: ignore[call-overload]
    if option.kind == "bool":
        return "on" if value else "off"
    if option.kind == "size" and isinstance(value, int):
        return " = ".join(scaled_bytes(value)) if value else "none"
    return f"{value:,}" if isinstance(value, int) else str(value)


def inputs_text(est: Estimate) -> str:
    """The inputs of the estimate on one line, as the JSON's ``inputs`` holds them (None left out): the
    options of the mode that ``OPTIONS`` echoes (``set`` ones, such as fine-tuning's, only when set;
    ``changed`` ones, such as the precision recipe, only when not the default).

    A parameter count depends on the model only, so its inputs are the mode alone."""
    inputs = est.inputs()
    mode = inputs["mode"]
    if mode == "params":
        return "mode params (parameter counts depend on the model only)"
    if mode == "infer" and inputs.get("weight_dtype") not in ("int4", "int8"):
        inputs.pop("quant_group", None)
    pairs = [f"{o.label} {_word(o, inputs[o.name])}" for o in OPTIONS
             if mode in o.modes and o.echo != "never" and inputs.get(o.name) is not None
             and not (o.echo == "set" and not inputs[o.name])
             and not (o.echo == "changed" and inputs[o.name] == o.default)]
    if not est.model.arch.dropout:  # --no-dropout or not, a model without dropout layers drops nothing out
        pairs = [f"dropout none ({est.model.arch.family} has no dropout layers)" if p.startswith("dropout ") else p
                 for p in pairs]
    return f"mode {mode}, " + ", ".join(pairs)


def attention_line(o: Options) -> str | None:
    """Which attention kernel the numbers of options ``o`` assume, given or the default, and the flag of
    the other profile (None for parameter counts)."""
    if o.mode not in ("train", "infer"):
        return None
    kernel = o.attention_kernel
    if o.attention is not None or o.flash or (o.implementation_kind == "hf" and o.hf_attention_given):
        why = "as given" + (f" or set by --framework {o.framework}" if o.framework else "")
    elif o.mode == "infer" or o.implementation_kind == "hf":
        why = "default: transformers' attn_implementation, as serving engines"
    else:
        why = "default: Megatron-Core's --attention-backend auto, Transformer Engine's flash kernel"
    held = "the b*a*s*s scores saved" if kernel == "eager" else "no s*s scores saved"
    other = "--attention flash: none saved" if kernel == "eager" else "--attention eager: the textbook profile, scores saved"
    return f"attention: {kernel} ({held}; {why}; {other})"


def strategies_text(est: Estimate) -> str:
    """The graph transforms, then the layout that is not a graph transform (data parallelism, ZeRO,
    offload), so that the line names everything the memory was computed under."""
    parts = [x for x in est.graph.strategies if x != "inference forward (no loss)"]
    o = est.options
    if o.mode == "train" and o.dp > 1:
        parts.append(f"data parallel d = {o.dp}" + (f", ZeRO stage {o.zero}" if o.zero else ", no ZeRO"))
    if o.mode == "train" and o.offload:
        parts.append("optimizer states and gradients offloaded to CPU")
    if o.mode == "infer" and o.kv_block:
        parts.append(f"paged KV cache, blocks of {o.kv_block} tokens")
    return "; ".join(parts)


def summary_report(est: Estimate, precision: int = 2) -> str:
    """One screen: the inputs and each quantity's value (``--summary``)."""
    m = est.model
    lines = [f"model: {m.name} ({m.arch.family}; {m.source or 'given'})", f"inputs: {inputs_text(est)}"]
    lines += [x for x in [attention_line(est.options)] if x]
    if strategies_text(est):
        lines.append(f"strategies: {strategies_text(est)}")
    return "\n".join(lines + [f"note: {x}" for x in est.notes()] + _summary(est, precision) + fits_lines(est)
                     + time_lines(est) + runtime_lines(est))


def fits_lines(est: Estimate) -> list[str]:
    """Which one figure decides whether a training step fits, and why (``quantities.runtime.deciding``)."""
    if est.options.mode != "train":
        return []
    key, why = est.deciding()
    return [f"fits: {key} decides ({why})"]


def _summary(est: Estimate, precision: int) -> list[str]:
    """One line a quantity; the step's peak joins the total's line (a sum and a moment of one step)."""
    width = max(len(q.title) for q in est.quantities)
    lines = ["", "summary:"]
    timeline = est.timeline()
    peak = {} if timeline is None else {"total_bytes": f"; step peak {format_bytes(timeline.peak_bytes)} at "
                                                       f"{timeline.peak_at}"}
    lines += [f"  {q.title:<{width}}  {_amount(q.value(est.values), q.unit, precision)}{peak.get(q.key, '')}"
              for q in est.quantities]
    if est.peak_phase() is not None:
        lines.append(f"  peak: {est.peak_phase()} (the total is the larger of the prefill and decode phases)")
    return lines


def estimate_text(est: Estimate, depth: int = 3, precision: int = 2) -> str:
    lines = _header(est)
    lines += _summary(est, precision)
    lines += time_lines(est) + runtime_lines(est)
    for q in est.reported_quantities():
        lines += ["", f"{q.title} [{q.key}]", f"  closed form: {plain(q.closed_form())}",
                  f"  value: {_amount(q.value(est.values), q.unit, precision)}"]
        if q.citation:
            lines += [f"  source: {x}" for x in citation_lines(q.citation)]
        rows = [(path, value) for path, value in _grouped_rows(q, est, 2 if q.key == "total_bytes" else depth)
                if value]  # a zero row (recompute/working_layer under full recompute) says nothing
        if len(rows) > 1:
            lines.append("  breakdown (by graph node):")
            lines += [f"    {path:<28} {value:>22,}" for path, value in rows]
    lines += [f"assumes: {note}" for note in est.graph.assumptions]
    lines += fits_lines(est)
    return "\n".join(lines)
