"""ATen-level steps of an op: what each saves for backward and what its backward allocates.

An ``Op`` of the graph says what a module saves (``Op.saved``). Its ``program`` says how its forward
runs, one ``Kernel`` per ATen call that makes a tensor: the kind of call, the tensors it reads, the
tensors it makes and how long Python holds them. ``KINDS`` gives each kind's autograd rule, read off
PyTorch's ``tools/autograd/derivatives.yaml``: which of its inputs and outputs the node saves, and
what its backward allocates (temporaries, then one gradient per input that needs one). The step
timeline (``symbolic.timeline``) runs these rules; it never types in a number.

A gradient is a new tensor, ``PASS`` (the incoming gradient itself: ``AddBackward0``,
``CloneBackward0``) or ``VIEW`` (a view of it: ``CatBackward0``'s slices, ``ViewBackward0``).
A gradient shaped like the output of a broadcasting op is reduced to its input's shape by the
engine (``validate_outputs``' ``sum_to``) and cast to its dtype; the timeline does that for every
kind, so the rules give gradients as the formula computes them.

>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> x = Tensor("x", (b, s, h), dtype("bf16"))
>>> k = Kernel("silu", ("x",), (Tensor("y", (b, s, h), dtype("bf16")),))
>>> KINDS["silu"].saves(k, lambda name: True)
('x',)
>>> temps, grads = KINDS["silu"].backward(k, {"x": x, "y": k.outputs[0]}.__getitem__, lambda name: True)
>>> [(name, g.nbytes) for name, g in grads]
[('x', 2*b*h*s)]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeAlias

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.tensor import Tensor

__all__ = ["Kernel", "Rule", "KINDS", "PASS", "VIEW", "KEEPS", "promote"]

#: A gradient that is the incoming gradient itself (same storage).
PASS = "pass"
#: A gradient that is a view of the incoming gradient (same storage).
VIEW = "view"
#: How long Python holds a kernel's result beyond its last reader: "" not at all (an expression's
#: temporary), "op" (a local variable of the module's forward), "block" (the caller's variable),
#: "forward" (the model's output object, dropped when the forward returns), "step" (the training
#: step's ``loss``), "<block>/<op path>": until that op has run (``LlamaModel.forward``'s locals
#: live until its final norm), or "=<tensor>": until the call making that tensor has run (a variable
#: rebound a few calls later).
KEEPS = ("", "op", "block", "forward", "step")

FP32 = dtype("fp32")
Like = Callable[[str], Tensor]
Needs = Callable[[str], bool]
Grad: TypeAlias = "Tensor | str"


@dataclass(frozen=True, slots=True)
class Kernel:
    """One ATen call of an op's forward.

    ``alias``: the outputs are views of ``inputs[0]`` (no new storage). ``grad_copies``: a view whose
    backward copies its gradient (``reshape`` of a gradient whose strides cannot be viewed).
    ``params``: which inputs are the op's parameters (they are leaves: their gradients accumulate).
    """

    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[Tensor, ...] = ()
    alias: bool = False
    keep: str = ""
    grad_copies: bool = False
    note: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kernel kind {self.kind!r} unknown; known: {', '.join(sorted(KINDS))}")
        if self.keep not in KEEPS and "/" not in self.keep and not self.keep.startswith("="):
            raise ValueError(f"kernel keep {self.keep!r}: one of {KEEPS}, '<block>/<op>' or '=<tensor>'")

    def map_tensors(self, fn: Callable[[Tensor], Tensor]) -> Kernel:
        return replace(self, outputs=tuple(map(fn, self.outputs)))


@dataclass(frozen=True, slots=True)
class Rule:
    """A kind's autograd rule: ``saves(kernel, needs_grad)`` names what the node keeps;
    ``backward(kernel, like, needs_grad)`` gives its temporaries and its gradients, per input."""

    saves: Callable[[Kernel, Needs], tuple[str, ...]]
    backward: Callable[[Kernel, Like, Needs], tuple[tuple[Tensor, ...], tuple[tuple[str, Grad], ...]]]
    differentiable: bool = True
    source: str = ""
    #: An autograd function whose forward and backward run several calls (``symbolic.float8``): each gives the
    #: events in order, ("alloc", key, tensor), ("free", key, None), ("output", "", None): the kernel's output
    #: made, ("grad", input, tensor): that input's gradient made (``backward`` is then not used).
    script: Callable | None = None
    backward_script: Callable | None = None


def promote(*dts: DType) -> DType:
    """Type promotion of floating dtypes: fp32 wins over 16-bit ones (bf16 with fp16 also gives fp32)."""
    names = {d.name for d in dts}
    if "fp32" in names or {"bf16", "fp16"} <= names:
        return FP32
    return dts[0]


def _new(k: Kernel, what: str, like: Tensor, dt: DType | None = None, shape: tuple | None = None) -> Tensor:
    """A tensor the node allocates, named after the kernel's result (``mlp/act.out:d(mlp/up.out)``)."""
    return Tensor(f"{k.outputs[0].name}:{what}", like.shape if shape is None else shape, dt or like.dtype,
                  role="gradient")


