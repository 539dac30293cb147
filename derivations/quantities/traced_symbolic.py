"""A traced model's bytes as exact expressions in b and s: transformers' code run once on symbolic sizes.

``traced`` measures on fake tensors at concrete (b, s) and fits a polynomial through small points. This module runs
the same forward (``traced.saved_bytes``: the training forward under ``saved_tensors_hooks``; ``traced.cache_bytes``:
a prefill of ``s`` tokens and one decode step) once, on fake tensors of a ``FakeTensorMode`` with a ``ShapeEnv``
(``torch.fx.experimental.symbolic_shapes``): the input ids are ``(b, s)`` with b and s symbolic sizes (hints: the
user's (b, s) in ``formula``, else ``HINT``; the hints choose the branches transformers' code takes). Every
tensor's size is then a SymPy expression in b and s, and so is each saved storage's ``nbytes`` (each storage once,
as ``traced`` counts them): their sum is one exact expression, expanded. PyTorch's Python dispatcher is on
(``enable_python_dispatcher``), as ``torch.export`` and ``make_fx`` run it: without it the C++ kernel of
``constant_pad_nd`` (the ``nn.functional.pad`` of transformers' ``ForCausalLMLoss``) reads the sizes as integers
and fixes b and s to the hints; its one Python kernel that saves other tensors than CPU eager, dropout's, is off.

The expression holds where the run's guards hold: every branch on a size that the code took (``ShapeEnv.guards``)
is recorded, in b and s, with the transformers function that asked it. PyTorch's symbolic sizes are never 0 or
1 (``ShapeEnv`` specializes 0 and 1), so the symbolic run gives b >= 2 and s >= 2; b = 1 (a kernel that copies a
size-1 batch differently) is a second run with b = 1 and s symbolic. Where the code fixes a size (a guard that
the user's (b, s) fails, such as s == 24), reads a tensor's values (a data-dependent error) or the expression
misses the bytes measured at the user's (b, s), ``formula`` falls back to ``traced.polynomial`` and says why. A
run also stops where the code fixes a function of s to a count past ``UNROLLED`` (a Python loop over the sequence's
chunks): unrolled on symbolic sizes it would cost more than the expression is worth, which holds at that count alone.
"""

from __future__ import annotations

import contextlib
import functools
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from memderive.derivations.quantities import traced_fold
from memderive.derivations.quantities.traced import (Fit, Polynomial, TracedError, build, cache_total, checked_fit,
                                                    flops, polynomial, saved_bytes)
from memderive.symbolic.dims import by_name
from memderive.symbolic.lazy import lazy

sp = lazy("sympy")
torch = lazy("torch")
fake_tensor = lazy("torch._subclasses.fake_tensor")
symbolic_shapes = lazy("torch.fx.experimental.symbolic_shapes")
dynamo_source = lazy("torch._dynamo.source")
python_dispatcher = lazy("torch._dispatch.python")
logging = lazy("logging")  # on a cold estimate's path (estimate.py imports this module), used on traced runs only

__all__ = ["Symbolic", "Fallback", "symbolic_model", "symbolic_bytes", "symbolic", "formula", "HINT"]

#: The sizes the symbolic run's branches follow: b = 2 (the smallest batch PyTorch keeps symbolic) and s = 24 (past
#: the small windows and chunks a tiny config may have, short enough to trace in a second).
HINT = (2, 24)


@dataclass(frozen=True)
class Symbolic:
    """Bytes as exact SymPy expressions: ``general`` in b and s (b >= 2, s >= 2), ``one`` in s for b = 1 (None:
    the same as ``general`` at b = 1); ``guards``: the conditions on b and s the run took its branches under, each
    with the transformers function that asked it."""

    general: Any
    one: Any = None
    guards: tuple[str, ...] = ()

    def __call__(self, b: int, s: int) -> int:
        expr = self.one if b == 1 and self.one is not None else self.general
        return int(expr.subs({_b(): b, _s(): s}))

    @property
    def expression(self) -> str:
        return str(self.general) + (f" (b >= 2); {self.one} (b = 1)" if self.one is not None else "")

    @property
    def note(self) -> str:
        return f", exact (traced with symbolic b and s; {self._where})"

    def __str__(self) -> str:
        return self.expression + self.note

    @property
    def short(self) -> str:
        """The expression as ``traced.Fit`` prints a polynomial (a FLOPs row's formula, as the fitted route wrote it)
        where it is one of degree 1 in b and 2 in s, and the guards that restrict it, if any."""
        fit = _as_fit(self.general, self.one)
        return (str(fit) if fit is not None else self.expression) + (f" ({self._where})" if self.guards else "")

    @property
    def _where(self) -> str:
        """Where the expression holds: s >= 2 and the first three guards (the rest counted)."""
        more = len(self.guards) - 3
        return "holds for " + "; ".join(("s >= 2", *self.guards[:3], *([f"and {more} more guards"] if more > 0 else [])))


