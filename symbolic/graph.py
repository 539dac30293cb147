"""Ops, blocks and graphs: the frozen data model every derivation walks.

A ``Graph`` is an ordered tuple of ``Block``s (``embed``, ``layer``, ``head``); a block repeats
``repeat`` times (``l`` for the decoder layer) and holds ``in_flight`` copies of its saved
activations at once (``p`` micro-batches on the first pipeline stage). A block is a tuple of
``Op``s; each op declares the parameters it owns, the tensors autograd saves for backward and
the tensor it produces. Tensors with the same name inside a block are the same tensor: two ops
that save it store it once. An op also declares its FLOPs, as ``Flop`` terms whose counts are
read off tensors, so the transforms that split or reshape tensors reach FLOPs as they reach bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memderive.symbolic.expr import Expr, const, prod
from memderive.symbolic.kernels import Kernel
from memderive.symbolic.tensor import Tensor

__all__ = ["Flop", "Op", "Block", "Graph", "FLOP_KINDS", "FLOP_PHASES"]

#: ``matmul``: matrix-multiply FLOPs, 2mnk (what FlopCounterMode, Kaplan and Narayanan count);
#: ``elementwise``: everything else (norms, activations, softmax, residuals), reported apart.
FLOP_KINDS = ("matmul", "elementwise")
#: When the work runs: the forward pass, the backward pass's input and weight gradients, and
#: forward work done again in backward (activation recompute, FlashAttention's scores).
FLOP_PHASES = ("forward", "input-grad", "weight-grad", "recompute")


@dataclass(frozen=True, slots=True)
class Flop:
    """One FLOP term of an op: ``coef`` times the element counts of ``operands``.

    Operands are tensors (a weight, the rows a matmul reads, the ``b a s s`` scores), so tensor
    parallelism, a pipeline stage or a decode step's shapes change FLOPs through the same
    tensors they change bytes through. A ``weight-grad`` term names the parameter it belongs to
    (``param``): a frozen weight drops exactly that term.

    >>> from memderive.symbolic.dims import b, s, h
    >>> from memderive.symbolic.dtypes import dtype
    >>> rows = Tensor("fc.rows", (b, s), dtype("bf16"))
    >>> w = Tensor("fc.weight", (4 * h, h), dtype("fp32"), role="weight")
    >>> Flop("x@W", (rows, w)).count
    8*b*h**2*s
    """

    name: str
    operands: tuple[Tensor, ...]
    coef: Any = 2
    kind: str = "matmul"
    phase: str = "forward"
    param: str | None = None
    #: the fraction of the block's repeats that run the term: a recompute of some layers only (Megatron's
    #: ``--recompute-method block``: ``recompute_layers`` of each chunk's layers); 1 for every other term
    share: Any = 1

    def __post_init__(self) -> None:
        if self.kind not in FLOP_KINDS or self.phase not in FLOP_PHASES:
            raise ValueError(f"flop {self.name}: kind {self.kind!r} / phase {self.phase!r} unknown")

    @property
    def count(self) -> Any:
        return self.coef * self.share * prod(x.numel for x in self.operands)

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> Flop:
        return replace(self, operands=tuple(map(fn, self.operands)))


@dataclass(frozen=True, slots=True)
class Op:
    """One node: ``path`` (e.g. ``attn/qkv``), its kind, parameters, saved tensors, output and FLOPs.

    ``share`` is the fraction of the block's repeats that hold the op (``(l - l_d)/l`` for the MoE
    sublayer of a model whose first ``l_d`` layers keep a dense MLP; 1 for most ops). ``cached``
    names what an inference cache keeps for this op when that is not the attention's own k and v
    (MLA's key/value latent and rotary key).

    ``reads`` names tensors the op reads that are neither its inputs nor parameters: tables made once
    per forward and shared by every layer (RoPE's cos/sin); they are saved only where an
    implementation's code keeps them (``symbolic.huggingface``).

    ``inputs`` names the activations the op reads and ``saved_for`` says, per saved tensor name,
    whose gradients need it (names of inputs or parameters): a linear saves its input only for its
    weight's gradient. ``symbolic.strategies.RequiresGrad`` reads them to drop what frozen weights
    alone would need; an op that declares neither keeps everything it saves.

    ``program`` spells out the op's forward as ATen calls (``symbolic.kernels.Kernel``): what each
    makes, how long Python holds it, and through ``symbolic.kernels.KINDS`` what autograd saves and
    what backward allocates. The step timeline (``symbolic.timeline``) runs it; an op without one is
    one fused call that makes its output and its saved tensors.
    """

    path: str
    kind: str
    params: tuple[Tensor, ...]
    saved: tuple[Tensor, ...]
    output: Tensor
    note: str = ""
    share: Any = 1
    cached: tuple[Tensor, ...] = ()
    flops: tuple[Flop, ...] = ()
    inputs: tuple[str, ...] = ()
    saved_for: tuple[tuple[str, tuple[str, ...]], ...] = ()
    reads: tuple[Tensor, ...] = ()
    program: tuple[Kernel, ...] = ()

    @property
    def column_parallel(self) -> bool:
        """A linear whose weight tensor parallelism splits by output features (``tp_axis`` 0): it reads the whole
        input (gathered under sequence parallelism) and writes a shard of its output."""
        return self.kind == "linear" and any(x.role == "weight" and x.tp_axis == 0 for x in self.params)

    def needs(self, tensor: Tensor) -> tuple[str, ...] | None:
        """Whose gradients need saved ``tensor`` (None: not declared, always kept)."""
        return next((grads for name, grads in self.saved_for if name == tensor.name), None)

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> Op:
        return replace(self, params=tuple(map(fn, self.params)), saved=tuple(map(fn, self.saved)),
                       output=fn(self.output), cached=tuple(map(fn, self.cached)), reads=tuple(map(fn, self.reads)),
                       flops=tuple(x.map_tensors(fn) for x in self.flops),
                       program=tuple(k.map_tensors(fn) for k in self.program))

    def recomputed(self, share: Any = 1) -> Op:
        """The op with its forward FLOPs done once more in backward (activation recompute), in ``share`` of the
        block's repeats (1: every one)."""
        again = tuple(replace(x, phase="recompute", share=x.share * share) for x in self.flops if x.phase == "forward")
        return replace(self, flops=self.flops + again)

    def frozen(self, *params: str) -> Op:
        """The op without the weight-gradient FLOPs of ``params`` (all its own when none named)."""
        names = set(params) or {x.name for x in self.params}
        return replace(self, flops=tuple(x for x in self.flops if not (x.phase == "weight-grad" and x.param in names)))


@dataclass(frozen=True, slots=True)
class Block:
    """A named run of ops, repeated ``repeat`` times, ``in_flight`` activation copies held."""

    name: str
    ops: tuple[Op, ...]
    input: Tensor
    repeat: Expr = const(1)
    in_flight: Expr = const(1)

    def __post_init__(self) -> None:
        paths = [op.path for op in self.ops]
        if len(paths) != len(set(paths)):
            raise ValueError(f"block {self.name}: duplicate op paths {paths}")

    def map_ops(self, fn: Callable[[Op], Op]) -> Block:
        return replace(self, ops=tuple(map(fn, self.ops)))

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> Block:
        return replace(self, ops=tuple(op.map_tensors(fn) for op in self.ops), input=fn(self.input))


@dataclass(frozen=True, slots=True)
class Graph:
    """A model as blocks, with the relations between its sizes (e.g. ``d_h = h/a``).

    ``relations`` rewrite a closed form into the literature's letters; ``strategies`` names the
    transforms applied so far (for provenance in writeups); ``assumptions`` lists what the
    derivation takes for granted.
    """

    name: str
    blocks: tuple[Block, ...]
    relations: Mapping[Expr, Expr] = field(default_factory=dict)
    strategies: tuple[str, ...] = ()
    assumptions: tuple[str, ...] = ()
    frozen: frozenset[str] = frozenset()  # parameters without gradients, as ``block/param`` names
    float8: frozenset[str] = frozenset()  # weights of Float8 linears (``symbolic.float8``), as ``block/param``

    def trainable(self, block: str, param: str) -> bool:
        """Whether parameter ``param`` of ``block`` gets a gradient (tied weights carry ``embed/...`` names)."""
        return f"{block}/{param}" not in self.frozen and param not in self.frozen

    def block(self, name: str) -> Block:
        for blk in self.blocks:
            if blk.name == name:
                return blk
        raise KeyError(f"graph {self.name} has no block {name!r}")

    def has_block(self, name: str) -> bool:
        return any(blk.name == name for blk in self.blocks)

    def ops(self) -> Iterator[tuple[Block, Op]]:
        for blk in self.blocks:
            for op in blk.ops:
                yield blk, op

    def map_blocks(self, fn: Callable[[Block], Block], strategy: str, *assumptions: str) -> Graph:
        return replace(self, blocks=tuple(map(fn, self.blocks)),
                       strategies=self.strategies + (strategy,),
                       assumptions=self.assumptions + assumptions)
