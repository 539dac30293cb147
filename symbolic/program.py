"""A graph's forward as a list of calls, every tensor named by a key, and when Python lets go of each.

``flatten`` walks the blocks (a repeated block once per repeat, scoped ``layer0``, ``layer1``...) and
each op's ``program`` (``symbolic.kernels``), or one fused call for an op without one. Keys are
``(scope, name)``, ``("@", name)`` for model-wide tensors (the rotary tables, the mask) and
``("param", scope, name)`` for weights; a name no call makes but an op path prefixes (``attn/qkv.q``) is
a view of what that op made. ``releases`` says after which call each result's last Python reference
goes: its last reader, or the end of what holds it (``Kernel.keep``); a decoder layer's input is held
by its caller until the layer returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.kernels import Kernel
from memderive.symbolic.tensor import Tensor

__all__ = ["Call", "flatten", "releases", "fused_program", "INPUT_IDS", "BASELINE_ROLES", "LAYER_BLOCKS"]

BASELINE_ROLES = frozenset({"batch", "buffer"})
LAYER_BLOCKS = ("layer", "first_layer")


@dataclass(slots=True)
class Call:
    """One call of the forward: its op, kernel, input and output keys, where it runs (``layer3 mlp/act``)."""

    scope: str
    op: Op
    kernel: Kernel
    ins: tuple[tuple, ...]
    outs: tuple[tuple, ...]
    where: str
    holds: tuple[tuple, ...] = ()  # tensors Python holds until this call (a block's input, its caller's variable)
    rg: bool = False
    saved: list[int] = field(default_factory=list)


INPUT_IDS = ("@", "@input_ids")


def _block_output(blk: Block) -> str | None:
    """The tensor a block hands to the next one: its last op's output (model-wide ``@`` tensors aside)."""
    names = [op.output.name for op in blk.ops if not op.output.name.startswith("@")]
    return names[-1] if names else None


def fused_program(op: Op, previous: str | None) -> tuple[Kernel, ...]:
    """An op without a program: one call reading its inputs (else the previous op's output) and its
    weights, making its output and the saved tensors it does not read."""
    inputs = op.inputs or ((previous,) if previous else ())
    own = {x.name for x in op.params}
    tied = sorted({f.param for f in op.flops if f.phase == "weight-grad" and f.param and f.param not in own})
    extra = tuple(x for x in op.saved if x.name not in inputs and x.name != op.output.name)
    return (Kernel("fused", (*inputs, *(x.name for x in op.params), *tied), (op.output, *extra)),)


def flatten(graph: Graph, values: Mapping[Any, int], weight: DType, params: dict[tuple, tuple[Tensor, bool]],
             batch: dict[tuple, Tensor]) -> list[Call]:
    """The forward as calls in order, every tensor named by a key: ``(scope, name)``, ``("@", name)`` for
    model-wide tensors, ``("param", scope, name)`` for weights (registered in ``params``); the first
    block's input is the batch's token ids (in ``batch``)."""
    calls: list[Call] = []
    scopes = {blk.name: blk.name for blk in graph.blocks}
    block_in: tuple | None = None
    if graph.blocks:
        batch[INPUT_IDS] = replace(graph.blocks[0].input, name="input_ids", role="batch")
    for name, w in _read_ahead(graph).items():  # a weight an earlier block reads (an MTP layer's output layer)
        params[("param", *name.split("/", 1))] = (replace(w, dtype=weight), graph.trainable(*name.split("/", 1)))
    for blk in graph.blocks:
        repeat = int(blk.repeat.evaluate(values))
        for index in range(repeat):
            scope = blk.name if repeat == 1 else f"{blk.name}{index}"
            scopes[blk.name] = scope
            for op in blk.ops:
                for w in op.params:
                    params[("param", scope, w.name)] = (replace(w, dtype=weight), graph.trainable(blk.name, w.name))
            block_in = _block_calls(blk, scope, scopes, block_in, params, calls)
    _inputs_from_outside(calls, params, batch)
    return calls


def _read_ahead(graph: Graph) -> dict[str, Tensor]:
    """The weights (``block/name``) of a block run once that an op of an earlier block reads: the head's output
    layer in an MTP layer (``derivations.models.mtp``), registered before the blocks are walked."""
    once = {blk.name: blk for blk in graph.blocks if blk.repeat == 1}
    out: dict[str, Tensor] = {}
    for i, blk in enumerate(graph.blocks):
        later = {b.name for b in graph.blocks[i + 1:]} & set(once)
        for op in blk.ops:
            for x in (x for f in op.flops for x in f.operands if x.role == "weight"):
                owner, _, rest = x.name.partition("/")
                held = None if owner not in later else next(
                    (w for o in once[owner].ops for w in o.params if w.name == rest), None)
                if held is not None:
                    out[x.name] = held
    return out