def _polynomial(expr: Any) -> Polynomial | None:
    """``expr`` (in b and s) as ``traced.Polynomial``, None where it is not a polynomial of degree 1 in b and 2 in s."""
    if not expr.is_polynomial(_b(), _s()):
        return None
    terms = sp.Poly(expr, _b(), _s()).terms()
    if any(i > 1 or j > 2 for (i, j), _ in terms):
        return None
    return Polynomial({(i, j): Fraction(int(c.p), int(c.q)) for (i, j), c in terms})


def _as_fit(general: Any, one: Any) -> Fit | None:
    polys = _polynomial(general), None if one is None else _polynomial(one)
    if polys[0] is None or (one is not None and polys[1] is None):
        return None
    return Fit(*polys)


@dataclass(frozen=True)
class Fallback:
    """The polynomial fit (``traced.polynomial``; None: none fits) where the symbolic run gives no expression,
    and ``why`` not, in one line."""

    fit: Fit | None
    why: str

    def __bool__(self) -> bool:
        return self.fit is not None

    def __call__(self, b: int, s: int) -> int:
        assert self.fit is not None, "no formula: ask fit first"
        return self.fit(b, s)

    @property
    def expression(self) -> str:
        return str(self.fit)

    @property
    def note(self) -> str:
        return f" (polynomial fit; not symbolic: {self.why})"

    def __str__(self) -> str:
        return self.expression + self.note if self.fit else f"not symbolic: {self.why}"

    @property
    def short(self) -> str:
        return str(self)


def _b() -> Any:
    return by_name("b").symbol


def _s() -> Any:
    return by_name("s").symbol


#: The most iterations of a Python loop over the sequence a symbolic run unrolls (``_Guards``): past it the run stops
#: and the polynomial answers. Each iteration runs its ops on symbolic sizes and the cost grows faster than the count
#: (Qwen3-Next-80B-A3B at s = 4,096 has 64 chunks of 64; ``benchmarks/traced_fold.py --config
#: tests/fixtures/qwen3-next-80b-a3b/config.json`` times its estimate); up to 8 chunks (s <= 512 for chunks of 64)
#: the expression is kept, holding for that many chunks.
UNROLLED = 8


class _Guards(list):
    """``ShapeEnv.guards`` that keeps, beside each guard, the innermost transformers frame that asked it."""

    def __init__(self) -> None:
        super().__init__()
        self.where: list[str] = []
        self.names: dict[Any, Any] = {}  # the ShapeEnv's symbols -> memderive's b and s

    def append(self, guard: Any) -> None:
        frames = [f for f in traceback.extract_stack() if "/transformers/" in f.filename]
        where = (f"{frames[-1].filename.split('/transformers/')[-1]}:{frames[-1].lineno} in {frames[-1].name}"
                 if frames else "outside transformers")
        expr = sp.sympify(guard.expr)
        if isinstance(expr, sp.Eq) and any(x.is_Integer for x in expr.args):
            fixed = expr.xreplace(self.names)
            if any(x in self.names for x in expr.args):
                # b or s fixed to its hint (a Python loop over the sequence): no expression; stop the run here
                raise TracedError(f"transformers' code fixes {fixed.lhs} = {fixed.rhs} ({where})")
            if (_s() in fixed.free_symbols and max(x for x in fixed.args if x.is_Integer) > UNROLLED
                    and not all(_true(fixed, bb, ss) for bb in GRID_B for ss in GRID_S)):
                # a function of s fixed to a count past UNROLLED (a Python loop over the sequence's chunks, Qwen3-Next's
                # gated DeltaNet: one iteration per 64 tokens): the run would unroll that many iterations on symbolic
                # sizes, at a cost that grows faster than the count, for an expression holding at that value alone
                raise TracedError(f"transformers' code fixes {fixed.lhs} = {fixed.rhs} ({where}): an expression "
                                  f"would hold at that value alone (a Python loop over the sequence's chunks, more "
                                  f"than {UNROLLED} iterations to unroll on symbolic sizes)")
        self.where.append(where)
        super().append(guard)


