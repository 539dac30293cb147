"""Markdown and LaTeX writeups of an estimate: Jinja templates fed already-rendered strings.

Everything mathematical is printed here by ``render.latex.DerivationPrinter``; plain text is escaped
for the target format here too, so the templates under ``render/templates/`` only arrange strings.
Both formats share one context (``_document_context``); Markdown uses ``$...$``/``$$...$$``.

>>> from memderive.derivations.estimate import estimate
>>> doc = estimate_document(estimate("gpt2"), "md")
>>> doc.splitlines()[0]
'# Parameters of gpt2'
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from memderive.derivations.estimate import Estimate
from memderive.derivations.options import Options
from memderive.derivations.quantity import Quantity
from memderive.derivations.references import Reference, cite, cited
from memderive.arguments import option_argv
from memderive.documents.text import inputs_text, strategies_text
from memderive.documents.latex import latex, number, tex_escape
from memderive.documents.steps import Step, breakdown_rows, derivation, headline_key, single_device, symbols_in
from memderive.derivations.quantity_table import public_name
from memderive.documents.units import RenderOptions, scaled_count, scaled_flops
from memderive.symbolic.lazy import lazy

jinja2 = lazy("jinja2")
sp = lazy("sympy")

__all__ = ["estimate_document", "quantity_document", "fragment_markdown", "table_markdown", "cli_command", "value_math",
           "references_context", "references_markdown", "FORMATS"]

FORMATS = ("md", "latex")
TITLES = {"params": "Parameters of {}", "train": "Training memory of {}", "infer": "Inference memory of {}"}
_TEMPLATES = Path(__file__).parent / "templates"


@dataclass(frozen=True, slots=True)
class _Format:
    """How plain text is written in one output format."""

    name: str
    text: Callable[[str], str]
    code: Callable[[str], str]
    suffix: str
    cell: Callable[[str], str] = lambda math: math  # math in a table cell


def _breakable_math(math: str) -> str:
    """Inline math that may wrap in a LaTeX table cell: a break is allowed after each argument's comma."""
    return math.replace(", ", r", \allowbreak ")


_FMT = {"md": _Format("md", lambda s: s, lambda s: f"`{s}`", "md.j2"),
        "latex": _Format("latex", lambda s: tex_escape(s).replace("/", r"/\allowbreak{}"),
                         lambda s: r"\texttt{%s}" % _breakable(tex_escape(s)), "tex.j2", _breakable_math)}


def _breakable(tex: str) -> str:
    """Let long paths and keys break after ``/`` and ``_``."""
    return tex.replace("/", r"/\allowbreak{}").replace(r"\_", r"\_\allowbreak{}")


@functools.lru_cache(maxsize=2)
def _environment(fmt: str) -> jinja2.Environment:
    common: dict[str, Any] = dict(loader=jinja2.FileSystemLoader(_TEMPLATES), undefined=jinja2.StrictUndefined,
                                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
                                  autoescape=False)
    if fmt == "latex":  # LaTeX is full of braces: \VAR{...} and \BLOCK{...} instead of {{ }} and {% %}
        common.update(variable_start_string=r"\VAR{", variable_end_string="}", block_start_string=r"\BLOCK{",
                      block_end_string="}", comment_start_string=r"\#{", comment_end_string="}")
    return jinja2.Environment(**common)


def _render(template: str, fmt: str, context: dict[str, Any]) -> str:
    return _environment(fmt).get_template(f"{template}.{_FMT[fmt].suffix}").render(**context).rstrip() + "\n"


def _check_format(fmt: str) -> _Format:
    if fmt not in _FMT:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    return _FMT[fmt]


