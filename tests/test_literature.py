"""Every registered published formula carries a citation and is reproduced by the graph."""

from __future__ import annotations

import pytest
import sympy as sp

from memderive.derivations.estimate import estimate
from memderive.derivations.claims.literature import PUBLISHED, Published
from memderive.symbolic.dims_sympy import Psi
from memderive.derivations.references import REFERENCES
from memderive.symbolic.formula import Citation


@pytest.mark.parametrize("entry", PUBLISHED, ids=[e.formula.name for e in PUBLISHED])
def test_formula_has_citation(entry: Published) -> None:
    source = entry.formula.source
    assert isinstance(source, Citation) and source.locus and all(key in REFERENCES for key in source.keys())


@pytest.mark.parametrize("entry", PUBLISHED, ids=[e.formula.name for e in PUBLISHED])
def test_graph_reproduces_published_formula(entry: Published) -> None:
    est = estimate(entry.model, **entry.options)
    q = est.quantity(entry.quantity)
    ours = sp.expand(q.closed_form())
    theirs = entry.formula.expr
    if Psi in theirs.free_symbols:  # model-state formulas are written per parameter held
        theirs = theirs.xreplace({Psi: est.quantity("parameters_per_gpu").closed_form()})
    theirs = sp.expand(theirs.xreplace(q.relations))
    assert sp.expand(ours - theirs - entry.difference) == 0
    assert bool(entry.why) == (entry.difference != 0)
