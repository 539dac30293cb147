"""Reports of claim checks (``derivations.claims.check``): plain text, Markdown and LaTeX.

Formulas print through ``render.latex`` (the ``DerivationPrinter``); the report only arranges
strings. The text form is what ``memderive check`` prints; Markdown and LaTeX are for notes,
notebooks (``display(Markdown(markdown_report(r)))``) and papers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from memderive.documents.latex import latex as tex
from memderive.documents.latex import tex_escape
from memderive.documents.text import plain as words
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

#: The checker's types (``derivations.claims``: ``check.CheckResult``, ``analysis.Gap``, ``markers.Marked``), by name
#: only: the checker builds SymPy's symbols as it is imported, and ``commands.check`` imports this module to register.
CheckResult = Gap = Marked = Any

__all__ = ["check_text", "markdown_report", "latex_report", "latex_document", "file_lines", "md_code", "md_text",
           "MARKS"]

MARKS = {True: "holds", False: "does not hold"}


def md_text(text: str) -> str:
    """Untrusted text in Markdown: ``& < >`` as entities, so a claim's HTML shows as text, never as HTML.

    >>> md_text("<img src=x onerror=alert(1)>")
    '&lt;img src=x onerror=alert(1)&gt;'
    """
    return " ".join(str(text).split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_code(text: str) -> str:
    """Untrusted text as a Markdown code span: a fence longer than any run of backticks inside, so
    the text cannot close the span (CommonMark shows a code span's HTML as text).

    >>> md_code("a`b"), md_code("x")
    ('`` a`b ``', '`x`')
    """
    flat = " ".join(str(text).split())
    runs = [len(run) for run in re.findall(r"`+", flat)]
    if not runs:
        return f"`{flat}`"
    fence = "`" * (max(runs) + 1)
    return f"{fence} {flat} {fence}"


def _number(value: sp.Rational) -> str:
    return f"{int(value):,}" if value.q == 1 else f"{float(value):,.6g}"


def _example(result: CheckResult) -> str:
    """The numbers of a bundled model: a counterexample for a claim that does not hold, plain
    numbers for one that does (an approximation written with ``\\approx``)."""
    ce = result.counterexample
    if ce is None:
        return ""
    sizes = ", ".join(f"{k}={v:,}" for k, v in ce.values.items())
    word = "numbers" if result.holds else "counterexample"
    return (f"{word} ({ce.model}: {sizes}): ours {_number(sp.Rational(ce.ours))}, claim {_number(ce.claim)}"
            f" (claim/ours = {ce.ratio:.6g})")


def check_text(result: CheckResult) -> str:
    """What ``memderive check`` prints: the verdict, both sides, why, a counterexample, notes."""
    p = result.parsed
    lines = [f"{result.verdict} ({MARKS[result.holds]}): {result.spec.name} = {result.title} "
             f"({result.spec.unit}), {result.model}",
             f"  claim:  {plain(result.theirs)}    read from '{p.text.strip()}'",  # as typed, not repr'd
             f"  ours:   {plain(result.ours)}"]
    if result.verdict != "exact":
        lines.append(f"  ours - claim: {plain(sp.factor_terms(result.difference))}")
    lines += [f"  - {plain(line)}" for line in result.explanation]
    if result.counterexample is not None:
        lines.append("  " + _example(result))
    if result.citation:
        lines.append(f"  our derivation cites: {result.citation}")
    lines += [f"  note: {plain(note)}" for note in result.notes]
    return "\n".join(lines)


def plain(expr: object) -> str:
    """A formula in a reader's notation (``h^2``, ``max``): ``render.text.plain``."""
    return words(expr)


def _gap_rows(gaps: Sequence[Gap]) -> list[str]:
    rows = []
    for gap in gaps:
        if not gap.matches:
            rows.append(f"| {gap.order} | {gap.kind} | ${tex(gap.expr)}$ | | |")
        for i, match in enumerate(gap.matches):
            for piece, part in zip(match.pieces, match.parts):
                label = f"{gap.kind}" + (f" (alternative {i + 1})" if len(gap.matches) > 1 else "")
                rows.append(f"| {gap.order} | {label} | ${tex(part)}$ | `{piece.path}` | {piece.what} |")
    return rows


def markdown_report(result: CheckResult, level: int = 3) -> str:
    """One check as a Markdown section: verdict, formulas in LaTeX, why, where the gap comes from."""
    head = "#" * level
    claim = md_code(result.parsed.text.strip()).replace("|", "\\|")  # GFM: a pipe splits a cell even in code
    out = [f"{head} {result.spec.name}: {result.verdict} ({MARKS[result.holds]})", "",
           f"{result.title} ({result.spec.unit}) for {md_code(result.model)}.", "",
           "| | |", "|---|---|",
           f"| claim, read from {claim} | ${tex(result.theirs)}$ |",
           f"| ours | ${tex(result.ours)}$ |"]
    if result.verdict != "exact":
        out.append(f"| ours − claim | ${tex(sp.factor_terms(result.difference))}$ |")
    out += [""] + [f"- {md_text(line)}" for line in result.explanation]
    rows = _gap_rows(result.gaps)
    if rows:
        out += ["", "| order | kind | term | node | what |", "|---|---|---|---|---|", *rows]
    if result.counterexample is not None:
        example = _example(result)
        out += ["", md_text(example[0].upper() + example[1:] + ".")]
    if result.citation:
        out += ["", f"Our derivation cites {result.citation}."]
    if result.notes:
        out += [""] + [f"> {md_text(note)}" for note in result.notes]
    return "\n".join(out)


def latex_report(result: CheckResult, heading: str = "subsection") -> str:
    """One check as a LaTeX fragment (``\\subsection*``, equations, an itemized why, notes)."""
    out = [rf"\{heading}*{{{tex_escape(result.spec.name)}: {tex_escape(result.verdict)} "
           rf"({tex_escape(MARKS[result.holds])})}}",
           rf"{tex_escape(result.title)} ({tex_escape(result.spec.unit)}) for \texttt{{{tex_escape(result.model)}}}.",
           r"\begin{align*}",
           rf"\text{{claim}} &= {tex(result.theirs)} \\",
           rf"\text{{ours}} &= {tex(result.ours)}" + (r" \\" if result.verdict != "exact" else ""),
           ]
    if result.verdict != "exact":
        out.append(rf"\text{{ours}} - \text{{claim}} &= {tex(sp.factor_terms(result.difference))}")
    out += [r"\end{align*}", r"\begin{itemize}"]
    out += [rf"\item {tex_escape(line)}" for line in result.explanation]
    if result.counterexample is not None:
        out.append(rf"\item {tex_escape(_example(result))}")
    out += [rf"\item note: {tex_escape(note)}" for note in result.notes]
    out.append(r"\end{itemize}")
    return "\n".join(out)


_PREAMBLE = r"""\documentclass[11pt,a4paper]{article}
\usepackage[margin=2cm]{geometry}
\usepackage{amsmath}
\usepackage{parskip}
\allowdisplaybreaks
\title{%s}
\author{memderive check}
\date{}
\begin{document}
\maketitle
\sloppy
"""


def latex_document(found: Sequence[tuple[str, CheckResult | None, str]], title: str) -> str:
    """A complete LaTeX document (it compiles with pdflatex) of checks: ``(heading, result, error)``
    each, the heading empty for a single claim (``memderive check --format latex``) and
    ``NOTES.md:12`` for the claims of a file. Characters outside ASCII that LaTeX has no
    escape for (a claim's Chinese notes) print as ``?``."""
    body = []
    for heading, result, error in found:
        if heading:
            body.append(rf"\section*{{{tex_escape(heading)}}}")
        if result is None:
            body.append(rf"error: {tex_escape(error)}")
        else:
            body.append(latex_report(result, "subsection" if heading else "section"))
    text = _PREAMBLE % tex_escape(title) + "\n\n".join(body) + "\n\\end{document}\n"
    return "".join(ch if ch.isascii() else "?" for ch in text)


def file_lines(path: str, found: Sequence[tuple[Marked, CheckResult | None, str]]) -> list[str]:
    """``NOTES.md:12: exact (holds) activations.per_layer: sbh(34 + 5as/h)`` per claim, with why."""
    lines = []
    for marked, result, error in found:
        where = f"{path}:{marked.line}:"
        if result is None:
            lines.append(f"{where} error: {error}")
            continue
        formula = " ".join(marked.formula.split())
        lines.append(f"{where} {result.verdict} ({MARKS[result.holds]}) {result.spec.name}: {formula}")
        lines += [f"    {note}" for note in result.notes if note.startswith("unsure:")]  # said even when it holds
        if not result.holds:
            lines += [f"    - {line}" for line in result.explanation]
            if result.counterexample is not None:
                lines.append("    " + _example(result))
    return lines
