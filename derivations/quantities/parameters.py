"""Parameter quantities of every mode: the whole model, one layer and, with routed experts, what one
token uses (the ``k`` of ``E`` experts it is routed to).

>>> from memderive.derivations.models.presets import preset
>>> model = preset("gpt2")
>>> [str(q.closed_form()) for q in parameter_quantities(model.graph())][1]
'12*h**2 + 13*h'
"""

from __future__ import annotations

from typing import Any

from memderive.derivations.quantity import Quantity
from memderive.symbolic.derive import parameters
from memderive.symbolic.dims import l
from memderive.symbolic.experts import ActiveExperts, has_experts
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph

__all__ = ["parameter_quantities", "MOE_CITATION", "ACTIVE_DEFINITION"]

MOE_CITATION = Citation("lepikhin-2020", "top-k routing over E experts", also=(Citation("dai-2024", "shared experts"),))
ACTIVE_DEFINITION = ("active parameters: the total less, in each MoE layer, the E - k routed experts a token does not "
                     "use (router, shared experts, attention, embeddings and head count)")


def _collected_in_l(expr: Any) -> Any:
    """``l(...) + ...``; with l_d dense layers among MoE ones, ``l(MoE layer) + l_d(dense - MoE MLP) + ...``."""
    import sympy

    from memderive.symbolic.dims_sympy import l_d
    from memderive.symbolic.simplify import collect_in

    if l_d in sympy.sympify(expr).free_symbols:
        return sympy.collect(sympy.expand(expr), [sympy.sympify(l), l_d])
    return collect_in(expr, l)


def parameter_quantities(graph: Graph) -> list[Quantity]:
    """``parameters``, ``parameters_per_layer`` and, with routed experts, ``active_parameters``."""
    rel = graph.relations
    out = [
        Quantity("parameters", "Parameters", parameters(graph), rel, form=_collected_in_l),
        Quantity("parameters_per_layer", "Parameters per layer", parameters(graph, ["layer"], per_repeat=True), rel),
    ]
    if has_experts(graph):
        out.append(Quantity("active_parameters", "Active parameters (one token's k of E routed experts)",
                            parameters(ActiveExperts()(graph)), rel, MOE_CITATION, (ACTIVE_DEFINITION,),
                            form=_collected_in_l))
    return out
