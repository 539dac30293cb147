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
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from memderive.symbolic.derive import Breakdown, Term
from memderive.symbolic.expr import ceiling, const
from memderive.symbolic.graph import Graph
from memderive.symbolic.step_run import UPDATES, Moment, Run, StepRecipe, Stop
from memderive.symbolic.lazy import lazy
from memderive.symbolic.tensor import Tensor

if TYPE_CHECKING:
    import difflib
else:
    difflib = lazy("difflib")  # read only past WALKED_LAYERS (tests/test_cold_path.py: the cold estimate does not load it)

__all__ = ["StepRecipe", "Moment", "Timeline", "step_timeline", "moment_name", "UPDATES", "PHASES", "WALKED_LAYERS",
           "FOLD_AT"]

PHASES = ("forward", "backward", "optimizer")
#: The most repeats of one block the timeline walks one by one; past it the step is folded (``_folded``).
WALKED_LAYERS = 64
#: The most repeats walked one by one when the moments do not fold (about 10 ms a layer).
WALK_AT_MOST = 4096
#: The layer counts a folded timeline walks: FOLD_AT and the three after it.
FOLD_AT = 4


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
    folded: Moment | None = None  # past WALKED_LAYERS: the peak's moment (``moments`` then the walk at FOLD_AT layers)

    @property
    def peak(self) -> Moment:
        return self.folded if self.folded is not None else self.moments[self.peak_index]

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


def step_timeline(graph: Graph, values: Mapping[Any, int], recipe: StepRecipe | None = None,
                  every_moment: bool = False) -> Timeline:
    """The step's moments, baseline and peak (see the module docstring).

    Args:
        graph: the graph as trained (strategies applied); ops with a ``program`` run it, others are one
            fused call each.
        values: every size symbol bound to an integer.
        recipe: model states and the update.
        every_moment: walk every layer (up to WALK_AT_MOST), the moments listed, never folded (``--timeline``).
    """
    recipe = recipe or StepRecipe()
    if recipe.recompute:
        # lazy: transformers' op programs (~5% of a cold estimate), for a step that recomputes only
        from memderive.symbolic.hf_programs import without_cache

        graph = without_cache(graph)
    repeats = [int(blk.repeat.evaluate(values)) for blk in graph.blocks]
    if max(repeats, default=0) > (WALK_AT_MOST if every_moment else WALKED_LAYERS):
        folded = None if every_moment else _folded(graph, values, recipe, repeats.index(max(repeats)), max(repeats))
        if folded is not None:
            return folded
        if max(repeats) <= WALK_AT_MOST:  # not foldable: walked, as slow as its size
            return _walked(graph, values, recipe)
        if every_moment:
            raise ValueError(f"--timeline lists every moment of the step; {max(repeats):,} layers are past the "
                             f"{WALK_AT_MOST:,} it walks one by one; drop --timeline (the peak is folded without it)")
        raise ValueError(f"the step timeline walks every layer; {max(repeats):,} layers are past the "
                         f"{WALK_AT_MOST:,} it walks one by one when its moments are not affine in the layer count "
                         "(they do not fold)")
    return _walked(graph, values, recipe)


def _walked(graph: Graph, values: Mapping[Any, int], recipe: StepRecipe) -> Timeline:
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
    g = run.recipe.granularity
    terms = []
    for label, (n, t) in _live_counts(run).items():
        size = t.nbytes if g == 1 else g * ceiling(t.nbytes / g)
        terms.append(Term(f"{label[0]}/{label[1]}:{label[2]}", n * size))
    return Breakdown(tuple(sorted(terms, key=lambda term: term.path)), "bytes")


def _shape(m: Moment) -> tuple:
    """A moment as the same moment of another layer reads: its layer index dropped."""
    scope, _, path = m.where.partition(" ")
    return (m.phase, scope.rstrip("0123456789"), path, m.change, m.tensor)


def _layer_index(m: Moment) -> int | None:
    scope = m.where.partition(" ")[0]
    digits = scope[len(scope.rstrip("0123456789")):]
    return int(digits) if digits else None


