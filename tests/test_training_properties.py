"""Training-memory invariants over random sizes and layouts (hypothesis).

Degree 1 changes nothing; more tensor parallelism, sequence parallelism, ZeRO sharding,
recompute or FlashAttention never increases per-GPU memory; breakdowns add up to totals; and
invalid layouts are one-line CLI errors with exit code 2.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

import pytest
import sympy as sp
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memderive.derivations.models.architectures import GPT, LLAMA, build_graph
from memderive.derivations.estimate import Estimate, estimate, stage_derivations
from memderive.derivations.models.model import Model
from memderive.documents.steps import breakdown_rows
from memderive.symbolic.derive import evaluate, per_block
from memderive.symbolic.dims_sympy import d, p, t
from memderive.symbolic.errors import InvalidLayoutError
from memderive.symbolic.simplify import closed_form
from memderive.symbolic.strategies import PipelineParallel, SequenceParallel, TensorParallel

EXAMPLES = settings(max_examples=25, deadline=None)
TRAIN_QUANTITIES = ("parameters_per_gpu", "activation_bytes_per_layer", "activation_bytes", "model_state_bytes",
                    "total_bytes")


@st.composite
def models(draw, arch=None) -> Model:
    """GPT or LLaMA sizes valid for t, p in {1, 2, 4}: heads, KV heads, FFN and layers divisible by 4."""
    arch = arch or draw(st.sampled_from([GPT, LLAMA]))
    a_kv = 4 * draw(st.integers(1, 2))
    a = a_kv * (1 if arch is GPT else draw(st.integers(1, 3)))
    sizes = {"h": a * draw(st.integers(1, 12)), "a": a, "a_kv": a_kv, "l": 4 * draw(st.integers(1, 3)),
             "V": draw(st.integers(1, 999)), "f": 4 * draw(st.integers(1, 80))}
    if arch is GPT:
        sizes["n_ctx"] = draw(st.integers(1, 64))
    return Model("random", arch, sizes)


steps = st.fixed_dictionaries({"batch": st.integers(1, 4), "seq": st.integers(1, 512),
                               "profile": st.sampled_from(["korthikanti", "exact"])})


def total(model: Model, step: dict, key: str = "total_bytes", **options) -> int:
    return estimate(model, mode="train", **step, **options).number(key)


def non_increasing(values: Iterable[int]) -> bool:
    values = list(values)
    return all(later <= earlier for earlier, later in zip(values, values[1:]))


# --- degree 1 is the identity ----------------------------------------------------------------
def test_degree_one_strategies_return_the_graph_unchanged() -> None:
    graph = build_graph(GPT)
    assert TensorParallel(1)(graph) is graph
    assert SequenceParallel(1)(graph) is graph
    assert PipelineParallel(1)(graph) is graph


@pytest.mark.parametrize("arch", [GPT, LLAMA], ids=["gpt", "llama"])
@pytest.mark.parametrize("options", [{}, {"sp": True}, {"recompute": "selective"}, {"recompute": "full"},
                                     {"flash": True, "profile": "exact"}], ids=str)
def test_symbolic_t_at_one_is_no_tensor_parallelism(arch, options: dict) -> None:
    """The closed forms in t, with t = 1 substituted, are the closed forms without TP."""
    model = Model("m", arch, {"h": 64, "a": 8, "a_kv": 8, "l": 4, "V": 100, "n_ctx": 32})
    split = estimate(model, mode="train", batch=1, seq=16, tp=2, **options)
    whole = estimate(model, mode="train", batch=1, seq=16, **{k: v for k, v in options.items() if k != "sp"})
    assert t in _form(split, "total_bytes").free_symbols
    for key in TRAIN_QUANTITIES:
        assert sp.expand(_form(split, key).xreplace({t: 1}) - _form(whole, key)) == 0, key


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_symbolic_d_at_one_is_no_zero(zero: int) -> None:
    sharded = estimate("gpt2", mode="train", batch=1, seq=16, dp=8, zero=zero)
    plain = estimate("gpt2", mode="train", batch=1, seq=16)
    assert sp.expand(_form(sharded, "model_state_bytes").xreplace({d: 1}) - _form(plain, "model_state_bytes")) == 0


def test_symbolic_p_at_one_keeps_the_layers() -> None:
    """The first stage drops the output layer for every p > 1, so only the layers and the
    embedding carry over to p = 1: l/p layers times p micro-batches in flight is l layers."""
    staged = estimate("gpt2", mode="train", batch=1, seq=16, pp=4)
    plain = estimate("gpt2", mode="train", batch=1, seq=16)
    for block in ("embed", "layer"):
        ours = per_block(staged.quantity("activation_bytes").breakdown, block).xreplace({p: 1})
        assert sp.expand(ours - per_block(plain.quantity("activation_bytes").breakdown, block)) == 0


def _form(e: Estimate, key: str) -> sp.Expr:
    q = e.quantity(key)
    return sp.expand(closed_form(q.breakdown.total, q.relations))


# --- monotonicity ------------------------------------------------------------------------------
@EXAMPLES
@given(models(), steps)
def test_more_tensor_parallelism_never_increases_memory(model: Model, step: dict) -> None:
    plain = [total(model, step, tp=tp) for tp in (1, 2, 4)]
    assert non_increasing(plain)
    with_sp = [plain[0], *(total(model, step, tp=tp, sp=True) for tp in (2, 4))]
    assert non_increasing(with_sp)
    assert all(s <= q for s, q in zip(with_sp, plain))


@EXAMPLES
@given(models(), steps, st.sampled_from([2, 8]))
def test_higher_zero_stage_never_increases_memory(model: Model, step: dict, dp: int) -> None:
    """ZeRO 0-2 shard more at each stage; ZeRO-3 shards the weights too but holds the gathered root and one
    gathered layer beside them, which a shallow model with a large vocabulary can outweigh (at d = 2, 2P/d + 2 x
    (root + layer) against ZeRO-2's 2P): without those terms it never needs more."""
    assert non_increasing(total(model, step, dp=dp, zero=zero) for zero in (0, 1, 2))
    e = estimate(model, mode="train", **step, dp=dp, zero=3)
    gathered = sum(v for path, _, v in e.quantity("total_bytes").term_values(e.values) if path.startswith("zero3/"))
    assert e.number("total_bytes") - gathered <= total(model, step, dp=dp, zero=2)
    assert non_increasing(total(model, step, dp=n, zero=3) for n in (2, 4, 8))


@EXAMPLES
@given(models(), steps, st.sampled_from([1, 2]))
def test_recompute_and_flash_never_increase_memory(model: Model, step: dict, tp: int) -> None:
    """FlashAttention from s = 2 on: without dropout eager attention keeps one bf16 row of P,
    2s bytes, where flash keeps one fp32 logsumexp, 4 bytes (at s = 1 flash keeps more). Selective recompute on
    the flash kernel (Megatron-Core's core_attn checkpoint) saves less, but its rerun in backward writes the
    kernel's output again beside the one linear_proj keeps: the total may grow by that, b s h / t in bf16."""
    modes = ("none", "selective", "full")
    assert non_increasing(total(model, step, tp=tp, recompute=r, attention="eager") for r in modes)
    assert non_increasing(total(model, step, "activation_bytes", tp=tp, recompute=r) for r in modes)
    none, selective, full = (total(model, step, tp=tp, recompute=r) for r in modes)
    assert full <= selective <= none + 2 * step["batch"] * step["seq"] * model.sizes["h"] // tp
    if step["seq"] >= 2:
        assert total(model, step, tp=tp, flash=True) <= total(model, step, tp=tp)


@EXAMPLES
@given(models(), steps)
def test_more_pipeline_stages_never_increase_model_states(model: Model, step: dict) -> None:
    """The most any stage holds (the GPU's estimate is the stage of the largest total, which can be another one:
    the last stage's logits outweigh the first's layers once FlashAttention keeps no scores)."""
    def most(pp: int) -> int:
        e = estimate(model, mode="train", **step, pp=pp)
        return max(Estimate(e.model, e.options, *stage, e.values).number("model_state_bytes")
                   for stage in stage_derivations(e.model, e.options))

    assert non_increasing(most(pp) for pp in (1, 2, 4))


@EXAMPLES
@given(models(), steps)
def test_first_stage_holds_l_layers_and_p_embeddings(model: Model, step: dict) -> None:
    """1F1B (Korthikanti §4.2.3): the first stage holds l/p layers for p micro-batches, l layers'
    worth at every p; only the embedding's activations grow, p-fold. (The GPU's estimate is the larger of the first
    and the last stage: the first is read from ``stage_derivations``, first stage first.)"""
    from memderive.derivations.estimate import stage_derivations

    def blocks(pp: int) -> tuple[int, int]:
        e = estimate(model, mode="train", **step, pp=pp)
        first = Estimate(e.model, e.options, *stage_derivations(e.model, e.options)[0], e.values)
        acts = first.quantity("activation_bytes").breakdown
        return tuple(int(evaluate(per_block(acts, name), e.values)) for name in ("layer", "embed"))

    (layer1, embed1), (layer4, embed4) = blocks(1), blocks(4)
    assert (layer4, embed4) == (layer1, 4 * embed1)


@EXAMPLES
@given(models(arch=LLAMA), steps.filter(lambda step: step["profile"] == "korthikanti"))
def test_more_pipeline_stages_never_increase_memory_without_embedding_activations(model: Model, step: dict) -> None:
    """LLaMA has no embedding dropout and the paper's profile neglects token ids, so nothing
    grows with p on the first stage."""
    assert non_increasing(total(model, step, pp=pp) for pp in (1, 2, 4))


def test_flash_keeps_more_at_s_equal_1() -> None:
    """Why the flash claim starts at s = 2: LLaMA (no dropout), b = 1, s = 1, a = 4: eager keeps
    P, 2as^2b = 8 bytes a layer; flash keeps the logsumexp, 4bas = 16 bytes; l = 4 layers: +32."""
    model = Model("tiny", LLAMA, {"h": 4, "a": 4, "l": 4, "V": 1, "f": 4})
    step = {"batch": 1, "seq": 1}
    assert total(model, step, flash=True) - total(model, step, attention="eager") == 32


def test_a_first_stage_can_grow_with_p() -> None:
    """Why the general claim is restricted: GPT's embedding dropout mask is held for p
    micro-batches. h = 8, a = 1, l = 4, V = 1, n_ctx = 1, b = 4, s = 2048, bf16, p = 2 -> 4:
    the mask adds (4 - 2) sbh = 2 * 4 * 2048 * 8 = 131,072 bytes; one layer's model states
    leave the stage, 16 * (12h^2 + 13h) = 16 * 872 = 13,952 bytes."""
    model = Model("tiny", GPT, {"h": 8, "a": 1, "l": 4, "V": 1, "n_ctx": 1})
    step = {"batch": 4, "seq": 2048}
    assert total(model, step, pp=4) - total(model, step, pp=2) == 131_072 - 13_952


# --- breakdowns add up -------------------------------------------------------------------------
layouts = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4]), "pp": st.sampled_from([1, 2, 4]), "dp": st.sampled_from([1, 3, 8]),
    "recompute": st.sampled_from(["none", "selective", "full"]), "flash": st.booleans(),
})


