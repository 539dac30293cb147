"""The part of a derived quantity a claim speaks about: its nodes, per layer or per matrix, bits per weight.

A ``QuantitySpec`` may keep or leave out nodes (``params.non_embedding``; ``params.total[attn]``), divide by
the layers (``flops.attention_per_layer``), keep one adapted matrix of one layer (``params.lora_per_matrix``)
or substitute our symbols (``[a_kv=a]``). Everything stays a breakdown of graph terms, so a gap is still
traced to the nodes it comes from. ``weights.bits_per_parameter`` is the stored bits per weight of the
layers' linear matrices, from the same per-tensor rule the weights are priced by.

>>> path_matches("layer/attn/core/forward", "attn/core"), path_matches("layer/attn/q_proj.lora_A", "q_proj")
(True, True)
>>> path_matches("embed/tokens", "attn")
False
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from memderive.derivations.claims.spec import ClaimError, QuantitySpec
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic import dims_sympy as ds
from memderive.derivations.quantities.inference import linear_weight_bytes, serving_dtypes
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")

__all__ = ["path_matches", "narrow", "bits_quantity", "with_adapters"]


def path_matches(path: str, node: str) -> bool:
    """Whether a breakdown path lies under ``node``: its components in a row (the last one a prefix
    before a dot, ``q_proj`` of ``q_proj.lora_A``)."""
    parts, want = path.split("/"), node.strip("/").split("/")
    for i in range(len(parts) - len(want) + 1):
        seg = parts[i:i + len(want)]
        if seg[:-1] == want[:-1] and (seg[-1] == want[-1] or seg[-1].startswith(want[-1] + ".")):
            return True
    return False


def narrow(spec: QuantitySpec, q: Quantity, model_name: str) -> Quantity:
    """``q`` (SymPy terms) cut to what ``spec`` asks for; a selection that keeps nothing is an error
    naming the nodes there are."""
    terms = list(q.breakdown.terms)
    if spec.select or spec.exclude:
        kept = [t for t in terms if (not spec.select or any(path_matches(t.path, n) for n in spec.select))
                and not any(path_matches(t.path, n) for n in spec.exclude)]
        if not kept:
            nodes = ", ".join(dict.fromkeys(t.path.rsplit("/", 1)[0] for t in terms))
            raise ClaimError(f"{spec.name}: no term of {model_name}'s {q.key} is under "
                             f"{', '.join(spec.select) or 'what is left'}; its nodes are {nodes}")
        terms = kept
    if spec.substitute:
        subs, ours = {}, ds.symbols()
        for name, value in spec.substitute:
            if name not in ours or value not in ours:
                raise ClaimError(f"substitution {name}={value} in {spec.name}: both sides are our symbols "
                                 f"({', '.join(ours)}), e.g. [a_kv=a]")
            subs[ours[name]] = ours[value]
        terms = [Term(t.path, sp.sympify(t.expr).xreplace(subs)) for t in terms]
    title = q.title
    if spec.per == "layer":
        terms, title = [Term(t.path, t.expr / ds.l) for t in terms], f"{q.title}, one layer"
    elif spec.per == "matrix":
        terms, title = _one_matrix(spec, terms, q)
    return replace(q, breakdown=Breakdown(tuple(terms), q.unit), title=title, form=None)


def _one_matrix(spec: QuantitySpec, terms: list[Term], q: Quantity) -> tuple[list[Term], str]:
    """The adapter terms of one adapted matrix in one layer (all blocks' copies over l); the adapted
    matrices must agree, or the claim is about one of them (``--lora-targets q_proj``)."""
    modules: dict[str, list[Term]] = {}
    for term in terms:
        modules.setdefault(term.path.rsplit("/", 1)[-1].split(".")[0], []).append(term)
    sizes = {name: sp.expand(sp.Add(*(t.expr for t in group)).xreplace(dict(q.relations)) / ds.l)
             for name, group in modules.items()}
    if len(set(sizes.values())) > 1:
        listed = "; ".join(f"{name}: {size}" for name, size in sizes.items())
        raise ClaimError(f"{spec.name}: the adapted matrices differ ({listed}); give one with --lora-targets")
    name = next(iter(modules))
    return [Term(t.path, t.expr / ds.l) for t in modules[name]], f"{q.title}: one adapted matrix ({name}), one layer"


def bits_quantity(q: Quantity, graph: Any, options: Any) -> Quantity:
    """Bits per weight of the layers' linear matrices, as stored: 8 x (codes + scales) / weights."""
    dtypes = serving_dtypes(options)
    size, count = linear_weight_bytes(graph, dtypes)
    ratio = 8 * sp.sympify(size) / sp.sympify(count)
    return replace(q, key="weight_bits_per_parameter", title=f"Bits per weight of the linear layers ({dtypes[0]})",
                   breakdown=Breakdown((Term("weights/layer/linear", ratio),), "bits"), form=None)


def with_adapters(q: Quantity, trainable: Quantity) -> Quantity:
    """The model's parameters with the adapters LoRA adds (PEFT's "all params": the wrapped model's
    ``parameters()``); the estimate's ``parameters`` counts the pretrained model alone."""
    adapters = tuple(t for t in trainable.breakdown.terms if ".lora_" in t.path or t.path.endswith(".dora"))
    if not adapters:
        return q
    return replace(q, breakdown=Breakdown(q.breakdown.terms + adapters, q.unit), form=None,
                   title=f"{q.title} with the adapters (as PEFT counts all params)")
