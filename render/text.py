"""Plain-text report of an estimate: a summary, then each quantity's closed form, value and breakdown."""

from __future__ import annotations

from derivations.estimate import Estimate
from derivations.quantity import Quantity
from render.units import format_bytes, format_count

__all__ = ["text_report"]


def _amount(value: int, unit: str, precision: int = 2) -> str:
    return format_bytes(value, precision) if unit == "bytes" else format_count(value, precision)


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
    if est.graph.strategies:
        lines.append("strategies: " + "; ".join(est.graph.strategies))
    return lines


def text_report(est: Estimate, depth: int = 3, precision: int = 2) -> str:
    lines = _header(est)
    width = max(len(q.title) for q in est.quantities)
    lines += ["", "summary:"]
    lines += [f"  {q.title:<{width}}  {_amount(q.value(est.values), q.unit, precision)}" for q in est.quantities]
    if est.peak_phase() is not None:
        lines.append(f"  peak: {est.peak_phase()} (the total is the larger of the prefill and decode phases)")
    for q in est.quantities:
        lines += ["", f"{q.title} [{q.key}]", f"  closed form: {q.closed_form()}",
                  f"  value: {_amount(q.value(est.values), q.unit, precision)}"]
        if q.citation:
            lines.append(f"  source: {q.citation}")
        rows = _grouped_rows(q, est, 2 if q.key == "total_bytes" else depth)
        if len(rows) > 1:
            lines.append("  breakdown (by graph node):")
            lines += [f"    {path:<28} {value:>22,}" for path, value in rows]
    lines += [f"assumes: {note}" for note in est.graph.assumptions]
    return "\n".join(lines)