def symbolic_model(cfg: Any, attention: str = "sdpa", dtype: str = "bf16", task: str | None = None,
                   images: int = 1) -> tuple[Any, Any]:
    """``traced.build``'s model, its parameters and buffers fake tensors (of static sizes) of a new
    ``FakeTensorMode`` that has a ``ShapeEnv`` (returned: the model, the mode; ``mode.shape_env`` holds the guards)."""
    env = symbolic_shapes.ShapeEnv()
    env.guards = _Guards()
    return build(cfg, attention, dtype, task=task, images=images,
                 mode=fake_tensor.FakeTensorMode(allow_non_fake_inputs=True, shape_env=env))


def _size(env: Any, name: str, hint: int) -> tuple[Any, Any]:
    """A new symbolic size (a source of its own: ``ShapeEnv`` gives one source one symbol) and its SymPy symbol."""
    source = dynamo_source.ConstantSource(f"{name}{len(env.var_to_sources)}")
    symbol = env.create_symbol(hint, source, dynamic_dim=symbolic_shapes.DimDynamic.DYNAMIC)
    return env.create_symintnode(symbol, hint=hint, source=source), symbol


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """PyTorch's ShapeEnv logs a guard that fails (``_Guards`` stops a run by raising in one): the reason is ours
    to say, in one line."""
    log = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    before = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = before


@contextlib.contextmanager
def _cpu_dropout() -> Iterator[None]:
    """``aten.dropout`` as CPU eager runs it (C++: ``input * noise``, the noise kept in the input's dtype) while the
    Python dispatcher is on: its Python kernels (``torch._decomp.decompositions.dropout``: ``native_dropout``, a
    bool mask) would save other tensors than a real training step (BART's dropout: 1 B a mask element, not 2)."""
    op = torch.ops.aten.dropout.default
    keys = (torch._C.DispatchKey.CompositeImplicitAutograd, torch._C.DispatchKey.Autograd)
    kept = {k: op.py_kernels.pop(k) for k in keys if k in op.py_kernels}
    op._dispatch_cache.clear()
    try:
        yield
    finally:
        op.py_kernels.update(kept)
        op._dispatch_cache.clear()


def symbolic_bytes(count: Callable[[Any, Any, Any, Any], Any], model: Any, mode: Any, b: int | None = None,
                   hint: tuple[int, int] = HINT,
                   folded: traced_fold.Fold | None = None) -> tuple[Any, tuple[tuple[Any, str], ...]]:
    """``count(model, mode, b, s)`` (``saved_bytes``, or ``cache_bytes``'s total) run with s symbolic (hint
    ``hint[1]``) and b symbolic (hint ``hint[0]``) or ``b`` given: the SymPy expression of its bytes in memderive's
    b and s, and the guards the run added (SymPy, in b and s) with the transformers function that asked each;
    with ``folded``, run on its few layers and summed with its coefficients (``traced_fold``).
    Raises ``TracedError`` where the run fails (a data-dependent size: the code read a tensor's values)."""
    env = mode.shape_env
    first = len(env.guards)
    sb, symbol_b = _size(env, "b", hint[0]) if b is None else (b, None)
    ss, symbol_s = _size(env, "s", hint[1])
    names = {symbol_s: _s(), **({symbol_b: _b()} if symbol_b is not None else {})}
    env.guards.names = names
    summed: tuple[Any, ...] = ()
    for layers, coefficient in folded.runs if folded is not None else ((None, 1),):
        with (python_dispatcher.enable_python_dispatcher(), _cpu_dropout(), _quiet(),
              folded.only(layers) if folded is not None else contextlib.nullcontext()):
            total = count(model, mode, sb, ss)
        run = tuple(coefficient * sp.sympify(t.node.expr if hasattr(t, "node") else t)
                    for t in (total if isinstance(total, tuple) else (total,)))
        summed = tuple(x + y for x, y in zip(summed, run)) if summed else run
    # the ShapeEnv's replacements once all runs are done (a later run's replacement holds for the earlier runs too)
    exprs = tuple(sp.expand(env.replace(sp.expand(x)).xreplace(names)) for x in summed)
    unknown = set().union(*(e.free_symbols for e in exprs)) - {_b(), _s()}
    if unknown:
        raise TracedError("the bytes depend on sizes the code computed from tensor values "
                          f"({', '.join(map(str, unknown))})")
    guards = tuple((sp.sympify(g.expr).xreplace(names), where)
                   for g, where in zip(env.guards[first:], env.guards.where[first:]))
    return (exprs if isinstance(total, tuple) else exprs[0]), guards