def _grad_of(k: Kernel, name: str, like: Like, dt: DType | None = None, shape: tuple | None = None) -> Tensor:
    return _new(k, f"d({name})", like(name), dt, shape)


def _out(k: Kernel) -> Tensor:
    return k.outputs[0]


def _none(k: Kernel, needs: Needs) -> tuple[str, ...]:
    return ()


def _saves(*which: str) -> Callable[[Kernel, Needs], tuple[str, ...]]:
    """Saves fixed slots: ``in0``, ``in1``... (inputs), ``out0``... (outputs)."""
    def saves(k: Kernel, needs: Needs) -> tuple[str, ...]:
        names = []
        for slot in which:
            pool = k.inputs if slot.startswith("in") else tuple(x.name for x in k.outputs)
            index = int(slot[-1])
            if index < len(pool):
                names.append(pool[index])
        return tuple(names)
    return saves


def _cross(k: Kernel, needs: Needs) -> tuple[str, ...]:
    """A product saves each factor for the other's gradient (``mm``, ``bmm``, ``mul``)."""
    a, b = k.inputs[-2], k.inputs[-1]
    return tuple(x for x, other in ((b, a), (a, b)) if needs(other))


def _each(what: Callable[[Kernel, str, Like], Grad], last_first: bool = False) -> Callable:
    """A backward that makes one gradient per input needing one, and no temporaries (``last_first``:
    the generated node computes the last input's first, as ``MmBackward0`` does ``mat2`` before ``self``)."""
    def backward(k: Kernel, like: Like, needs: Needs) -> tuple[tuple[Tensor, ...], tuple[tuple[str, Grad], ...]]:
        order = k.inputs[::-1] if last_first else k.inputs
        return (), tuple((x, what(k, x, like)) for x in order if needs(x))
    return backward


def _alloc(k: Kernel, x: str, like: Like) -> Grad:
    return _grad_of(k, x, like)


def _pass(k: Kernel, x: str, like: Like) -> Grad:
    return PASS


def _view(k: Kernel, x: str, like: Like) -> Grad:
    return _grad_of(k, x, like) if k.grad_copies else VIEW


def _mul_grads(k: Kernel, like: Like, needs: Needs) -> tuple[tuple[Tensor, ...], tuple[tuple[str, Grad], ...]]:
    """``mul_tensor_backward``: grad * other, grad * self, at the output's shape in the promoted dtype
    (the engine reduces and casts each to its input afterwards)."""
    out, grads = _out(k), []
    for x, other in ((k.inputs[0], k.inputs[-1]), (k.inputs[-1], k.inputs[0])):
        if needs(x):
            grads.append((x, _new(k, f"d({x})", out, promote(out.dtype, like(other).dtype))))
    return (), tuple(grads)


def _power_grads(k: Kernel, like: Like, needs: Needs, base: str) -> tuple[tuple[Tensor, ...], tuple]:
    """``pow_backward`` (grad * (e * x^(e-1))) and rsqrt's ``-0.5 * grad * result^3``: two
    temporaries of the input's size, then the gradient."""
    x = k.inputs[0]
    if not needs(x):
        return (), ()
    ref = like(base)
    temps = (_new(k, "pow", ref), _new(k, "scaled", ref))
    return temps, ((x, _grad_of(k, x, like, promote(like(x).dtype, ref.dtype))),)


def _split_grads(k: Kernel, like: Like, needs: Needs) -> tuple[tuple[Tensor, ...], tuple]:
    """``SplitBackward0``: the slices' gradients concatenated into one tensor of the input's shape."""
    return (), ((k.inputs[0], _grad_of(k, k.inputs[0], like)),) if needs(k.inputs[0]) else ()


def _cast_grad(k: Kernel, x: str, like: Like) -> Grad:
    """``ToCopyBackward0``: the gradient cast back to the input's dtype."""
    return _grad_of(k, x, like)


_MATMUL = "derivatives.yaml: mm/bmm/addmm (mm_mat1_backward, mm_mat2_backward)"