def value_math(value: int, unit: str, options: RenderOptions) -> str:
    """An exact value with its unit and rounded figures, as LaTeX math.

    >>> value_math(16_207_380_480, "bytes", RenderOptions())
    '16{,}207{,}380{,}480\\\\ \\\\text{B} \\\\approx 16.21\\\\ \\\\text{GB} = 15.09\\\\ \\\\text{GiB}'
    """
    if unit == "bytes":
        rounded = options.bytes_text(value).replace(" / ", " = ").split(" = ")
        return rf"{number(value)}\ \text{{B}} \approx " + " = ".join(_unit_math(x) for x in rounded)
    short = scaled_count(value, options.precision)
    if short == f"{value:,}":
        return number(value)
    figure, suffix = short.split()
    exponent = {"K": 3, "M": 6, "B": 9, "T": 12}[suffix]
    return rf"{number(value)} \approx {figure} \times 10^{{{exponent}}}"


def _unit_math(text: str) -> str:
    figure, unit = text.split()
    return rf"{figure.replace(',', '{,}')}\ \text{{{unit}}}"


def _inline(expr: sp.Expr) -> str:
    """A formula for a table cell: short fractions folded (``2 b h s / t``)."""
    return latex(expr, fold_short_frac=True)


def _value_text(value: int, unit: str, options: RenderOptions) -> tuple[str, str]:
    if unit == "bytes":
        return f"{value:,} B", options.bytes_text(value)
    if unit == "FLOPs":
        return f"{value:,}", scaled_flops(value, options.precision)
    return f"{value:,}", scaled_count(value, options.precision, words=True)


def model_reference(est: Estimate) -> str:
    """What ``--model`` needs to find this model again: the bundled name, else its config path."""
    source = est.model.source
    return source if source and source != "bundled preset" else est.model.name


def cli_command(est: Estimate, extra: Sequence[str] = (), command: str = "estimate",
                omit: Sequence[str] = ()) -> str:
    """The ``memderive`` command line that reproduces ``est`` (defaults and ``omit`` left out).

    ``command`` is ``estimate`` or, e.g., ``derive activations`` (whose quantity implies the mode).
    """
    values = {f.name: getattr(est.options, f.name) for f in fields(Options) if f.name not in omit}
    if command.startswith("derive"):
        values.pop("mode", None)  # the quantity implies it
    args = ["memderive", *command.split(), "--model", model_reference(est), *option_argv(values)]
    return shlex.join([*args, *extra])  # quoted where a value needs it (a --pipeline-layout's '|' and '*')


class _Seen:
    """Steps already shown in a document, so later sections refer back instead of repeating them."""

    def __init__(self) -> None:
        self.steps: dict[tuple[str, str, int], int] = {}
        self.tables: dict[tuple[tuple[str, str, int], ...], str] = {}
        self.count = 0

    @staticmethod
    def key(step: Step) -> tuple[str, str, int]:
        return (step.label, sp.srepr(step.symbolic), step.value)


#: How the named parts of a whole-model step are labelled under their braces.
PART_NAMES = {"layer": "layers", "embed": "embedding", "head": "output layer", "model_states": "model states"}


def _rendered_step(step: Step, number_: int, fmt: _Format, options: RenderOptions) -> dict[str, Any]:
    source = fmt.code(step.source) if step.level in ("term", "layer") else fmt.text(step.described(keyed=True))
    label = fmt.text(step.label[:1].upper() + step.label[1:])
    labels = {expr: PART_NAMES.get(name, name.replace("_", " ")) for name, expr in step.parts}
    lines = [latex(step.symbolic, line_width=options.line_width, labels=labels)]
    if options.detail == "substituted":
        lines.append(step.substituted)
    if options.detail != "symbolic":
        lines.append(value_math(step.value, step.unit, options))
    return {"number": number_, "label": label, "source": source, "aligned": _aligned(lines), "note": fmt.text(step.note)}


def _aligned(lines: Sequence[str]) -> str:
    """Body of an ``aligned``/``align*`` environment: *formula* = *substituted* = *result*, one per line."""
    return " \\\\\n".join(("&" if i == 0 else "&= ") + line for i, line in enumerate(lines))


