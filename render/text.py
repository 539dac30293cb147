"""Plain-text report of an estimate: closed forms, breakdowns and units."""

from __future__ import annotations

from derivations.estimate import Estimate
from render.units import format_bytes, format_count

__all__ = ["text_report"]


def _amount(value: int, unit: str, precision: int = 2) -> str:
    return format_bytes(value, precision) if unit == "bytes" else format_count(value, precision)


def text_report(est: Estimate, depth: int = 3, precision: int = 2) -> str:
    lines = [f"model: {est.model.name} ({est.model.arch.family}; {est.model.source or 'given'})"]
    sizes = ", ".join(f"{k}={v}" for k, v in est.model.sizes.items())
    lines.append(f"sizes: {sizes}")
    m = est.model
    if m.window is not None:
        layers = "every layer" if m.window_layers is None else f"l_w={m.window_layers} of l={m.sizes['l']} layers"
        lines.append(f"sliding window: w={m.window} tokens in {layers}")
    lines += [f"note: {note}" for note in m.notes]
    if est.graph.strategies:
        lines.append("strategies: " + "; ".join(est.graph.strategies))
    for q in est.quantities:
        lines += ["", f"{q.title} [{q.key}]", f"  closed form: {q.closed_form()}",
                  f"  value: {_amount(q.value(est.values), q.unit, precision)}"]
        if q.citation:
            lines.append(f"  source: {q.citation}")
        grouped = q.breakdown.grouped(depth)
        if len(grouped.terms) > 1:
            lines.append("  breakdown:")
            for term in grouped.terms:
                value = q.__class__(q.key, q.title, grouped.where(lambda p, k=term.path: p == k), q.relations)
                lines.append(f"    {term.path:<28} {value.value(est.values):>22,}")
    for note in est.graph.assumptions:
        lines.append(f"assumes: {note}")
    return "\n".join(lines)