@EXAMPLES
@given(models(), steps, layouts, st.booleans(), st.integers(0, 3))
def test_breakdown_terms_add_up_to_each_total(model: Model, step: dict, layout: dict, sp_on: bool,
                                              zero: int) -> None:
    """Each row's closed form gives that row's value, and the rows add up to the total shown
    (each node rounded up to whole bytes, as a shard of P/d parameters holds ceil(P/d) of them)."""
    layout = {**layout, "sp": sp_on and layout["tp"] > 1, "zero": zero if layout["dp"] > 1 else 0}
    e = estimate(model, mode="train", **step, **layout)
    for key in TRAIN_QUANTITIES:
        q = e.quantity(key)
        exact = [evaluate(term.expr, e.values) for term in q.breakdown.terms]
        rows = q.term_values(e.values)
        assert [evaluate(form, e.values) for _, form, _ in rows] == exact, key
        # the rows tables and plots show (render.steps) add up to the JSON number, fractional shards too
        assert sum(row.value for row in breakdown_rows(e, key)) == e.number(key), key
    # with recompute, the peak also holds the one layer that backward rebuilds
    working = sum(v for path, _, v in e.quantity("total_bytes").term_values(e.values) if path.startswith("recompute/"))
    assert working >= 0 and (working == 0 or layout["recompute"] != "none")  # flash + selective rebuilds nothing
    # under ZeRO-3 the total also holds the gathered root and one gathered layer beside the shards
    gathered = sum(v for path, _, v in e.quantity("total_bytes").term_values(e.values) if path.startswith("zero3/"))
    assert (gathered > 0) == (layout["zero"] == 3)
    assert e.number("total_bytes") == (e.number("model_state_bytes") + e.number("activation_bytes") + working
                                       + gathered)