def _section(est: Estimate, q: Quantity, fmt: _Format, options: RenderOptions, seen: _Seen,
             base: Estimate | None = None) -> dict[str, Any]:
    steps = derivation(est, q.key, options, base)
    terms = [s for s in steps if s.level == "term"]
    table_key = tuple(_Seen.key(s) for s in terms)
    terms_ref = seen.tables.get(table_key, "") if terms else ""
    if terms and not terms_ref:
        seen.tables[table_key] = fmt.text(q.title)
    rows = [{"node": fmt.code(s.source), "formula": fmt.cell(_inline(s.symbolic)),
             "substituted": fmt.cell(s.substituted), "value": f"{s.value:,}"} for s in terms]
    chain: list[dict[str, Any]] = []
    refs: list[int] = []
    previous = None
    for step in (s for s in steps if s.level != "term"):
        earlier = seen.steps.get(_Seen.key(step))
        same = previous is not None and sp.srepr(step.symbolic) == sp.srepr(previous.symbolic)
        previous = step
        if same or (earlier is not None and step.level != "closed form"):
            if earlier is not None:
                refs.append(earlier)
            continue
        seen.count += 1
        seen.steps.setdefault(_Seen.key(step), seen.count)
        chain.append(_rendered_step(step, seen.count, fmt, options))
    exact, rounded = _value_text(est.number(q.key), q.unit, options)
    in_layer = any(s.source.startswith("layer/") for s in terms)
    return {"key": fmt.code(q.key), "title": fmt.text(q.title), "unit": q.unit, "rows": [] if terms_ref else rows,
            "terms_intro": ("Terms of one layer, one op per row (source: the graph node), on one device"
                            if in_layer else "Terms, one per graph path, on one device"),
            "terms_ref": terms_ref, "refs": ", ".join(str(r) for r in refs), "chain": chain,
            "citation": fmt.text(cite(q.citation, keyed=True)) if q.citation else "", "exact": exact,
            "rounded": rounded, "assumptions": [fmt.text(a) for a in q.assumptions],
            "cited": [s.citation for s in steps]}  # the closed form's is the quantity's


def _symbols(est: Estimate, quantities: Sequence[Quantity], fmt: _Format,
             values: bool) -> tuple[list[dict[str, str]], list[str]]:
    exprs = [t.expr for q in quantities for t in q.breakdown.terms] + [q.closed_form() for q in quantities]
    rows = [{"symbol": f"${dim.latex}$", "meaning": fmt.text(dim.meaning),
             "value": f"{est.values[dim.expr]:,}" if values and dim.expr in est.values else ""}
            for dim in symbols_in(exprs)]
    relations = {latex(k): latex(v) for q in quantities for k, v in q.relations.items()}
    return rows, [f"${k} = {v}$" for k, v in relations.items()]


def _breakdown(est: Estimate, key: str, fmt: _Format, options: RenderOptions) -> dict[str, Any]:
    q = est.quantity(key)
    rows = breakdown_rows(est, key)
    total = est.number(key)
    return {"title": fmt.text(q.title), "key": fmt.code(key), "total": _value_text(total, q.unit, options),
            "rows": [{"path": fmt.code(r.path), "formula": fmt.cell(_inline(r.expr)), "exact": f"{r.value:,}",
                      "rounded": _value_text(r.value, q.unit, options)[1],
                      "share": f"{100 * r.value / total:.{max(options.precision - 1, 0)}f}" if total else ""}
                     for r in rows]}


