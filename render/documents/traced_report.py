"""The report of a traced model (``derivations.quantities.traced``): its exact figures and where they come from."""

from __future__ import annotations

from memderive.derivations.quantities.traced import TracedEstimate
from memderive.derivations.quantities.traced_symbolic import Fallback


def _bytes(n: int) -> str:
    return f"{n:,} B = {n / 1e9:.2f} GB = {n / 2**30:.2f} GiB"


def _formula(fit: object, degree: str) -> str:
    """A traced figure as a function of b and s: the symbolic expression (with the guards it holds under) or the
    polynomial fit (with why it is not symbolic), else why there is none."""
    if fit:
        return str(fit)
    why = f"; not symbolic: {fit.why}" if isinstance(fit, Fallback) else ""
    return f"no polynomial of degree {degree} fits (exact at this b and s only){why}"


def traced_text(est: TracedEstimate, markdown: bool = False) -> str:
    """Text (or Markdown) of a traced estimate: parameters by module path, then the mode's bytes with formulas."""
    bullet = "- " if markdown else "  "
    lines = [f"model: {est.name} ({est.model_type}; traced from transformers {est.version}'s modeling code, "
             "no hand-written family)"]
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
        lines += ["", "training (one GPU, unsharded):"]
        lines += [f"{bullet}{name.replace('_', ' ')} {_bytes(value)}" for name, value in est.states]
        states = sum(v for _, v in est.states)
        lines.append(f"{bullet}Model states {_bytes(states)}")
    if est.saved is not None:
        lines.append(f"{bullet}Saved activations {_bytes(est.saved)} (autograd's saved tensors of a {est.attention} "
                     "training forward on fake CPU tensors, each storage once)")
        lines.append(f"{bullet}  as a function of b and s: " + _formula(est.saved_fit, "1 in b and 2 in s"))
        lines.append(f"{bullet}Training memory {_bytes(est.saved + states)} (model states + saved activations)")
    if est.cache is not None:
        lines += ["", "inference (one GPU):"]
        lines.append(f"{bullet}Weights {_bytes(est.weights)}")
        lines.append(f"{bullet}Cache {_bytes(est.cache.total)} ({est.cache.kind} after a prefill of {est.seq:,} tokens "
                     "and one decode step" + (f"; the cross-attention's of {est.encoder_length:,} encoder positions"
                                              if est.encoder_length is not None else "") + ")")
        lines += [f"{bullet}  {holder} ({dt}) {n:,} B" for holder, dt, n in est.cache.parts]
        lines.append(f"{bullet}  as a function of b and s (prefill length): " + _formula(est.cache_fit, "1 in b and s"))
        lines.append(f"{bullet}Weights + cache {_bytes(est.weights + est.cache.total)}")
    return "\n".join(lines)
