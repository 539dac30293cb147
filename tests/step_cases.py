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

from memderive.derivations.models.implementations import float8_layers, hf_layers
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options
from memderive.derivations.quantities.step import step_recipe
from memderive.symbolic.dims import b, s
from memderive.symbolic.timeline import StepRecipe, Timeline, step_timeline
from tests.hf_saved import Shape
from tests.hf_step import Measured, config_for_step, measure_step
from tests.hf_step import StepRecipe as Run

__all__ = ["Case", "CASES", "FP8_CASES", "measured", "derived", "recipe_for"]


@dataclass(frozen=True)
class Case:
    family: str
    attention: str
    shape: Shape
    precision: str = "master"
    in_backward: bool = False
    loss_chunks: int = 1
    fp8: str = "none"  # torchao's Float8Linear recipe (tests/hf_step.to_float8; symbolic.float8)
    recompute: bool = False
    update: str = "foreach"  # torch's AdamW: foreach, fused or for-loop (--optimizer-impl)

    def __str__(self) -> str:
        return (f"{self.family}-{self.attention}-b{self.shape.b}s{self.shape.s}-{self.precision}"
                + ("-in-backward" if self.in_backward else "")
                + (f"-loss-chunks{self.loss_chunks}" if self.loss_chunks > 1 else "")
                + ("" if self.fp8 == "none" else f"-fp8-{self.fp8}")
                + ("-recompute" if self.recompute else "")
                + ("" if self.update == "foreach" else f"-{self.update}"))


SMALL, LARGER = Shape(2, 24), Shape(4, 64)
#: Each family and kernel at two shapes and both precisions: peaks in the optimizer step, the loss's forward
#: and backward, and a layer's backward.
#: With the optimizer in backward: each family and kernel, both precisions. With the loss in chunks: below.
CASES = tuple(Case(f, a, z, p) for f in ("llama-gqa", "gpt2") for a in ("eager", "sdpa")
              for z, p in ((SMALL, "master"), (SMALL, "pure"), (LARGER, "pure"))) + tuple(
    Case(f, a, SMALL, p, in_backward=True) for f in ("llama-gqa", "gpt2") for a in ("eager", "sdpa")
    for p in ("master", "pure")) + tuple(
    # torchtune's chunked output and loss (--loss-chunks): each family and kernel, at the small shape and at the
    # larger one with the optimizer in backward (its peak in the loss or the head's backward); one at b = 1
    # (the chunks of the hidden states and labels are contiguous: views, no copies)
    Case(f, a, z, "pure", in_backward=z == LARGER, loss_chunks=n) for f in ("llama-gqa", "gpt2")
    for a in ("eager", "sdpa") for z, n in ((SMALL, 4), (LARGER, 8))) + (
    Case("llama-gqa", "sdpa", Shape(1, 24), "pure", loss_chunks=4),) + tuple(
    # transformers' activation checkpointing (--recompute full): each family and kernel at the small shape (peak in
    # the update) and at the larger one with the optimizer in backward and the loss in chunks (peak inside a
    # layer's recomputation); LLaMA with as many K/V heads as heads (matmul copies the strided k and v itself)
    Case(f, a, z, "pure", in_backward=z == LARGER, loss_chunks=8 if z == LARGER else 1, recompute=True)
    for f in ("llama-gqa", "gpt2") for a in ("eager", "sdpa") for z in (SMALL, LARGER)) + (
    Case("llama-mha", "eager", LARGER, "pure", in_backward=True, recompute=True),) + tuple(
    # torch's fused AdamW (no temporaries; step counts on the device) and its for-loop (one parameter's
    # temporaries at a time): each family at the small shape, both precisions (peaks in the update)
    Case(f, "sdpa", SMALL, p, update=u) for f in ("llama-gqa", "gpt2") for p in ("master", "pure")
    for u in ("fused", "for-loop"))
#: Float8 linears (torchao, each recipe): LLaMA eager and SDPA, GPT-2 (its Conv1D layers stay 16-bit, the tied
#: head converts); peaks in a Float8 linear's forward cast and backward matmul, in an elementwise backward and
#: in the update.
FP8_CASES = tuple(Case("llama-gqa", a, SMALL, "pure", fp8=r) for a in ("eager", "sdpa")
                  for r in ("tensorwise", "rowwise", "rowwise_with_gw_hp")) + (
    Case("gpt2", "eager", SMALL, "pure", fp8="rowwise"), Case("gpt2", "eager", SMALL, "pure", fp8="rowwise_with_gw_hp"),
    Case("llama-gqa", "eager", LARGER, "master", fp8="tensorwise"),
    Case("llama-gqa", "eager", SMALL, "pure", in_backward=True, fp8="rowwise"))


@functools.cache
def measured(case: Case) -> Measured:
    return measure_step(case.family, case.attention, case.shape,
                        Run(case.precision, in_backward=case.in_backward, loss_chunks=case.loss_chunks,
                            fp8=case.fp8, recompute=case.recompute, update=case.update))


def recipe_for(case: Case, values: dict, device: str = "cpu") -> StepRecipe:
    """The recipe the options give (``--precision``, ``--optimizer-in-backward``)."""
    opts = Options(mode="train", batch=case.shape.b, seq=case.shape.s, precision=case.precision,
                   optimizer_in_backward=case.in_backward, loss_chunks=case.loss_chunks,
                   recompute="full" if case.recompute else "none", optimizer_impl=case.update)
    return step_recipe(opts, values, device)


@functools.cache
def derived(case: Case, device: str = "cpu") -> Timeline:
    model = resolve_model(config_for_step(case.family, case.attention))
    graph = hf_layers(model, case.attention, device, loss_chunks=case.loss_chunks)(model.graph("bf16", dropout=False))
    if case.fp8 != "none":
        graph = float8_layers(model, case.fp8)(graph)
    values = {**model.values(), b: case.shape.b, s: case.shape.s}
    return step_timeline(graph, values, recipe_for(case, values, device))
