"""``memderive estimate`` for Mamba 2 and hybrid (Bamba) models: a text report, and a step-by-step writeup in
Markdown or LaTeX (sizes, one layer's parameters term by term, the whole model, weights, and in inference the
state that replaces the KV cache), every number the value of a formula derived from the layer graph."""

from __future__ import annotations

import argparse
import json

from memderive.derivations.models.ssm import CONV_DIM
from memderive.derivations.ssm_estimate import LAYER_TITLES, SsmEstimate
from memderive.documents.latex import latex, number, tex_escape
from memderive.symbolic.dims import by_name
from memderive.symbolic.expr import Expr, to_sympy
from memderive.documents.units import RenderOptions, scaled_bytes, scaled_count
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["ssm_report"]

FAMILIES = {"mamba2": "Mamba 2 (transformers' Mamba2ForCausalLM)",
            "bamba": "Bamba hybrid (transformers' BambaForCausalLM: Mamba 2 and attention layers, each with a "
                     "SwiGLU MLP)"}
STATE = {"mamba_layer/conv_state": "conv_state (b, conv_dim, d_cv) per Mamba layer, in the cache dtype",
         "mamba_layer/ssm_state": "ssm_state (b, n_sh, d_sh, d_st) per Mamba layer, fp32 as transformers holds it",
         "mamba_layer/position": "the cache layer's int64 position counter per Mamba layer",
         "attention_layer/kv": "keys and values (b, a_kv, s + n, d_h) per attention layer"}
LAYER_TEXT = {
    "mamba_layer": "A Mamba 2 layer is an RMSNorm and a Mamba2Mixer. in_proj makes z and x (d_in each), B and C "
                   "(n_g d_st each) and dt (n_sh); the depthwise causal convolution sees x, B and C: conv_dim = "
                   "d_in + 2 n_g d_st = {conv_dim} channels, d_cv taps each; A_log, D and dt_bias are one number per "
                   "head; the gated RMSNorm weighs d_in; out_proj maps d_in back to h.",
    "attention_layer": "An attention layer: RMSNorm, q, k, v and o projections without bias (a heads, a_kv key/value "
                       "heads of d_h), then the same pre-MLP RMSNorm and SwiGLU MLP as the Mamba layers.",
}
BAMBA_MLP = " In Bamba the mixer is followed by a pre-MLP RMSNorm and a SwiGLU MLP of width f (gate, up, down)."
#: Visible characters of a formula line before it breaks: three quarters of the other writeups' width, since the
#: state-space letters carry two-letter subscripts (d_{cv}, n_{sh}) that print wider than the characters counted
#: (at the full width the Mamba 2 layer's line was 34 pt past the page, tests/test_render_writeup.py).
LINE = RenderOptions().line_width * 3 // 4
NOT_DERIVED = "not derived yet: prefill activations and transient buffers (the scan's chunked intermediates)"


def ssm_report(est: SsmEstimate, args: argparse.Namespace) -> str:
    if args.json:
        return json.dumps(est.to_json(), indent=2)
    if args.format == "text":
        return _text(est)
    return _document(est, args.format, _command(args))


def _command(args: argparse.Namespace) -> str:
    opts = args.ssm_opts
    words = ["memderive estimate", "--model", args.model, "--mode", opts.mode]
    if opts.mode == "infer":
        words += ["--batch", str(opts.batch), "--seq", str(opts.seq)] + (
            ["--new-tokens", str(opts.new_tokens)] if opts.new_tokens else [])
    return " ".join(words + ["--format", args.format])


def _rounded(value: int, unit: str) -> str:
    return scaled_bytes(value)[0] if unit == "bytes" else scaled_count(value)


def _text(est: SsmEstimate) -> str:
    m = est.model
    lines = [f"model: {m.name} ({m.family}; {m.source})",
             "sizes: " + ", ".join(f"{k}={v}" for k, v in m.sizes.items())]
    if m.attention_layers:
        lines.append(f"attention layers (0-based): {', '.join(map(str, m.attention_layers))}")
    lines.append("")
    for q in est.quantities:
        lines += [f"{q.title} [{q.key}]", f"  closed form: {q.formula}",
                  f"  value: {q.value:,}{' B' if q.unit == 'bytes' else ''} ({_rounded(q.value, q.unit)})"]
        lines += [f"    {path:<34} {value:>20,}" for path, _, value in q.terms]
    if est.opts.mode == "infer":
        lines.append(NOT_DERIVED)
    return "\n".join(lines)