def test_sharded_rows_add_up_when_shards_are_fractional() -> None:
    """500 parameters, ZeRO-3 over d = 3: weights and gradients 2 * 500/3 = 333.33 bytes each,
    rounded up to whole bytes per shard (334 each), optimizer 12 * 500/3 = 2000; 334 + 334 + 2000 = 2668."""
    model = Model("m", LLAMA, {"h": 4, "a": 4, "l": 4, "V": 2, "f": 4})
    e = estimate(model, mode="train", batch=1, seq=1, dp=3, zero=3)
    assert e.number("parameters_per_gpu") == 500
    rows = e.quantity("model_state_bytes").term_values(e.values)
    assert sum(value for _, _, value in rows) == e.number("model_state_bytes") == 2668


@EXAMPLES
@given(models(), steps, layouts)
def test_activation_total_is_layers_plus_embedding_plus_head(model: Model, step: dict, layout: dict) -> None:
    """Per GPU: (l/p) layers of per-layer activations times the micro-batches in flight, plus the
    blocks outside the layers; the per-layer quantity is one layer, one micro-batch. The GPU is the larger of the
    pipeline's first stage (the embedding, p micro-batches in flight under 1F1B: l layers' worth) and its last (the
    output layer, one micro-batch: l/p layers' worth)."""
    from memderive.documents.steps import pipeline_stage

    e = estimate(model, mode="train", **step, **layout)
    acts = e.quantity("activation_bytes").breakdown
    outside = sum(int(evaluate(per_block(acts, name), e.values)) for name in ("embed", "head"))
    held = model.sizes["l"] // layout["pp"] if pipeline_stage(e.graph) == "last" else model.sizes["l"]
    layers = held * e.number("activation_bytes_per_layer")
    assert e.number("activation_bytes") == layers + outside


