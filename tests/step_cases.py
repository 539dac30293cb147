"""The measured training steps of the timeline tests, and what memderive derives for each.

A case is a small transformers model (``tests/hf_saved.FAMILIES``, no dropout), an attention kernel, a
shape and a recipe; ``measured`` runs it on CPU (``tests/hf_step.measure_step``: exact bytes of live
tensor storages), ``derived`` builds memderive's graph of the same config under transformers' CPU
layers and runs the step timeline with the recipe the options give. ``python benchmarks/cpu_step_peak.py``
prints every case's derived and measured peak.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from memderive.derivations.models.implementations import hf_layers
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options
from memderive.derivations.quantities.step import step_recipe
from memderive.symbolic.dims import b, s
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.timeline import StepRecipe, Timeline, step_timeline
from tests.hf_saved import Shape
from tests.hf_step import Measured, config_for_step, measure_step
from tests.hf_step import StepRecipe as Run

__all__ = ["Case", "CASES", "measured", "derived", "recipe_for"]


@dataclass(frozen=True)
class Case:
    family: str
    attention: str
    shape: Shape
    precision: str = "master"

    def __str__(self) -> str:
        return f"{self.family}-{self.attention}-b{self.shape.b}s{self.shape.s}-{self.precision}"


SMALL, LARGER = Shape(2, 24), Shape(4, 64)
#: Each family and kernel at two shapes and both precisions: peaks in the optimizer step, the loss's forward
#: and backward, and a layer's backward.
CASES = tuple(Case(f, a, z, p) for f in ("llama-gqa", "gpt2") for a in ("eager", "sdpa")
              for z, p in ((SMALL, "master"), (SMALL, "pure"), (LARGER, "pure")))


@functools.cache
def measured(case: Case) -> Measured:
    return measure_step(case.family, case.attention, case.shape, Run(case.precision))


def recipe_for(case: Case, values: dict, device: str = "cpu") -> StepRecipe:
    """The options' recipe; ``pure`` until ``--precision`` exists: 16-bit states, no master (written out)."""
    recipe = step_recipe(Options(mode="train", batch=case.shape.b, seq=case.shape.s), values, device)
    if case.precision == "pure":
        bf16 = dtype("bf16")
        recipe = StepRecipe(weight=bf16, master=None, states=(bf16, bf16), step_scalars=recipe.step_scalars,
                            granularity=recipe.granularity)
    return recipe


@functools.cache
def derived(case: Case, device: str = "cpu") -> Timeline:
    model = resolve_model(config_for_step(case.family, case.attention))
    graph = hf_layers(model, case.attention, device)(model.graph("bf16", dropout=False))
    values = {**model.values(), b: case.shape.b, s: case.shape.s}
    return step_timeline(graph, values, recipe_for(case, values, device))
