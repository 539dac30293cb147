"""The report of a traced model (``derivations.quantities.traced``): its exact figures and where they come from."""

from __future__ import annotations

import re

from memderive.derivations.quantities.traced import HAND_WRITTEN_FOR_MEGATRON, TracedEstimate
from memderive.derivations.quantities.traced_strategies import Strategies
from memderive.derivations.quantities.traced_symbolic import Fallback, Symbolic
from memderive.documents.latex import tex_escape
from memderive.documents.units import format_count

#: Marks a formula inside a line (``_formula``): printed as it is in text and Markdown, as math in LaTeX.
_OPEN, _CLOSE = "\x01", "\x02"


def _formula(text: str) -> str:
    return f"{_OPEN}{text}{_CLOSE}"


def _as_function(fit: object, degree: str) -> str:
    """A traced figure as a function of b and s: the symbolic expression (with the guards it holds under) or the
    polynomial fit (with why it is not symbolic), else why there is none."""
    if not fit:
        why = f"; not symbolic: {fit.why}" if isinstance(fit, Fallback) else ""
        return f"no polynomial of degree {degree} fits (exact at this b and s only){why}"
    if isinstance(fit, (Symbolic, Fallback)):
        return _formula(fit.expression) + fit.note
    return _formula(str(fit))


def _bytes(n: int) -> str:
    return f"{n:,} B = {n / 1e9:.2f} GB = {n / 2**30:.2f} GiB"


def layout(done: Strategies) -> str:
    """The GPU a traced estimate's bytes are of, in words."""
    parts = [f"tensor-parallel rank 0 of {done.tp}"] if done.tp > 1 else []
    if done.dp > 1 or done.zero:
        parts.append(f"data-parallel rank of {done.dp}" + (f", ZeRO-{done.zero}" if done.zero else ""))
    return "one GPU, " + ("; ".join(parts) if parts else "unsharded")


def strategy_lines(est: TracedEstimate, bullet: str) -> list[str]:
    """What the options changed on the traced model (transformers' and PEFT's own switches) and its FLOPs."""
    done, lines = est.strategies, []
    if done.recompute != "none":
        lines.append(f"{bullet}recompute {done.recompute}: transformers' activation_checkpointing_enable() (each "
                     "decoder layer under torch.utils.checkpoint, non-reentrant): the saved tensors above are traced "
                     "with it")
    if done.lora is not None:
        lines.append(f"{bullet}{done.lora}: peft.get_peft_model (PEFT's defaults: fp32 adapters, base frozen); "
                     f"trainable parameters {done.trainable:,} of {done.with_adapters:,} "
                     f"({100 * done.trainable / done.with_adapters:.4f}%, as get_nb_trainable_parameters counts)")
    if done.frozen is not None:
        lines.append(f"{bullet}{done.frozen}: requires_grad_(False) on the rest (no gradients or optimizer states); "
                     f"trainable parameters {done.trainable:,} of {done.with_adapters:,}")
    if done.tp > 1:
        lines.append(f"{bullet}--tp {done.tp}: rank 0 holds {done.tp_parameters:,} parameters under the model's "
                     "tp_plan:")
        lines += [f"{bullet}  {key} ({style}) {n:,}" for key, style, n in done.tp_rows]
    if done.flops_error is not None:
        lines.append(f"{bullet}FLOPs not counted: {done.flops_error}")
    if done.flops:
        lines.append(f"{bullet}FLOPs (torch.utils.flop_counter.FlopCounterMode over the fake eager "
                     f"{'forward and backward' if est.mode == 'train' else 'prefill'}: matmuls and attention):")
        for _, label, value, formula in done.flops:
            lines.append(f"{bullet}  {label} {format_count(value)} FLOPs" + (f" = {_formula(formula)}" if formula else
                                                                              ""))
    return [""] + lines if lines else []


def traced_text(est: TracedEstimate, markdown: bool = False) -> str:
    """Text (or Markdown) of a traced estimate: parameters by module path, then the mode's bytes with formulas."""
    return _lines(est, markdown).replace(_OPEN, "").replace(_CLOSE, "")


def _tex_formula(text: str) -> str:
    """A polynomial as ``Polynomial`` prints it (``48*b*s**2 + (1/2)*s``) in LaTeX math."""
    text = re.sub(r"\((-?\d+)/(\d+)\)", r"\\tfrac{\1}{\2}", text)
    return "$" + text.replace("**2", "^{2}").replace("*", r"\,").replace(">=", r"\geq") + "$"