class _Doc:
    """Markdown or LaTeX pieces: headings, paragraphs, tables and equations."""

    def __init__(self, fmt: str) -> None:
        self.md, self.parts = fmt == "md", []

    def heading(self, text: str) -> None:
        self.parts.append(f"## {text}" if self.md else f"\\section*{{{tex_escape(text)}}}")

    def text(self, text: str, code: str = "") -> None:
        if self.md:
            self.parts.append(text + (f" `{code}`" if code else ""))
        else:
            self.parts.append(tex_escape(text) + (f" {{\\small\\ttfamily {tex_escape(code)}}}" if code else ""))

    def table(self, header: list[str], rows: list[list[str]], wrap: int | None = None) -> None:
        """Cells: plain text, or math between $...$ (kept as is in both formats); in LaTeX the column ``wrap``
        breaks its text over lines of a third of the page."""
        cell = (lambda c: c) if self.md else (lambda c: c if c.startswith("$") else tex_escape(c))
        if self.md:
            self.parts.append("\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
                                        + ["| " + " | ".join(map(cell, r)) + " |" for r in rows]))
        else:
            spec = "".join(r">{\raggedright\arraybackslash}p{0.36\textwidth}" if i == wrap else "l"
                           for i in range(len(header) - 1)) + "r"
            body = [" & ".join(map(cell, r)) + r" \\" for r in rows]
            self.parts.append("\n".join([f"{{\\small\\begin{{longtable}}{{{spec}}}", r"\toprule",
                                         " & ".join(map(tex_escape, header)) + r" \\", r"\midrule", *body,
                                         r"\bottomrule", r"\end{longtable}}"]))

    def equation(self, lines: list[str]) -> None:
        body = " \\\\\n&= ".join(lines)
        self.parts.append(f"$$\n\\begin{{aligned}}\n{body}\n\\end{{aligned}}\n$$" if self.md
                          else f"\\begin{{align*}}\n{body}\n\\end{{align*}}")


def _math(expr: object, values: dict | None = None, factor: bool = False) -> str:
    """LaTeX of an engine expression; long sums break into aligned lines; ``factor``: SymPy's factored form."""
    tree = to_sympy(expr)
    if factor:
        tree = sp.factor(tree)
    return latex(tree, values=values, line_width=LINE) if values else latex(tree, line_width=LINE)


def _count(layers: Expr) -> str:
    """How many layers, bracketed where it is a difference (l - l_a)."""
    return _math(layers) if layers.is_symbol else f"\\left({_math(layers)}\\right)"


def _value(value: int, unit: str) -> str:
    return f"{number(value)}" + (r"\ \text{B}" if unit == "bytes" else "")


def _name(block: str) -> str:
    return r"P_{\text{" + block.replace("_", " ") + "}}"


def _layers(est: SsmEstimate, doc: _Doc, step: int) -> int:
    """One step per layer kind: its parameters term by term, then summed."""
    for block in [blk.name for blk in est.model.graph().blocks if blk.name.endswith("layer")]:
        step += 1
        q = est.quantity(f"parameters_{block}")
        doc.heading(f"Step {step}. Parameters of {LAYER_TITLES[block]}")
        mlp = BAMBA_MLP if est.model.family == "bamba" and block == "mamba_layer" else ""
        doc.text(LAYER_TEXT[block].format(conv_dim=f"{CONV_DIM.evaluate(est.values):,}") + mlp)
        doc.table(["part (graph path)", "formula", "parameters"],
                  [[path, f"${_math(expr, factor=True)}$", f"{value:,}"] for path, expr, value in q.terms])
        doc.equation([f"{_name(block)} &= {_math(q.formula)}", _math(q.formula, est.values), _value(q.value, "")])
    return step


def _whole(est: SsmEstimate, doc: _Doc, step: int) -> int:
    """The model as blocks times their repeats, then its weights."""
    blocks = est.model.graph().blocks
    total, weights = est.quantity("parameters"), est.quantity("weight_bytes")
    doc.heading(f"Step {step + 1}. The whole model")
    head = "the final norm (the LM head is tied to the embeddings)" if est.model.tied else "the final norm and LM head"
    doc.text(f"Embeddings, each kind of layer as many times as the model has it, {head}:")
    rows = [(blk.repeat, _name(blk.name), est.quantity(f"parameters_{blk.name}").value) for blk in blocks]
    symbolic = " + ".join(name if repeat == 1 else f"{_count(repeat)}\\, {name}" for repeat, name, _ in rows)
    numeric = " + ".join(number(v) if repeat == 1 else f"{number(int(repeat.evaluate(est.values)))} \\cdot {number(v)}"
                         for repeat, _, v in rows)
    doc.equation([f"P &= {symbolic}", numeric, _value(total.value, "")])
    doc.text("In the letters of the sizes table, block by block:")
    lines = []
    for blk in blocks:
        alike: dict = {}  # equal terms (q and o, gate, up and down, the two norms) counted once
        for _, expr, _ in est.quantity(f"parameters_{blk.name}").terms:
            alike[expr] = alike.get(expr, 0) + 1
        terms = [_math(count * expr, factor=True) for expr, count in alike.items()]
        rows = [" + ".join(terms[i:i + 3]) for i in range(0, len(terms), 3)]
        inner = " \\\\ &\\qquad + ".join(rows)
        lines.append(inner if blk.repeat == 1 else f"{_count(blk.repeat)}\\, ({inner})")
    doc.equation(["P &= " + " \\\\ &\\quad + ".join(lines)])
    nbytes = weights.formula.evaluate(est.values) // total.value
    doc.heading(f"Step {step + 2}. {weights.title}")
    doc.equation([rf"M_{{\text{{weights}}}} &= {nbytes}\, P", f"{nbytes} \\cdot {number(total.value)}",
                  _value(weights.value, "bytes")])
    return step + 2


