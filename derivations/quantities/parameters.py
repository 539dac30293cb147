"""Parameter quantities of every mode: the whole model, one layer and, with routed experts, what one
token uses (the ``k`` of ``E`` experts it is routed to).

>>> from memderive.derivations.models.presets import preset
>>> model = preset("gpt2")
>>> [str(q.closed_form()) for q in parameter_quantities(model.graph())][1]
'12*h**2 + 13*h'
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.memo import per_graph
from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import Breakdown, Term, parameters
from memderive.symbolic.dims import l, l_d
from memderive.symbolic.experts import ActiveExperts, has_experts
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph
from memderive.symbolic.simplify import collect_in
from memderive.symbolic import dims_sympy
from memderive.symbolic.lazy import lazy

sympy = lazy("sympy")

__all__ = ["parameter_quantities", "graph_parameters", "MOE_CITATION", "ACTIVE_DEFINITION", "CARD_DEFINITION", "CARD_CITATION"]

MOE_CITATION = Citation("lepikhin-2020", "top-k routing over E experts", also=(Citation("dai-2024", "shared experts"),))
ACTIVE_DEFINITION = ("active parameters: the total less, in each MoE layer, the E - k routed experts a token does not "
                     "use (router, shared experts, attention, embeddings and head count)")
#: The gpt-oss model card's definition (openai-2025-gpt-oss, Table 1: 3.61B of gpt-oss-20b's 20.91B).
CARD_DEFINITION = ("active parameters as the gpt-oss model card counts them: the total less the E - k routed experts "
                   "a token does not use and less the input embedding (a lookup; the unembedding counts)")
CARD_CITATION = Citation("openai-2025-gpt-oss", "Table 1: unembedding parameters counted as active, embeddings not")


#: ``parameters`` once per graph object: the structures of a layout that share a graph (its ZeRO stages) share the
#: breakdown, so their numbers are one evaluation (``search.columns``).
graph_parameters = per_graph(parameters)


def _collected_in_l(expr: Any) -> Any:
    """``l(...) + ...``; with l_d dense layers among MoE ones, ``l(MoE layer) + l_d(dense - MoE MLP) + ...``."""
    l_d = dims_sympy.l_d
    if l_d in sympy.sympify(expr).free_symbols:
        return sympy.collect(sympy.expand(expr), [sympy.sympify(l), l_d])
    return collect_in(expr, l)


def _per_layer(graph: Graph) -> list[Quantity]:
    """One layer's parameters; where l_d of the l layers keep a dense MLP (their ops hold share l_d/l of the
    block, the MoE ops (l - l_d)/l), one quantity per kind of layer, each exact: an MoE layer (l_d -> 0) and a
    dense layer (l_d -> l), never their average."""
    layer = parameters(graph, ["layer"], per_repeat=True)
    if l_d not in layer.total.free_symbols:
        return [Quantity("parameters_per_layer", "Parameters per layer", layer, graph.relations)]

    def kind(value: Any) -> Breakdown:
        terms = ((t.path, t.expr.subs({l_d: value})) for t in layer.terms)
        return Breakdown(tuple(Term(path, expr) for path, expr in terms if expr != 0), layer.unit)

    return [Quantity("parameters_per_layer", "Parameters per MoE layer (l - l_d of the l layers)", kind(0),
                     graph.relations),
            Quantity("parameters_per_dense_layer", "Parameters per dense layer (l_d of the l layers)", kind(l),
                     graph.relations)]


def parameter_quantities(graph: Graph, active_embedding: bool = True) -> list[Quantity]:
    """``parameters``, ``parameters_per_layer`` and, with routed experts, ``active_parameters``: with the input
    embedding, or without it as gpt-oss's model card counts (``active_embedding``, ``Moe.active_embedding``)."""
    rel = graph.relations
    out = [Quantity("parameters", "Parameters", parameters(graph), rel, form=_collected_in_l), *_per_layer(graph)]
    if has_experts(graph):
        title = "Active parameters (one token's k of E routed experts" + (
            ")" if active_embedding else "; input embedding not counted, as the model card counts)")
        out.append(Quantity("active_parameters", title, parameters(ActiveExperts(active_embedding)(graph)), rel,
                            MOE_CITATION if active_embedding else Citation(CARD_CITATION.key, CARD_CITATION.locus,
                                                                           also=(MOE_CITATION,)),
                            (ACTIVE_DEFINITION if active_embedding else CARD_DEFINITION,), form=_collected_in_l))
    return out