#: Every kind's rule. Inputs are read in order; ``in0`` is the first input, ``out0`` the first output.
KINDS: dict[str, Rule] = {
    # products: each operand saved for the other's gradient
    "mm": Rule(_cross, _each(_alloc, last_first=True), source=_MATMUL),
    "bmm": Rule(_cross, _each(_alloc, last_first=True), source=_MATMUL),
    "addmm": Rule(_cross, lambda k, like, needs: _each(_alloc)(replace(k, inputs=(*k.inputs[1:], k.inputs[0])), like, needs),
                  source=_MATMUL + "; bias: maybe_multiply(grad, beta).sum(0)"),
    "mul": Rule(_cross, _mul_grads, source="derivatives.yaml: mul.Tensor (mul_tensor_backward)"),
    "mul_scalar": Rule(_none, _each(_alloc), source="derivatives.yaml: mul.Scalar (grad * other)"),
    "div": Rule(_saves("in1"), _each(_alloc), source="derivatives.yaml: div.Tensor (self: grad / other; other "
                "saved; self saved only when other needs a gradient)"),
    "add": Rule(_none, _each(_pass), source="derivatives.yaml: add.Tensor (grad, maybe_multiply(grad, alpha))"),
    # pointwise
    "to": Rule(_none, _each(_cast_grad), source="derivatives.yaml: _to_copy (_to_copy_backward)"),
    "pow": Rule(_saves("in0"), lambda k, like, needs: _power_grads(k, like, needs, k.inputs[0]),
                source="derivatives.yaml: pow.Tensor_Scalar (pow_backward)"),
    "rsqrt": Rule(_saves("out0"), lambda k, like, needs: _power_grads(k, like, needs, k.outputs[0].name),
                  source="derivatives.yaml: rsqrt (-0.5 * grad * result.pow(3))"),
    "mean": Rule(_none, _each(_alloc), source="derivatives.yaml: mean.dim (mean_backward: expand / numel)"),
    "silu": Rule(_saves("in0"), _each(_alloc), source="derivatives.yaml: silu (silu_backward)"),
    "gelu": Rule(_saves("in0"), _each(_alloc), source="derivatives.yaml: gelu (gelu_backward)"),
    "tanh": Rule(_saves("out0"), _each(_alloc), source="derivatives.yaml: tanh (tanh_backward(grad, result))"),
    "neg": Rule(_none, _each(_alloc), source="derivatives.yaml: neg (grad.neg())"),
    "softmax": Rule(_saves("out0"), _each(_alloc), source="derivatives.yaml: _softmax (_softmax_backward_data)"),
    "log_softmax": Rule(_saves("out0"), _each(_alloc),
                        source="derivatives.yaml: _log_softmax (_log_softmax_backward_data)"),
    # layout: copies and views
    "clone": Rule(_none, _each(_pass), source="derivatives.yaml: clone (grad)"),
    # a slice along axis 1 reshaped (``x.chunk(n, dim=1)[i].reshape(...)``): a copy, unless every axis before
    # axis 1 has size 1 (then the slice is contiguous and reshape returns a view; the timeline decides)
    "chunk_copy": Rule(_none, _each(_pass), source="derivatives.yaml: clone / _reshape_alias (grad)"),
    # matmul's reshape of a strided operand (``at::matmul`` folds batch axes with ``reshape``): a copy, unless
    # the operand is a fresh contiguous copy already (``repeat_kv``'s when a_kv < a; the timeline decides)
    "matmul_copy": Rule(_none, _each(_pass), source="derivatives.yaml: clone / _reshape_alias (grad)"),
    "cat": Rule(_none, _each(_view), source="derivatives.yaml: cat (cat_tensors_backward: narrow views)"),
    "view": Rule(_none, _each(_view), source="derivatives.yaml: view/transpose/_unsafe_view (grad.reshape)"),
    "slice": Rule(_none, _each(_alloc), source="derivatives.yaml: slice.Tensor (slice_backward_wrapper: zeros)"),
    "expand_clone": Rule(_none, _each(_alloc), source="derivatives.yaml: expand (at::sum_to(grad, self.sizes()))"),
    "split": Rule(_none, _split_grads, source="derivatives.yaml: split.Tensor (split_backward: cat)"),
    # layers
    "embedding": Rule(_saves("in1"), _each(_alloc), source="derivatives.yaml: embedding (embedding_backward)"),
    "layer_norm": Rule(_saves("in0", "out1", "out2"), _each(_alloc),
                       source="derivatives.yaml: native_layer_norm (native_layer_norm_backward)"),
    "sdpa": Rule(_saves("in0", "in1", "in2", "out0", "out1"), _each(_alloc),
                 source="derivatives.yaml: _scaled_dot_product_flash_attention_for_cpu"),
    "nll_loss": Rule(_saves("in1", "out1"), _each(_alloc),
                     source="derivatives.yaml: nll_loss_forward (nll_loss_backward; saves target, total_weight)"),
    # an op whose ATen calls are not spelled out: saves what the op declares, one gradient per input
    "fused": Rule(_none, _each(_alloc), source="the op's declared saved tensors; one gradient per input"),
    # no gradient: masks, positions, label shifts
    "const": Rule(_none, _each(_alloc), differentiable=False, source="no autograd node"),
    "pad": Rule(_none, _each(_alloc), differentiable=False, source="constant_pad_nd of labels: no autograd node"),
    # not a call: a Python variable that holds a tensor (a module's argument, held by its caller)
    "hold": Rule(_none, _each(_alloc), differentiable=False, source="a Python reference"),
    # not a call: the op's parameters as the implementation holds them (LLaMA's q_proj, k_proj, v_proj
    # for the graph's fused attn/qkv weight); inputs the graph's parameters, outputs the held ones
    "parameters": Rule(_none, _each(_alloc), differentiable=False, source="module parameters"),
}