def traced_latex(est: TracedEstimate, command: str) -> str:
    """A LaTeX document of a traced estimate: the Markdown report's lines, its bullets as lists, its formulas as
    math; ``command``: the command line that generated it."""
    body, listed = [], False
    for line in _lines(est, True).splitlines():
        item = line.startswith("- ")
        if item and not listed:
            body.append(r"\begin{itemize}")
        elif not item and listed:
            body.append(r"\end{itemize}")
        listed = item
        parts = line[2:].split(_OPEN) if item else line.split(_OPEN)
        tex = tex_escape(parts[0]) + "".join(_tex_formula(f) + tex_escape(rest) for f, rest in
                                             (p.split(_CLOSE) for p in parts[1:]))
        body += [r"\item " + (r"\quad " if line.startswith("-   ") else "") + tex.strip()] if item else [tex, ""]
    if listed:
        body.append(r"\end{itemize}")
    title = f"Traced memory of {est.name}"
    return "\n".join([r"\documentclass[11pt,a4paper]{article}", r"\usepackage[margin=2cm]{geometry}",
                      r"\usepackage{amsmath}", r"\usepackage{parskip}", f"\\title{{{tex_escape(title)}}}",
                      r"\author{memderive}", r"\date{}", r"\begin{document}", r"\maketitle", r"\sloppy", "",
                      tex_escape(f"Generated by {command}"), "", *body, r"\end{document}", ""])


def _lines(est: TracedEstimate, markdown: bool) -> str:
    bullet = "- " if markdown else "  "
    why = ("its hand-written graph is Megatron-Core's" if est.model_type in HAND_WRITTEN_FOR_MEGATRON
           else "no hand-written family")
    lines = [f"model: {est.name} ({est.model_type}; traced from transformers {est.version}'s modeling code, {why})"]
    if est.mode != "params":
        lines.append(f"inputs: mode {est.mode}, batch {est.batch or 1}, seq {est.seq:,}, attention {est.attention}")
        if est.encoder is not None:
            lines.append(f"encoder-decoder: the encoder reads {est.encoder}")
        if est.images is not None:
            lines.append(f"vision-language: {est.images}")
    lines += ["", "parameters (module tree on the meta device; a tied weight counted once):"]
    for path, what, count, each in est.parameters.groups:
        lines.append(f"{bullet}{path or '(root)'}: " + (f"{count} x {what} of {each:,} = {count * each:,}"
                                                        if count > 1 else f"{what} {each:,}"))
    for name, of in est.parameters.tied:
        lines.append(f"{bullet}{name} is {of} (tied, counted once)")
    if est.parts:
        lines.append(f"{bullet}per part: " + ", ".join(f"{part} {n:,}" for part, n in est.parts))
    lines.append(f"{bullet}Parameters {est.parameters.total:,}")
    if est.states:
        lines += ["", f"training ({layout(est.strategies)}):"]
        lines += [f"{bullet}{name.replace('_', ' ')} {_bytes(value)}" for name, value in est.states]
        states = sum(v for _, v in est.states)
        lines.append(f"{bullet}Model states {_bytes(states)}")
    if est.saved is not None:
        lines.append(f"{bullet}Saved activations {_bytes(est.saved)} (autograd's saved tensors of a {est.attention} "
                     "training forward on fake CPU tensors, each storage once)")
        lines.append(f"{bullet}  as a function of b and s: " + _as_function(est.saved_fit, "1 in b and 2 in s"))
        lines.append(f"{bullet}Training memory {_bytes(est.saved + states)} (model states + saved activations)")
    if est.cache is not None:
        lines += ["", f"inference ({layout(est.strategies) if est.strategies.tp > 1 else 'one GPU'}):"]
        lines.append(f"{bullet}Weights {_bytes(est.weights)}" + (f" (as the checkpoint stores them: {est.weight_scheme})"
                                                                 if est.weight_scheme else ""))
        lines += [f"{bullet}  {part} {n:,} B" for part, n in est.weight_parts]
        lines.append(f"{bullet}Cache {_bytes(est.cache.total)} ({est.cache.kind} after a prefill of {est.seq:,} tokens "
                     "and one decode step" + (f"; the cross-attention's of {est.encoder_length:,} encoder positions"
                                              if est.encoder_length is not None else "") + ")")
        lines += [f"{bullet}  {holder} ({dt}) {n:,} B" for holder, dt, n in est.cache.parts]
        lines.append(f"{bullet}  as a function of b and s (prefill length): "
                     + _as_function(est.cache_fit, "1 in b and s"))
        lines.append(f"{bullet}Weights + cache {_bytes(est.weights + est.cache.total)}")
    lines += strategy_lines(est, bullet)
    return "\n".join(lines)
