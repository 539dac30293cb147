"""The report of ``memderive compare`` (and ``estimate --compare``): one model, six calculators' accounting side by
side, every gap explained.

Figures print in GB of 10^9 bytes, rounded exactly:

>>> _fixed(Fraction(134_768_312_320, 10**9), 2)
'134.77'
"""

from __future__ import annotations

from fractions import Fraction

from memderive.derivations.conventions import COLUMNS, CONVENTIONS, ConventionError, compare, gaps
from memderive.derivations.references import cite

#: ``CONVENTIONS``, ``ConventionError`` and ``compare`` (``derivations.conventions``) come with the report, so that a
#: command compares and reports with one import.
__all__ = ["compare_report", "TITLES", "CONVENTIONS", "ConventionError", "compare"]

TITLES = {"parameters": "parameters", "model_states": "model states", "activations": "activations",
          "kv_cache": "KV cache", "total": "total"}


def _cell(value: int | None, column: str) -> str:
    if value is None:
        return "-"
    if column == "parameters":
        return f"{_fixed(Fraction(value, 10**9), 3)} bn"
    return f"{_fixed(Fraction(value, 10**9), 2)} GB"


def _fixed(x: Fraction, digits: int) -> str:
    """``x`` rounded half-even to ``digits`` decimals, exactly."""
    scaled = round(x * 10**digits)
    sign, scaled = ("-" if scaled < 0 else ""), abs(scaled)
    return f"{sign}{scaled // 10**digits:,}.{scaled % 10**digits:0{digits}d}"


def _pct(diff: int, base: int) -> str:
    return f"{100 * diff / base:+.1f}%" if base else "n/a"


def compare_report(model_name: str, rows, skipped, opts, fmt: str = "text") -> str:
    ours = next(r for r in rows if r.convention == "memderive")
    head = ["convention", *(TITLES[c] for c in COLUMNS), "prints"]
    table = [[r.convention, *(_cell(r.column(c), c) for c in COLUMNS), r.printed] for r in rows]
    mode = "training" if opts.mode == "train" else "inference"
    lines = [f"compare: {model_name}, {mode}, b={opts.batch}, s={opts.seq}"
             + (f", n={opts.new_tokens}" if opts.mode == "infer" else "")
             + f", t={opts.tp}, p={opts.pp}, d={opts.dp}, ZeRO {opts.zero}; memderive implementation "
             f"{opts.implementation}; GB = 10^9 bytes"]
    if fmt == "md":
        lines = [f"## {lines[0]}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(row) + " |" for row in table]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
        lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in (head, *table)]
    lines += ["", "Differences from memderive over 1%, and the term that causes each:" if fmt == "text"
              else "**Differences from memderive over 1%, and the term that causes each:**", ""]
    for r in rows:
        if r.convention == "memderive":
            continue
        for column, diff, why in gaps(ours, r):
            amount = ("+" if diff >= 0 else "") + _fixed(Fraction(diff, 10**9), 2)
            bullet = f"- {r.convention}, {TITLES[column]}: {_pct(diff, ours.column(column))} " \
                     f"({amount} {'bn' if column == 'parameters' else 'GB'}): {why or 'UNEXPLAINED'}"
            lines.append(bullet)
    for r in rows:
        if r.printed.startswith("GB = 2^30"):
            lines.append(f"- {r.convention} prints 2^30 bytes as \"GB\": its total reads "
                         f"{_fixed(Fraction(r.total, 2**30), 2)} \"GB\" = {_fixed(Fraction(r.total, 10**9), 2)} GB here")
    for name, why in skipped:
        lines.append(f"- {name}: no figure ({why})")
    lines += ["", "Sources: " + "; ".join(f"{r.convention}: {cite(r.source)}" for r in rows if r.convention != "memderive")]
    return "\n".join(lines)