#: Sizes a guard is tried at to tell whether it restricts b and s at all (a guard true at every one, such as a size
#: being nonzero, is not shown): chunk and window edges of the usual powers of two, and long sequences.
GRID_B = (1, 2, 3)
GRID_S = (2, 3, 5, 17, 24, 63, 64, 65, 127, 128, 129, 255, 256, 257, 1000, 4096, 4097, 32768)


def _true(guard: Any, b: int, s: int) -> bool:
    value = guard.xreplace({_b(): sp.Integer(b), _s(): sp.Integer(s)})
    return value is sp.true or value is True


def _words(guard: Any) -> str:
    """A guard as a reader writes it: ``s - 1 != 1``, ``s <= 64`` (SymPy's ``Ne(s - 1, 1)``)."""
    if isinstance(guard, sp.Rel):
        return f"{guard.lhs} {'=' if isinstance(guard, sp.Eq) else guard.rel_op} {guard.rhs}"
    return str(guard)


def _telling(guards: tuple[tuple[Any, str], ...]) -> list[tuple[Any, str]]:
    """The guards false at some point of ``GRID_B`` x ``GRID_S`` (those that restrict where the expression holds)."""
    seen: dict[str, tuple[Any, str]] = {}
    for guard, where in guards:
        if str(guard) not in seen and not all(_true(guard, bb, ss) for bb in GRID_B for ss in GRID_S):
            seen[str(guard)] = (guard, where)
    return list(seen.values())


class _Unfold(TracedError):
    """The folded run (``traced_fold``) failed or missed the measured bytes: the whole stack is run instead."""


def symbolic(count: Callable[[Any, Any, Any, Any], Any], model: Any, mode: Any, b: int, s: int,
             measured: int, hint: tuple[int, int] = HINT,
             measure: Callable[[int, int], Any] | None = None) -> Symbolic:
    """The ``Symbolic`` bytes of ``count`` (b >= 2 and, where different at b = 1, b = 1) traced at ``hint``, whose
    guards the user's (b, s) must meet and which must give the bytes ``measured`` there; raises ``TracedError``
    saying why not. A deep model runs a few of its layers (``traced_fold``), and its whole stack where their sum
    misses ``measured`` or, where b = 1 has an expression of its own, ``measure`` (the whole model's count at a
    (b, s); None: such a fold is not kept) at the other b."""
    if s < 2:
        raise TracedError("s = 1, and a symbolic size is never 1")
    folded = traced_fold.fold(model)
    if folded is not None:
        try:
            return _symbolic(count, model, mode, b, s, measured, hint, folded, measure)
        except _Unfold as exc:
            log = logging.getLogger(__name__)
            log.debug("the folded run (%s) missed: %s; the whole stack runs", folded.runs, exc)
    return _symbolic(count, model, mode, b, s, measured, hint, None, None)


def _symbolic(count: Callable[[Any, Any, Any, Any], Any], model: Any, mode: Any, b: int, s: int, measured: int,
              hint: tuple[int, int], folded: traced_fold.Fold | None,
              measure: Callable[[int, int], Any] | None) -> Symbolic:
    try:
        general, guards = symbolic_bytes(count, model, mode, hint=hint, folded=folded)
        one, guards_one = symbolic_bytes(count, model, mode, b=1, hint=hint, folded=folded)
    except TracedError:  # the code itself fixed a size or read a value: the whole stack would too
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure of a folded run (an index past the cut stack)
        if folded is None:
            raise
        raise _Unfold(str(exc)) from exc
    for guard, where in guards_one if b == 1 else guards:
        if not _true(guard, b, s):
            raise TracedError(f"transformers' code branched on {_words(guard)} at b = {hint[0] if b > 1 else 1}, "
                              f"s = {hint[1]} ({where}), which b = {b}, s = {s} fails")
    words = tuple(dict.fromkeys(f"{_words(g)} ({where})" for g, where in _telling((*guards, *guards_one))))
    results = []
    for gen, on, want in zip(*((x,) if not isinstance(x, tuple) else x for x in (general, one, measured))):
        result = Symbolic(gen, None if sp.expand(on - gen.subs(_b(), 1)) == 0 else on, words)
        value = result(b, s)
        if value != want:
            raise (TracedError if folded is None else _Unfold)(
                f"the expression gives {value:,} at b = {b}, s = {s}, the trace measured {want:,}")
        results.append(result)
    if folded is not None and any(r.one is not None for r in results):
        # b = 1's expression differs from b >= 2's: the half the user's b does not check is checked at the other b
        other = 2 if b == 1 else 1
        if measure is None:
            raise _Unfold("b = 1 has an expression of its own and nothing measures the other b")
        got = measure(other, s)
        if tuple(r(other, s) for r in results) != (got if isinstance(got, tuple) else (got,)):
            raise _Unfold(f"the expression misses the whole model's count at b = {other}, s = {s}")
    return tuple(results) if isinstance(measured, tuple) else results[0]