def _inputs_from_outside(calls: list[Call], params: Mapping[tuple, Any], batch: dict[tuple, Tensor]) -> None:
    """Tensors read but made by no call (GPT-2's position ids, token types) come with the batch."""
    made = {key for call in calls for key in call.outs} | set(params) | set(batch)
    for call in calls:
        for name, key in zip(call.kernel.inputs, call.ins):
            if key in made:
                continue
            t = next((x for x in call.op.saved if x.name == name), None)
            if t is None and call.op.kind == "embedding" and name in call.op.inputs:
                # ids no op makes and none saves: BERT's ``position_ids`` buffer, read as ``[:, :s]``
                t = Tensor(name, call.op.output.shape[:-1], dtype("int64"), role="buffer")
            if t is None:
                raise ValueError(f"{call.where}: reads {name!r}, which no op makes and the batch does not hold")
            batch[key] = replace(t, role="batch")
            made.add(key)


def _block_calls(blk: Block, scope: str, scopes: dict[str, str], block_in: tuple | None,
                 params: dict[tuple, Any], calls: list[Call]) -> tuple | None:
    """Append one block's calls; returns the key of its output."""
    made: dict[str, tuple] = {}
    paths = sorted((op.path for op in blk.ops), key=len, reverse=True)
    outputs = {op.path: op.output.name for op in blk.ops}
    given = block_in if block_in is not None else INPUT_IDS

    def key(name: str) -> tuple:
        if name.startswith("@"):
            return ("@", name)
        if name == blk.input.name:
            return given
        head, _, rest = name.partition("/")
        if head in scopes and ("param", scopes[head], rest) in params:  # a tied weight: embed/tokens.weight
            return ("param", scopes[head], rest)
        if ("param", scope, name) in params:
            return ("param", scope, name)
        if name in made:
            return made[name]
        path = next((p for p in paths if name.startswith(p + ".")), None)  # attn/qkv.q: a view of what attn/qkv made
        if path is not None and outputs[path] in made:
            return made[outputs[path]]
        return (scope, name)

    previous: str | None = blk.input.name
    first = len(calls)
    for op in blk.ops:
        if op.kind == "checkpoint":  # full recompute's marker: the step timeline checkpoints the layer itself
            continue
        for kernel in op.program or fused_program(op, previous):
            if kernel.kind == "parameters":
                _held_as(kernel, scope, params)
                continue
            ins = tuple(key(x) for x in kernel.inputs)
            outs = tuple(("@", t.name) if t.name.startswith("@") else (scope, t.name) for t in kernel.outputs)
            made.update((t.name, k) for t, k in zip(kernel.outputs, outs))
            calls.append(Call(scope, op, kernel, ins, outs, f"{scope} {op.path}"))
        if not op.output.name.startswith("@"):
            previous = op.output.name
    if len(calls) > first and blk.name in LAYER_BLOCKS:  # a decoder layer is one call: its input is held to the end
        calls[-1].holds += (given,)
    out = _block_output(blk)
    return made.get(out, given) if out is not None else given


def _held_as(kernel: Kernel, scope: str, params: dict[tuple, Any]) -> None:
    """The graph's parameters ``kernel.inputs`` held as the tensors ``kernel.outputs`` (same trainability),
    in their place."""
    names = {("param", scope, name) for name in kernel.inputs}
    whole = [params[key] for key in names]
    weight, trainable = whole[0][0].dtype, all(t for _, t in whole)
    order = list(params.items())
    at = next(i for i, (key, _) in enumerate(order) if key in names)
    parts = [(("param", scope, p.name), (replace(p, dtype=weight), trainable)) for p in kernel.outputs]
    kept = [item for item in order if item[0] not in names]
    params.clear()
    params.update(kept[:at] + parts + kept[at:])


def releases(calls: list[Call]) -> dict[int, list[tuple]]:
    """When Python lets go of each result: after its last reader, or when what holds it returns (``keep``);
    a block's input is held by its caller until the block returns."""
    last: dict[tuple, int] = {}
    op_end: dict[tuple[str, str], int] = {}
    block_end: dict[str, int] = {}
    for i, call in enumerate(calls):
        op_end[(call.scope, call.op.path)] = block_end[call.scope] = i
        for key in (*call.ins, *call.holds):
            last[key] = i
    named = {f"{scope.rstrip('0123456789')}/{path}": i for (scope, path), i in op_end.items()}  # the last instance
    made = {key: i for i, call in enumerate(calls) for key in call.outs}
    end = len(calls) - 1
    out: dict[int, list[tuple]] = {}
    seen: set[tuple] = set()
    for i, call in enumerate(calls):
        for key, t in zip(call.outs, call.kernel.outputs):
            if key in seen or t.role in BASELINE_ROLES:
                continue
            seen.add(key)
            keep = call.kernel.keep
            if keep == "step":
                continue
            until = {"": i, "op": op_end[(call.scope, call.op.path)], "block": block_end[call.scope],
                     "forward": end}.get(keep)
            if until is None and keep.startswith("="):
                until = made[("@" if keep[1] == "@" else call.scope, keep[1:])]
            elif until is None:
                block, _, path = keep.partition("/")
                same = call.scope.rstrip("0123456789") == block
                until = op_end[(call.scope, path)] if same else named[keep]
            out.setdefault(max(until, last.get(key, i)), []).append(key)
    return out