def _settings(est: Estimate, fmt: _Format, numbers: bool) -> list[tuple[str, str]]:
    opts = est.options
    pairs = [("model", f"{est.model.name} ({est.model.arch.family}; {est.model.source or 'given config'})"),
             *(("note", note) for note in est.model.notes), ("mode", opts.mode)]
    if opts.mode != "params":
        if numbers:
            pairs.append(("micro-batch and sequence", f"b = {opts.batch}, s = {opts.seq}"))
        if opts.mode == "train":
            pairs.append(("implementation", est.implementation()))
        pairs += [("precision and optimizer", f"{opts.dtype}, {opts.optimizer}"),
                  ("strategies", strategies_text(est) or "none"),
                  ("activation profile", opts.profile)]
        if opts.zero or opts.dp > 1:
            pairs.append(("data parallel", f"d = {opts.dp}, ZeRO stage {opts.zero}"
                                           + (", optimizer offloaded to CPU" if opts.offload else "")))
    if numbers or opts.mode == "params":  # a symbolic derivation's b = s = 1 are placeholders, not inputs
        pairs.append(("inputs", inputs_text(est)))
    if est.peak_phase() is not None:
        pairs.append(("peak", f"{est.peak_phase()} (the total is the larger of the prefill and decode phases)"))
    return [(fmt.text(k), fmt.text(v)) for k, v in pairs]


def _document_context(est: Estimate, keys: Sequence[str], fmt: _Format, options: RenderOptions,
                      breakdown_key: str, command: str) -> dict[str, Any]:
    quantities = [est.quantity(k) for k in keys]
    seen = _Seen()
    base = single_device(est)
    sections = [_section(est, q, fmt, options, seen, base) for q in quantities]
    symbols, relations = _symbols(est, quantities, fmt, options.detail != "symbolic")
    assumptions = list(dict.fromkeys(a for q in quantities for a in (*q.assumptions, *est.graph.assumptions)))
    return {"title": fmt.text(TITLES.get(est.options.mode, "{}").format(est.model.name)),
            "command": fmt.text(command), "settings": _settings(est, fmt, options.detail != "symbolic"),
            "summary": [{"title": s["title"], "key": s["key"], "exact": s["exact"], "rounded": s["rounded"]}
                        for s in sections],
            "symbols": symbols, "relations": relations, "sections": sections,
            "breakdown": _breakdown(est, breakdown_key, fmt, options),
            "assumptions": [fmt.text(a) for a in assumptions], "numbers": options.detail != "symbolic",
            "substituted": options.detail == "substituted", "time": _time(est, fmt),
            "references": references_context(cited(c for s in sections for c in s["cited"]), fmt.name)}


def references_context(refs: Sequence[Reference], fmt: str) -> list[dict[str, str]]:
    """The entries of a References section, escaped for ``fmt`` (``md`` or ``latex``).

    >>> from memderive.derivations.references import reference
    >>> row = references_context([reference("ren-2021")], "md")[0]
    >>> row["key"], row["link"]
    ('ren-2021', '[arXiv:2101.06840](https://arxiv.org/abs/2101.06840)')
    """
    form = _check_format(fmt)
    rows = []
    for ref in refs:
        details = ", ".join(str(x) for x in (ref.venue, ref.year) if x)
        if fmt == "md":
            link = f"[{ref.where}]({ref.url})" if ref.url else f"`{ref.where}`"
        else:
            link = form.code(ref.where)
        rows.append({"key": ref.key, "authors": form.text(ref.authors.rstrip(".")), "title": form.text(ref.title),
                     "details": form.text(details), "link": link, "url": ref.url})
    return rows


def references_markdown(refs: Sequence[Reference]) -> str:
    """A Markdown References list (each key also a link definition), for notebooks and other documents."""
    return _render("_references", "md", {"references": references_context(refs, "md")})


def _time(est: Estimate, fmt: _Format) -> dict[str, Any] | None:
    """Times on ``--gpu`` and the model each follows (None without ``--gpu``)."""
    # lazy: the time model, imported with a --gpu only (~15% of a cold estimate)
    from memderive.derivations.quantities.device import time_json, time_of

    timing = time_of(est)
    if timing is None:
        return None
    values = time_json(est)
    rows = [(fmt.code(k), f"{v:.1%}" if k == "mfu" else f"{v:,.0f}" if k.endswith("tokens_per_s") else f"{v:.4g} s")
            for k, v in values.items() if k not in ("gpu", "efficiency", "fits_gpu")]
    fits = "" if values["fits_gpu"] else " (the layout does not fit this GPU's memory)"
    return {"gpu": fmt.text(f"{timing.gpu.title}, matmuls at {timing.efficiency:.1%} of dense peak{fits}"), "rows": rows,
            "model": [fmt.text(line) for line in timing.model()]}


