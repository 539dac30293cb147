"""Other calculators' accounting as named conventions, side by side with memderive's.

Each convention reproduces one tool's own figures (parameters, model states, activations, KV cache,
total) for the same model and options, from the same graph where the tool's rule is a change to it
(vocabulary padded, biases or positions dropped, a tied embedding, two MLP matrices) and from the
tool's own arithmetic, cited by file and commit, where it is not. ``Figures.why`` says, per column,
which term makes the figure differ from memderive's; ``gaps`` lists every difference over 1% with
that reason, and a difference without one is a bug (``tests/test_conventions.py``).

>>> sorted(CONVENTIONS)
['accelerate', 'deepspeed', 'eleuther', 'llm-analysis', 'megatron', 'memderive']
"""

from __future__ import annotations

from memderive.derivations.conventions import tools
from memderive.derivations.conventions.tools import Figures, NotModelled
from memderive.derivations.models.model import Model
from memderive.derivations.options import Options

__all__ = ["Figures", "COLUMNS", "CONVENTIONS", "figures", "compare", "gaps", "ConventionError"]

COLUMNS = ("parameters", "model_states", "activations", "kv_cache", "total")


class ConventionError(ValueError):
    """An unknown convention name."""


def _registry():
    return {"memderive": tools.memderive, "megatron": tools.megatron, "deepspeed": tools.deepspeed,
            "llm-analysis": tools.llm_analysis, "eleuther": tools.eleuther, "accelerate": tools.accelerate}


CONVENTIONS = ("memderive", "megatron", "deepspeed", "llm-analysis", "eleuther", "accelerate")


def figures(name: str, model: Model, opts: Options) -> Figures:
    """The figures of convention ``name`` for ``model`` under ``opts`` (train or infer)."""
    if name not in CONVENTIONS:
        raise ConventionError(f"--convention must be one of {', '.join(CONVENTIONS)}, got {name!r}")
    return _registry()[name](model, opts)


def compare(model: Model, opts: Options,
            names: tuple[str, ...] = CONVENTIONS) -> tuple[list[Figures], list[tuple[str, str]]]:
    """Figures of each convention, and ``(name, why)`` for those without a figure in this mode."""
    rows, skipped = [], []
    for name in names:
        try:
            rows.append(figures(name, model, opts))
        except NotModelled as exc:
            skipped.append((name, str(exc)))
    return rows, skipped


def gaps(ours: Figures, other: Figures, threshold: float = 0.01) -> list[tuple[str, int, str]]:
    """``(column, difference, reason)`` for each column differing from ours by more than ``threshold``."""
    out = []
    for col in COLUMNS:
        mine, theirs = ours.column(col), other.column(col)
        if mine is None or theirs is None:
            continue
        if abs(theirs - mine) > threshold * max(abs(mine), 1):
            out.append((col, theirs - mine, other.why.get(col, "")))
    return out
