"""The memory of one training step over time, derived from the graph: forward, loss, backward, update.

Each op's ``program`` (``symbolic.kernels``) says which ATen calls its forward makes and how long
Python holds their results; ``symbolic.kernels.KINDS`` says what each call saves and what its backward
allocates. ``step_timeline`` runs them as PyTorch runs a step:

* before the step: weights, optimizer states (and an fp32 master copy), buffers and the batch;
* forward: block by block, each call's outputs are allocated, the tensors its node saves are held, and
  a result is freed once its last reader has run and no Python variable holds it;
* backward: nodes run in reverse creation order (the autograd engine's ready queue prefers the node
  created last); each allocates its temporaries and its input gradients, the engine reduces and casts
  a gradient to its input (``validate_outputs``), then frees the incoming gradient and the node's saved
  tensors; gradients reaching one tensor twice are summed into a new tensor; a parameter's first
  gradient is stolen as ``.grad``, a second one added in place (``AccumulateGrad``);
* update: 16-bit gradients copied to fp32 for a master copy, the optimizer's temporaries, the
  gradients freed (``zero_grad(set_to_none=True)``). With the update in backward (torchtune's
  ``optimizer_in_bwd``) each parameter is updated and its gradient freed as it is accumulated.

Every allocation is a moment; ``peak_bytes`` is the high-water mark of allocated memory (what
``torch.cuda.max_memory_allocated`` reports) and ``peak_at`` the moment it is reached. On CUDA the
caching allocator rounds every block up to 512 bytes (``granularity``). Numbers are exact integers; no
SymPy runs (the breakdown at the peak is an ``Expr`` sum of the tensors then alive).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.expr import ceiling
from memderive.symbolic.graph import Graph
from memderive.symbolic.step_run import UPDATES, Moment, Run, StepRecipe, Stop
from memderive.symbolic.tensor import Tensor

__all__ = ["StepRecipe", "Moment", "Timeline", "step_timeline", "moment_name", "UPDATES", "PHASES"]

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True, slots=True)
class Timeline:
    """Every moment of a step, its baseline (states, buffers and batch before the step) and its peak.

    ``live_at_peak``: the breakdown of what is allocated at the peak, one term per (block, op, tensor)
    with its count over layers, so the peak's closed form is read from the graph.
    """

    moments: tuple[Moment, ...]
    baseline: int
    peak_bytes: int
    peak_index: int
    live_at_peak: Breakdown

    @property
    def peak(self) -> Moment:
        return self.moments[self.peak_index]

    @property
    def peak_at(self) -> str:
        """The peak's moment in words: ``loss (forward)``, ``backward of layer 3 mlp/act``, ``optimizer step``."""
        return moment_name(self.peak)

    def phase_peaks(self) -> dict[str, int]:
        """The high-water mark within each phase."""
        out: dict[str, int] = {}
        for m in self.moments:
            out[m.phase] = max(out.get(m.phase, 0), m.bytes)
        return out

    def summary(self) -> list[dict[str, Any]]:
        """One entry per op run (forward or backward) and per update: its highest and last bytes and its
        largest allocation, in order (the JSON timeline)."""
        out: list[dict[str, Any]] = []
        for m in self.moments:
            name = moment_name(m)
            if not out or out[-1]["at"] != name:
                out.append({"phase": m.phase, "at": name, "peak_bytes": m.bytes, "bytes": m.bytes,
                            "largest": "", "largest_bytes": 0})
            entry = out[-1]
            entry["peak_bytes"], entry["bytes"] = max(entry["peak_bytes"], m.bytes), m.bytes
            if m.change > entry["largest_bytes"]:
                entry["largest"], entry["largest_bytes"] = m.tensor, m.change
        return out


def moment_name(m: Moment) -> str:
    """``forward of layer 3 mlp/act`` (layers counted from 0), ``loss (backward)``, ``optimizer step``."""
    if m.phase == "optimizer" or m.where in ("before the step", "end of step"):
        return m.where
    scope, _, path = m.where.partition(" ")
    if scope == "head" and path.startswith("loss"):
        return f"loss ({m.phase})"
    block = scope.rstrip("0123456789")
    index = scope[len(block):]
    name = f"{block} {index} {path}" if index else f"{scope} {path}" if path else scope
    return f"{m.phase} of {name}" if m.phase == "forward" or m.phase == "backward" else name


def step_timeline(graph: Graph, values: Mapping[Any, int], recipe: StepRecipe | None = None) -> Timeline:
    """The step's moments, baseline and peak (see the module docstring).

    Args:
        graph: the graph as trained (strategies applied); ops with a ``program`` run it, others are one
            fused call each.
        values: every size symbol bound to an integer.
        recipe: model states and the update.
    """
    recipe = recipe or StepRecipe()
    if recipe.recompute:
        # lazy: transformers' op programs (~5% of a cold estimate), for a step that recomputes only
        from memderive.symbolic.hf_programs import without_cache

        graph = without_cache(graph)
    run = _run(graph, values, recipe, None)
    peak = max(range(len(run.moments)), key=lambda i: run.moments[i].bytes)
    replay = _run(graph, values, recipe, peak)
    live = _live_breakdown(replay)
    return Timeline(tuple(run.moments), run.baseline, run.moments[peak].bytes, peak, live)


def _run(graph: Graph, values: Mapping[Any, int], recipe: StepRecipe, stop: int | None) -> Run:
    run = Run(graph, values, recipe, stop)
    try:
        run.run()
    except Stop:
        pass
    return run


def _live_breakdown(run: Run) -> Breakdown:
    """What is allocated at the replay's stop: one term per (what, where made, tensor), counted over layers
    (``activations/layer/mlp/act:mlp/act.out`` with its count of layers as the coefficient)."""
    counts: Counter = Counter()
    sample: dict[tuple[str, str, str], Tensor] = {}
    for sid, entry in run.store.items():
        scope, _, path = entry.where.partition(" ")
        block = scope.rstrip("0123456789") or scope
        label = (run.category(sid), f"{block}/{path}" if path else block, entry.tensor.name)
        counts[label] += 1
        sample[label] = entry.tensor
    g = run.recipe.granularity
    terms = []
    for label, n in counts.items():
        t = sample[label]
        size = t.nbytes if g == 1 else g * ceiling(t.nbytes / g)
        terms.append(Term(f"{label[0]}/{label[1]}:{label[2]}", n * size))
    return Breakdown(tuple(sorted(terms, key=lambda term: term.path)), "bytes")