def _train_flops(model: Any, mode: Any, b: Any, s: Any) -> tuple[Any, Any]:
    forward, backward = flops(model, mode, b, s, use_cache=True)
    return forward, forward + backward


def _prefill_flops(model: Any, mode: Any, b: Any, s: Any) -> Any:
    return flops(model, mode, b, s, train=False, use_cache=True)[0]


#: What ``formula`` derives: the count run on symbolic sizes, the count its fallback polynomial is fitted through
#: (``traced``'s own), and the polynomial's degree in s. FLOPs: ``FlopCounterMode`` multiplies the SymInt sizes as
#: it multiplies integers, so the symbolic run's count is the FLOPs in b and s; the forward counted on symbolic sizes
#: writes a cache (``traced.flops``' ``use_cache``: a prefill's as generate's does, a training step's too), the
#: measured count at the user's (b, s) (without) must equal it there.
KINDS: dict[str, tuple[Callable[..., Any], Callable[..., Any], int]] = {
    "saved": (saved_bytes, saved_bytes, 2),
    "cache": (cache_total, cache_total, 1),
    "prefill_flops": (_prefill_flops, lambda m, md, b, s: flops(m, md, b, s, train=False)[0], 2),
    # a training step's (forward, forward + backward) from one run; ``measured`` and the result are pairs too
    "train_flops": (_train_flops, lambda m, md, b, s: (lambda f, bw: (f, f + bw))(*flops(m, md, b, s)), 2),
}


def formula(cfg: Any, attention: str, dtype: str, kind: str, b: int, s: int, measured: int,
            model: Any, mode: Any) -> Symbolic | Fallback:
    """The bytes or FLOPs of ``kind`` (``KINDS``: "saved": a training forward's saved activations; "cache": the cache
    after a prefill and one decode step; "prefill_flops", "train_flops": ``traced.flops``', the latter a pair) of
    ``cfg`` as a function of b and s: the ``Symbolic`` expression (traced with the user's (b, s) as hints), else
    ``Fallback`` to the polynomial fitted on ``model`` and ``mode`` (``traced.build``'s) with the reason.
    ``measured``: the value at the user's (b, s), which either must give. ``traced.traced_estimate``'s
    ``formula``."""
    count, fitted, degree = KINDS[kind]
    try:
        sym_model, sym_mode = symbolic_model(cfg, attention, dtype, images=getattr(model, "_traced_images", 1))
        # traced with the user's sizes as hints: the branches taken are theirs, the guards say how far it holds
        return symbolic(count, sym_model, sym_mode, b, s, measured, hint=(max(b, 2), s),
                        measure=lambda bb, ss: fitted(model, mode, bb, ss))
    except TracedError as exc:
        why = str(exc).removeprefix(f"{cfg.model_type}: ")  # TracedError's text is one line
    if isinstance(measured, tuple):
        counted = functools.cache(lambda bb, ss: fitted(model, mode, bb, ss))  # each (b, s) run once
        fits = [polynomial(lambda bb, ss, i=i: counted(bb, ss)[i], s_degree=degree) for i in range(len(measured))]
        return tuple(Fallback(fit if fit is not None and fit(b, s) == want else None, why)
                     for fit, want in zip(fits, measured))
    return Fallback(checked_fit(fitted, model, mode, b, s, measured, s_degree=degree), why)