def _state(est: SsmEstimate, doc: _Doc, step: int) -> None:
    """The cache a decode step reads: per layer kind, each part's bytes in one layer, times the layers."""
    opts, state = est.opts, est.quantity("state_bytes")
    parts = est.model.state_parts(opts.kv_dtype or opts.dtype)
    doc.heading(f"Step {step + 1}. {state.title}")
    doc.text(f"After a prompt of s = {opts.seq:,} tokens and n = {opts.new_tokens:,} new ones, batch b = {opts.batch:,}. "
             "A Mamba layer's state does not grow with s" + ("; an attention layer's keys and values do." if
                                                              est.model.attention_layers else "."))
    doc.table(["part", "what", "bytes in one layer", "value"],
              [[path, STATE[path], f"${_math(per, factor=True)}$", f"{int(per.evaluate(est.values)):,}"]
               for path, _, per in parts], wrap=1)
    groups: dict = {}
    for _, layers, per in parts:
        groups.setdefault(layers, []).append(per)
    symbolic = " \\\\ &\\quad + ".join(f"{_count(layers)} \\left(" + " + ".join(_math(x, factor=True) for x in pers) + "\\right)"
                          for layers, pers in groups.items())
    numeric = " + ".join(f"{number(int(layers.evaluate(est.values)))} \\cdot \\left("
                         + " + ".join(number(int(x.evaluate(est.values))) for x in pers) + "\\right)"
                         for layers, pers in groups.items())
    doc.equation([rf"M_{{\text{{state}}}} &= {symbolic}", numeric, _value(state.value, "bytes")])
    total = est.quantity("inference_bytes")
    doc.heading(f"Step {step + 2}. Weights plus state")
    doc.equation([r"M &= M_{\text{weights}} + M_{\text{state}}",
                  f"{number(est.value('weight_bytes'))} + {number(state.value)}", _value(total.value, "bytes")])
    doc.text(NOT_DERIVED + ".")


def _document(est: SsmEstimate, fmt: str, command: str) -> str:
    m, doc = est.model, _Doc(fmt)
    title = f"Parameters and {'inference state' if est.opts.mode == 'infer' else 'weights'} of {m.name}"
    doc.text("Generated by", command)
    doc.text(f"Model: {FAMILIES[m.family]}; sizes from {m.source}.")
    doc.heading("Sizes")
    doc.table(["symbol", "meaning", "value"],
              [[f"${by_name(k).latex}$", by_name(k).meaning, f"{v:,}"] for k, v in m.sizes.items()], wrap=1)
    if m.attention_layers:
        doc.text(f"Attention layers (attn_layer_indices, 0-based): {', '.join(map(str, m.attention_layers))}; "
                 f"l_a = {len(m.attention_layers)} of l = {m.sizes['l']}, the others Mamba 2 layers.")
    step = _whole(est, doc, _layers(est, doc, 0))
    if est.opts.mode == "infer":
        _state(est, doc, step)
    body = "\n\n".join(doc.parts)
    if fmt == "md":
        return f"# {title}\n\n{body}\n"
    return "\n".join([r"\documentclass[11pt,a4paper]{article}", r"\usepackage[margin=2cm]{geometry}",
                      r"\usepackage{amsmath}", r"\usepackage{array}", r"\usepackage{booktabs}", r"\usepackage{longtable}",
                      r"\usepackage{parskip}", r"\allowdisplaybreaks", f"\\title{{{tex_escape(title)}}}",
                      r"\author{memderive}", r"\date{}", r"\begin{document}", r"\maketitle", r"\sloppy", "", body,
                      r"\end{document}", ""])