def _folded(graph: Graph, values: Mapping[Any, int], recipe: StepRecipe, at: int, count: int) -> Timeline | None:
    """The timeline of ``count`` repeats of block ``at``, the work bounded by the structure: every repeat is the same
    calls, so each moment of the step is one of a fixed sequence (the other blocks', and each repeat's, in order),
    and its bytes are affine in the repeat count k and, within the repeats, in the repeat's index i (a weight, a
    saved tensor, a gradient per layer). The step is walked at FOLD_AT .. FOLD_AT + 3 repeats: the sequence of
    FOLD_AT + 1 is FOLD_AT's with one repeat's moments inserted (difflib's alignment), each moment's bytes
    b + k d (and + i c within the repeats) read off the walks at FOLD_AT + 1 and + 2, then checked to the byte
    against the walk at FOLD_AT + 3 (None when it differs: not foldable). The peak at ``count`` is the largest of
    the affine forms there; what is alive at it, each term's count affine in k, read from the replays at the same
    moment of the three walks and checked the same way."""
    walks = []
    for n in range(FOLD_AT, FOLD_AT + 4):
        blocks = tuple(replace(b, repeat=const(n)) if i == at else b for i, b in enumerate(graph.blocks))
        small = replace(graph, blocks=blocks)
        walks.append((small, _run(small, values, recipe, None)))
    runs = [run for _, run in walks]
    shapes = [[_shape(m) for m in run.moments] for run in runs]
    ops = difflib.SequenceMatcher(None, shapes[0], shapes[1], autojunk=False).get_opcodes()
    if any(tag not in ("equal", "insert") for tag, *_ in ops):
        return None
    # the template: ("fixed", index in walk 0) and ("period", (i1, j1, j2)): walk 1's inserted moments j1..j2
    template: list[tuple[str, Any]] = []
    for tag, i1, i2, j1, j2 in ops:
        template += [("fixed", i) for i in range(i1, i2)] if tag == "equal" else [("period", (j1, j2))]

    def positions(k: int) -> list[list[int]]:
        """Each template entry's moment indices in the walk of FOLD_AT + k repeats (a period: k copies, each
        its moments' indices)."""
        out, pos = [], 0
        for kind, item in template:
            if kind == "fixed":
                out.append([pos])
                pos += 1
            else:
                width = item[1] - item[0]
                out.append([pos + c * width for c in range(k)])
                pos += k * width
        return out

    place = [positions(k) for k in range(4)]
    for k in (1, 2, 3):  # the walks' shapes are the template's
        expect = []
        for (kind, item), at_k in zip(template, place[k]):
            expect += [shapes[0][item]] if kind == "fixed" else [x for _ in at_k for x in shapes[1][item[0]:item[1]]]
        if expect != shapes[k]:
            return None
    big = count - FOLD_AT
    forms = []  # (entry, offset, copy rule) -> (bytes at count, position at count, which moment per walk)
    for e, (kind, item) in enumerate(template):
        if kind == "fixed":
            b = [runs[k].moments[place[k][e][0]].bytes for k in range(4)]
            d = b[1] - b[0]
            if b[2] != b[0] + 2 * d or b[3] != b[0] + 3 * d:
                return None
            forms.append((b[0] + big * d, _position(template, e, 0, 0, big), [(k, place[k][e][0]) for k in (1, 2, 3)]))
            continue
        width = item[1] - item[0]
        for q in range(width):
            one, two0, two1 = (runs[1].moments[place[1][e][0] + q].bytes, runs[2].moments[place[2][e][0] + q].bytes,
                               runs[2].moments[place[2][e][1] + q].bytes)
            d, c = two0 - one, two1 - two0
            base = one - d
            three = [runs[3].moments[place[3][e][i] + q].bytes for i in range(3)]
            if three != [base + 3 * d + i * c for i in range(3)]:
                return None
            last = c > 0  # the largest copy: the last one when later repeats hold more
            copy = big - 1 if last else 0
            walk = [(k, place[k][e][k - 1 if last else 0] + q) for k in (1, 2, 3)]
            forms.append((base + big * d + copy * c, _position(template, e, copy, q, big), walk))
    peak_bytes, _, walk = max(forms, key=lambda f: (f[0], -f[1]))
    # the peak's moment, its layer index carried to ``count`` repeats; what is alive there, counts carried too
    moments = [runs[k].moments[i] for k, i in walk]
    first, second = _layer_index(moments[0]), _layer_index(moments[1])
    where = moments[0].where
    if first is not None and second is not None:
        scope, _, path = where.partition(" ")
        where = f"{scope.rstrip('0123456789')}{first + (big - 1) * (second - first)} {path}".rstrip()
    peak = replace(moments[0], where=where, bytes=peak_bytes)
    lives = [_live_counts(_run(walks[k][0], values, recipe, i)) for k, i in walk]
    labels = set().union(*lives)
    g = recipe.granularity
    terms = []
    for label in labels:
        counts = [live[label][0] if label in live else 0 for live in lives]
        if counts[2] - counts[1] != counts[1] - counts[0]:
            return None
        total = counts[0] + (big - 1) * (counts[1] - counts[0])
        t = next(live[label][1] for live in lives if label in live)
        if total:
            size = t.nbytes if g == 1 else g * ceiling(t.nbytes / g)
            terms.append(Term(f"{label[0]}/{label[1]}:{label[2]}", total * size))
    base_bytes = [run.baseline for run in runs]
    if base_bytes[2] - base_bytes[1] != base_bytes[1] - base_bytes[0]:
        return None
    baseline = base_bytes[0] + big * (base_bytes[1] - base_bytes[0])
    live = Breakdown(tuple(sorted(terms, key=lambda term: term.path)), "bytes")
    return Timeline((), baseline, peak_bytes, -1, live, peak)


def _position(template: list, entry: int, copy: int, offset: int, k: int) -> int:
    """The index of a template entry's moment in the walk of FOLD_AT + k repeats (a period's: copy ``copy``,
    moment ``offset``)."""
    pos = 0
    for kind, item in template[:entry]:
        pos += 1 if kind == "fixed" else k * (item[1] - item[0])
    return pos + (0 if template[entry][0] == "fixed" else copy * (template[entry][1][1] - template[entry][1][0]) + offset)


def _live_counts(run: Run) -> dict[tuple[str, str, str], tuple[int, Tensor]]:
    """What is alive at a replay's stop: (what, where made, tensor) -> (count over layers, a tensor of it)."""
    counts: Counter = Counter()
    sample: dict[tuple[str, str, str], Tensor] = {}
    for sid, entry in run.store.items():
        scope, _, path = entry.where.partition(" ")
        block = scope.rstrip("0123456789") or scope
        label = (run.category(sid), f"{block}/{path}" if path else block, entry.tensor.name)
        counts[label] += 1
        sample[label] = entry.tensor
    return {label: (n, sample[label]) for label, n in counts.items()}