def estimate_document(est: Estimate, fmt: str, options: RenderOptions | None = None) -> str:
    """The whole estimate as a Markdown (``"md"``) or LaTeX (``"latex"``, a complete document) writeup."""
    form = _check_format(fmt)
    options = options or RenderOptions()
    keys = [q.key for q in est.quantities]
    command = cli_command(est, _flags(fmt, options))
    return _render("estimate", fmt, _document_context(est, keys, form, options, headline_key(est), command))


#: Render settings whose flag is not their field's name (``--precision`` is the training recipe).
_RENDER_FLAGS = {"precision": "decimals"}


def _flags(fmt: str, options: RenderOptions) -> list[str]:
    """``--format`` and the render settings that differ from the defaults."""
    flags = ["--format", fmt]
    for f in fields(RenderOptions):
        value = getattr(options, f.name)
        if value != f.default and f.name != "line_width":
            flags += [f"--{_RENDER_FLAGS.get(f.name, f.name)}", str(value)]
    return flags


def quantity_document(est: Estimate, key: str, fmt: str, options: RenderOptions | None = None) -> str:
    """One quantity's derivation as a Markdown or LaTeX (complete document) writeup."""
    form = _check_format(fmt)
    options = options or RenderOptions()
    est.quantity(key)  # a clear KeyError for an unknown key
    name = public_name(est.options.mode, key)
    omit = ("batch", "seq") if options.detail == "symbolic" else ()
    command = (cli_command(est, _flags(fmt, options), f"derive {name}", omit) if name
               else cli_command(est, _flags(fmt, options)))
    context = _document_context(est, [key], form, options, key, command)
    context["title"] = form.text(f"{est.quantity(key).title}: {est.model.name}")
    return _render("estimate", fmt, context)


def fragment_markdown(est: Estimate, part: str, key: str | None = None, options: RenderOptions | None = None,
                      base: Estimate | None = None, terms_as: str | None = None) -> str:
    """One part of the Markdown writeup, for notebooks: ``section`` (a quantity's derivation, ``key``),
    ``symbols`` (of every quantity) or ``breakdown`` (of ``key``, default the headline quantity).

    ``base`` is ``single_device(est)`` where the caller has it; ``terms_as`` names an earlier quantity with the
    same per-op terms, whose table the section then refers to instead of repeating it."""
    options = options or RenderOptions()
    form, numbers = _FMT["md"], options.detail != "symbolic"
    key = key or headline_key(est)
    context: dict[str, Any] = {"numbers": numbers, "substituted": options.detail == "substituted"}
    if part == "section":
        seen = _Seen()
        if terms_as:
            terms = tuple(_Seen.key(step) for step in derivation(est, key, options, base) if step.level == "term")
            seen.tables[terms] = form.text(terms_as)
        context["section"] = _section(est, est.quantity(key), form, options, seen, base)
    elif part == "symbols":
        context["symbols"], context["relations"] = _symbols(est, est.quantities, form, numbers)
    elif part == "breakdown":
        context["breakdown"] = _breakdown(est, key, form, options)
    else:
        raise ValueError(f"part must be section, symbols or breakdown, got {part!r}")
    return _render(f"_{part}", "md", context)


def table_markdown(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: str = "") -> str:
    """A Markdown table of already-formatted cells; ``aligns`` is one ``l``/``r`` per column."""
    aligns = aligns or "l" * len(headers)
    if len(aligns) != len(headers) or any(len(row) != len(headers) for row in rows):
        raise ValueError("every row needs one cell per header")
    return _render("_table", "md", {"headers": headers, "aligns": aligns, "rows": rows})