# --- invalid layouts ---------------------------------------------------------------------------
@EXAMPLES
@given(models(), st.integers(2, 16))
def test_heads_not_divisible_by_t_are_refused(model: Model, tp: int) -> None:
    assume(model.sizes["a"] % tp or model.sizes["a_kv"] % tp or model.sizes["f"] % tp)
    with pytest.raises(InvalidLayoutError, match=f"tensor-parallel degree {tp}; choose a degree that divides it"):
        estimate(model, mode="train", batch=1, seq=8, tp=tp)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "gpt2", "--mode", "train",
                           "--batch", "1", "--seq", "128", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "fragment"), [
    (("--tp", "5"), "12 attention heads are not divisible by tensor-parallel degree 5"),
    (("--pp", "5"), "12 layers are not divisible by pipeline-parallel degree 5"),
    (("--zero", "2"), "give --dp or --cp greater than 1"),
    (("--pp", "2", "--virtual-stages", "4"), "not divisible by p*v = 8"),
    (("--sp",), "give --tp greater than 1"),
], ids=["a%t", "l%p", "zero-without-dp", "l%pv", "sp-without-tp"])
def test_invalid_layout_is_one_line_exit_2(args: tuple[str, ...], fragment: str) -> None:
    result = run_cli(*args)
    lines = result.stderr.strip().splitlines()
    assert (result.returncode, result.stdout, len(lines)) == (2, "", 1), result.stderr
    assert fragment in lines[0] and "Traceback" not in result.stderr
