"""Float8 linears as torchao 0.18 trains them (``torchao.float8``: ``convert_to_float8_training``).

``Float8Linear.forward`` calls one autograd function, ``matmul_with_hp_or_float8_args``, whose forward
**saves the high-precision input and weight** (``ctx.save_for_backward(input_hp, weight_hp_t)``) and
casts both to float8 inside, and whose backward casts the weight, the incoming gradient and the input
again. So what a Float8 linear saves is what a 16-bit linear saves; the 8-bit tensors are transients of
the forward and of the backward, and the weights, their gradients and the optimizer states keep their
precision. What differs is the step's timeline: the casts and their fp32 temporaries, and the 8-bit
copies alive at each scaled matmul. This module spells those out, call by call, as the eager code
runs them (``float8_scaling_utils.hp_tensor_to_float8_dynamic``, ``float8_utils.tensor_to_amax`` /
``amax_to_scale`` / ``to_fp8_saturated``, ``float8_training_tensor._ToFloat8ConstrFunc`` and
``float8_ops.preprocess_addmm`` / ``addmm_float8_unwrapped``):

* a cast of ``x`` (``hp_tensor_to_float8_dynamic``): ``abs(x)``, its max (one value, or one per row or
  column: ``amax(abs(x), dim, keepdim=True)``), the scale (the max in fp64, clamped, ``finfo.max /``
  it, back to fp32; floored to a power of two by the rowwise recipes: ``log2``, ``floor``, ``exp2``),
  then ``x.to(fp32) * scale``, clamped, ``.to(float8)``: three x-sized fp32 tensors at the worst moment;
  the 8-bit copy and its fp32 scale live until the autograd function returns;
* a scaled matmul (``_scaled_mm``): an operand that is not row-major (``a``) or is (``b``) is copied
  contiguous first; a tensorwise scale beside a rowwise one is repeated to a row; the reciprocals of
  both scales; with rowwise scales and no fast accumulation (the two backward matmuls) their outer
  product in fp32, multiplied into the output after a tensorwise ``_scaled_mm``.

Recipes (``Float8LinearConfig.from_recipe_name``): ``tensorwise`` (one scale per tensor; e4m3 input and
weight, e5m2 gradient), ``rowwise`` (one scale per row or column, powers of two, e4m3 throughout),
``rowwise_with_gw_hp`` (rowwise forward; the input gradient from a rowwise gradient and a tensorwise
weight; the weight gradient a 16-bit ``mm``).

>>> from memderive.symbolic.dims import b, s
>>> from memderive.symbolic.dtypes import dtype
>>> x = Tensor("x", (b, s, 64), dtype("bf16"))
>>> w = Tensor("w", (32, 64), dtype("bf16"), role="weight")
>>> k = Kernel("float8_tensorwise", ("x", "w"), (Tensor("y", (b, s, 32), dtype("bf16")),))
>>> events = KINDS["float8_tensorwise"].script(k, {"x": x, "w": w}.__getitem__)
>>> [t.nbytes for act, _, t in events if act == "alloc" and t.name.endswith(":fp8")]
[64*b*s, 2048]
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Expr, const, prod
from memderive.symbolic.graph import Graph
from memderive.symbolic.gathered import Gathered
from memderive.symbolic.kernel_choices import RECIPES
from memderive.symbolic.kernels import KINDS, Kernel, Rule
from memderive.symbolic.tensor import Tensor

__all__ = ["RECIPES", "Float8Training", "float8_kind", "is_float8", "param_in", "float8_matmul_flops", "weight_grad_in_float8",
           "tp_planned", "SOURCE",
           "SAVED_NOTE", "TP_SOURCE", "FP8", "TP_GATHERS"]

SOURCE = ("torchao 0.18.0 torchao/float8/float8_linear.py (matmul_with_hp_or_float8_args), config.py "
          "(Float8LinearConfig.from_recipe_name), float8_ops.py (preprocess_addmm, addmm_float8_unwrapped)")
SAVED_NOTE = ("Float8 linears (torchao): the 16-bit input and weight are saved for backward "
              "(matmul_with_hp_or_float8_args: ctx.save_for_backward(input_hp, weight_hp_t)), so the saved "
              "activations equal the 16-bit model's; weights, gradients and optimizer states keep their "
              "precision; the 8-bit copies are transients of the forward and the backward")

TP_SOURCE = ("torchao torchao/float8/float8_tensor_parallel.py (eab345c, 2024-12-23, and 36027d8): "
             "Float8ColwiseParallel / Float8RowwiseParallel._prepare_input_fn cast the input "
             "(hp_tensor_to_float8_dynamic) before its redistribute, PrepareFloat8ModuleInput._prepare_input_arg casts "
             "a module's input once and all-gathers the 8-bit tensor for all its linears, _prepare_output_fn's "
             "NoopFwToFloat8BwDynamic casts the output's gradient before the backward's all-gather; "
             "float8_linear.py matmul_with_hp_or_float8_args: an input already in 8 bits is used and saved as it is; "
             "torchtitan apply_tp (9dec370 torchtitan/parallelisms/parallelize_llama.py, the December 2024 "
             "benchmarks' commit; 238fa99 torchtitan/models/llama3/infra/parallelize.py: "
             "enable_float8_tensorwise_tp)")
FP32, FP64, FP8 = dtype("fp32"), DType("fp64", 8), dtype("fp8")
#: torchao's Float8 tensor parallelism (``TP_SOURCE``), tensorwise scaling only: the input's and the output
#: gradient's 8-bit ``_data`` (a Float8TrainingTensor's one layout), their 0-d scales replicated, not gathered.
TP_GATHERS = {"tensorwise": Gathered(1, 1)}
Event = tuple[str, str, Any]  # ("alloc", key, Tensor) | ("free", key, None) | ("output", "", None) | ("grad", input, Tensor)


@dataclass(frozen=True, slots=True)
class _Cast:
    """How one operand is cast for one matmul: ``None`` granularity = kept in high precision."""

    granularity: str | None  # "tensor" | "axis" | None
    dim: int = -1  # the axis reduced (axiswise)


@dataclass(frozen=True, slots=True)
class _Recipe:
    input: _Cast
    weight: _Cast
    grad_output: _Cast
    weight_for_grad_input: _Cast
    grad_output_for_grad_weight: _Cast
    input_for_grad_weight: _Cast
    pow2: bool  # round_scales_to_power_of_2


_T, _A0, _A1 = _Cast("tensor"), _Cast("axis", 0), _Cast("axis", -1)
_HP = _Cast(None)
#: ``Float8LinearConfig.from_recipe_name``; the dims are ``get_maybe_axiswise_dim``'s in
#: ``matmul_with_hp_or_float8_args`` (input -1, weight_t 0; backward: grad_output -1, weight_t -1 for the
#: input gradient, grad_output 0 and input 0 for the weight gradient).
_RECIPES = {
    "tensorwise": _Recipe(_T, _T, _T, _T, _T, _T, pow2=False),
    "rowwise": _Recipe(_A1, _A0, _A1, _A1, _A0, _A0, pow2=True),
    "rowwise_with_gw_hp": _Recipe(_A1, _A0, _A1, _T, _HP, _HP, pow2=True),
}
#: Fast accumulation: the forward's matmul only (``gemm_config_output=Float8GemmConfig(use_fast_accum=True)``).
_FAST = {"output": True, "grad_input": False, "grad_weight": False}


def float8_kind(recipe: str) -> str:
    """The kernel kind of a Float8 linear's matmul under ``recipe``."""
    if recipe not in RECIPES:
        raise ValueError(f"fp8 recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    return f"float8_{recipe}"


class _Script:
    """Events of one autograd function call, each temporary named after the kernel's output."""

    def __init__(self, k: Kernel) -> None:
        self.k, self.n = k, 0
        self.events: list[Event] = []

    def new(self, what: str, shape: tuple, dt: DType) -> str:
        self.n += 1
        t = Tensor(f"{self.k.outputs[0].name}:{what}", shape, dt, role="gradient")
        key = f"{self.n}:{what}"
        self.events.append(("alloc", key, t))
        return key

    def free(self, *keys: str) -> None:
        self.events += [("free", key, None) for key in keys if key]

    def cast(self, shape: tuple, hp: DType, how: _Cast, pow2: bool, what: str) -> tuple[str, str, tuple]:
        """``hp_tensor_to_float8_dynamic``: returns the keys of the 8-bit data and its scale, and the scale's shape."""
        if how.granularity == "tensor":
            amax_shape: tuple = ()
        else:
            axis = how.dim % len(shape)
            amax_shape = tuple(const(1) if i == axis else d for i, d in enumerate(shape))
        a = self.new(f"{what}:abs", shape, hp)  # torch.abs(x)
        m = self.new(f"{what}:amax", amax_shape, hp)  # torch.max / torch.amax(..., keepdim=True)
        self.free(a)
        m64 = self.new(f"{what}:amax64", amax_shape, FP64)  # amax.to(torch.float64)
        c64 = self.new(f"{what}:clamp64", amax_shape, FP64)  # torch.clamp(amax, min=EPS)
        r64 = self.new(f"{what}:rcp64", amax_shape, FP64)  # finfo.max / (...): reciprocal, then mul
        s64 = self.new(f"{what}:scale64", amax_shape, FP64)
        self.free(r64, c64)
        scale = self.new(f"{what}:scale", amax_shape, FP32)  # res.to(torch.float32)
        self.free(s64)
        if pow2:  # _round_scale_down_to_power_of_2: exp2(floor(log2(x)))
            lg = self.new(f"{what}:log2", amax_shape, FP32)
            fl = self.new(f"{what}:floor", amax_shape, FP32)
            self.free(lg)
            rounded = self.new(f"{what}:scale2", amax_shape, FP32)
            self.free(fl, scale)
            scale = rounded
        self.free(m64, m)
        x32 = self.new(f"{what}:fp32", shape, FP32)  # tensor.to(torch.float32)
        xs = self.new(f"{what}:scaled", shape, FP32)  # ... * scale
        self.free(x32)
        xc = self.new(f"{what}:clamped", shape, FP32)  # x.clamp(min=-max, max=max)
        data = self.new(f"{what}:fp8", shape, FP8)  # x.to(float8_dtype)
        self.free(xc, xs)
        return data, scale, amax_shape

    def scaled_mm(self, a: tuple, b: tuple, out: str | tuple, gemm: str) -> None:
        """``float8_mm``: ``a`` and ``b`` are (rows, cols, row_major, scale_shape) of the operands as passed;
        ``out`` is "output" (the kernel's output) or (key, Tensor) of a gradient."""
        (m, ka, a_rm, sa), (kb, n, b_rm, sb) = a, b
        copies = []
        if not a_rm:
            copies.append(self.new(f"{gemm}:a_contiguous", (m, ka), FP8))
        if b_rm:
            copies.append(self.new(f"{gemm}:b_contiguous", (kb, n), FP8))
        repeat = ""
        if sa == () and sb != ():
            repeat, sa = self.new(f"{gemm}:a_scale_rows", (m, const(1)), FP32), (m, const(1))
        elif sa != () and sb == ():
            repeat, sb = self.new(f"{gemm}:b_scale_cols", (const(1), n), FP32), (const(1), n)
        ra = self.new(f"{gemm}:a_rcp", sa, FP32)
        rb = self.new(f"{gemm}:b_rcp", sb, FP32)
        rowwise = sa != () and sb != ()
        post = ""
        if rowwise and not _FAST[gemm]:  # post_inverse_scale = a_inv * b_inv; both set to new_ones(())
            post = self.new(f"{gemm}:post_scale", (m, n), FP32)
            one_a = self.new(f"{gemm}:one_a", (), FP32)
            self.free(ra)
            one_b = self.new(f"{gemm}:one_b", (), FP32)
            self.free(rb)
            ra, rb = one_a, one_b
        if out == "output":
            self.events.append(("output", "", None))
        else:
            self.events.append(("grad", *out))
        self.free(ra, rb, post, *copies, repeat)


def _forward(recipe: _Recipe) -> Callable[[Kernel, Callable[[str], Tensor]], list[Event]]:
    def script(k: Kernel, like: Callable[[str], Tensor]) -> list[Event]:
        x, w = like(k.inputs[0]), like(k.inputs[1])
        n_out, k_in = w.shape
        rows = prod(x.shape[:-1])
        sc = _Script(k)
        xd, xs, xa = sc.cast(x.shape, x.dtype, recipe.input, recipe.pow2, "input")
        wd, ws, wa = sc.cast((k_in, n_out), w.dtype, recipe.weight, recipe.pow2, "weight")
        # a: the input (rows, k) row-major; b: weight.t() (k, n), column-major as cast (to() keeps strides)
        sa = () if xa == () else (rows, const(1))
        sb = () if wa == () else (const(1), n_out)
        sc.scaled_mm((rows, k_in, True, sa), (k_in, n_out, False, sb), "output", "output")
        sc.free(wd, ws, xd, xs)  # the function's locals, the weight's cast first
        return sc.events
    return script


def _backward(recipe: _Recipe) -> Callable[[Kernel, Callable[[str], Tensor]], list[Event]]:
    def script(k: Kernel, like: Callable[[str], Tensor]) -> list[Event]:
        x, w, y = like(k.inputs[0]), like(k.inputs[1]), k.outputs[0]
        n_out, k_in = w.shape
        rows = prod(x.shape[:-1])
        hp, p2 = y.dtype, recipe.pow2
        sc = _Script(k)
        god, gos, goa = sc.cast((rows, n_out), hp, recipe.grad_output, p2, "grad_output")
        wd, ws, wa = sc.cast((k_in, n_out), w.dtype, recipe.weight_for_grad_input, p2, "weight")
        # grad_input = go @ weight_t.t(): a (rows, n) row-major; b (n, k) row-major (the cast kept weight_t's
        # column-major strides), copied
        sa = () if goa == () else (rows, const(1))
        sb = () if wa == () else (const(1), k_in)
        dx = Tensor(f"{y.name}:d({k.inputs[0]})", x.shape, x.dtype, role="gradient")
        sc.scaled_mm((rows, n_out, True, sa), (n_out, k_in, True, sb), (k.inputs[0], dx), "grad_input")
        dw = Tensor(f"{y.name}:d({k.inputs[1]})", w.shape, w.dtype, role="gradient")
        kept = [god, gos, wd, ws]
        if recipe.grad_output_for_grad_weight.granularity is None:  # torch.mm(grad_output.t(), input_hp)
            sc.events.append(("grad", k.inputs[1], dw))
        else:
            g1d, g1s, g1a = sc.cast((rows, n_out), hp, recipe.grad_output_for_grad_weight, p2, "grad_output_gw")
            xd, xs, xa = sc.cast((rows, k_in), x.dtype, recipe.input_for_grad_weight, p2, "input")
            # grad_weight = go.t() @ x: a (n, rows) column-major, copied; b (rows, k) row-major, copied
            sa = () if g1a == () else (n_out, const(1))
            sb = () if xa == () else (const(1), k_in)
            sc.scaled_mm((n_out, rows, False, sa), (rows, k_in, True, sb), (k.inputs[1], dw), "grad_weight")
            kept += [g1d, g1s, xd, xs]
        sc.free(*kept)  # the locals, in the order backward binds them
        return sc.events
    return script


def _rule(name: str) -> Rule:
    recipe = _RECIPES[name]
    return Rule(lambda k, needs: (k.inputs[0], k.inputs[1]), lambda k, like, needs: ((), ()),
                source=f"{SOURCE}: recipe {name}", script=_forward(recipe), backward_script=_backward(recipe))


KINDS.update({float8_kind(name): _rule(name) for name in RECIPES})


# --- the graph transform ------------------------------------------------------------------------
def _divisible(shape: tuple, values: Any) -> bool:
    return all(int(d.evaluate(values) if isinstance(d, Expr) else d) % 16 == 0 for d in shape)


@dataclass(frozen=True, slots=True)
class Float8Training:
    """``convert_to_float8_training`` with torchtitan's filter: every ``nn.Linear`` whose in and out features
    are multiples of 16 becomes a ``Float8Linear`` (torchtitan: "nn.Linear modules with any dim size not
    divisible by 16 are always skipped"); ``conv1d``: the paths that are transformers' ``Conv1D`` (GPT-2's
    layers), which torchao does not swap. ``values``: the model's sizes (whether a dim divides by 16).

    ``tp_plan``: torchtitan's Float8 tensor parallelism, which it applies with tensorwise scaling and tp > 1
    (``TP_SOURCE``): the attention's and the feed-forward's input is cast to 8 bits on its sequence shard and
    all-gathered in 8 bits (``PrepareFloat8ModuleInput``), so every column-parallel layer linear (q, k, v, gate, up)
    saves that gathered 8-bit tensor, whole over the sequence, one per module; each row-parallel one (o, down) casts
    its head- or width-sharded input (``Float8RowwiseParallel``) and saves the 8-bit cast; beside each, the cast's
    fp32 scale (one per tensor). The reduce-scatters of the outputs stay 16-bit, the norms' outputs are not saved
    by the linears; the output layer keeps torchtitan's plain ``ColwiseParallel`` (a 16-bit gather and input).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, l
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> up = bb.linear("mlp/up", bb.input, 4 * h, bias=False, parallel="column")
    >>> _ = bb.linear("mlp/down", up, h, bias=False, parallel="row")
    >>> g = Float8Training("tensorwise", {h: 64}, tp_plan=True)(Graph("mlp", (bb.build(repeat=l),)))
    >>> saved = [x for op in g.blocks[0].ops for x in op.saved]
    >>> [(x.name, x.seq_axis) for x in saved]  # up's input gathered: no sequence axis for SP to split
    [('in:fp8', None), ('in:fp8.scale', None), ('mlp/up.out:fp8', 1), ('mlp/up.out:fp8.scale', None)]
    >>> [x.nbytes for x in saved]
    [b*h*s, 4, 4*b*h*s, 4]
    """

    recipe: str
    values: Any
    conv1d: bool = False
    tp_plan: bool = False
    keep_output: bool = False  # module_filter_fn fqn != "output": the output layer (block "head") stays 16-bit

    @property
    def name(self) -> str:
        return f"Float8 linears (torchao {self.recipe}{', Float8 tensor parallelism' if self.tp_plan else ''})"

    def weights(self, graph: Graph) -> tuple[str, ...]:
        """``block/param`` of every weight whose linear is converted."""
        out = []
        for blk, op in graph.ops():
            if op.kind != "linear" or (self.conv1d and blk.name == "layer") or (self.keep_output and blk.name == "head"):
                continue
            ws = [p for p in op.params if p.role == "weight"]
            if op.path == "attn/qkv" and op.program:  # held as q_proj, k_proj, v_proj
                parts = [t for kern in op.program if kern.kind == "parameters" for t in kern.outputs
                         if t.role == "weight"]
                if parts and all(_divisible(t.shape, self.values) for t in parts):
                    out += [f"{blk.name}/{w.name}" for w in ws]
                continue
            out += [f"{blk.name}/{w.name}" for w in ws if _divisible(w.shape, self.values)]
            if not ws:  # a tied head: the embedding's weight (``embed/tokens.weight``) read here
                out += [name for name in sorted({f.param for f in op.flops if f.phase == "weight-grad" and f.param})
                        if self._tied_ok(graph, name)]
        return tuple(dict.fromkeys(out))

    def _tied_ok(self, graph: Graph, name: str) -> bool:
        shapes = [p.shape for blk, op in graph.ops() for p in op.params if f"{blk.name}/{p.name}" == name]
        return bool(shapes) and _divisible(shapes[0], self.values)

    def __call__(self, graph: Graph) -> Graph:
        chosen = set(self.weights(graph))
        kind = float8_kind(self.recipe)
        blocks = []
        for blk in graph.blocks:
            ops = []
            for op in blk.ops:
                if op.kind == "linear" and op.program and param_in(blk.name, op, chosen) \
                        or op.kind == "linear" and op.program and not op.params and any(
                            kern.inputs[-1] in chosen for kern in op.program):
                    op = replace(op, program=_converted(op.program, kind))
                ops.append(op)
            blocks.append(replace(blk, ops=tuple(ops)))
        kept = [f"{blk.name}/{op.path}" for blk, op in graph.ops() if op.kind == "linear" and not is_float8(graph, blk.name, op, chosen)]
        note = (f"fp8: torchao Float8Linear ({self.recipe}) for {len(chosen)} linear weight(s) whose dims divide "
                f"by 16" + (f"; 16-bit still ({'Conv1D, or ' if self.conv1d else ''}"
                            f"{'the output layer by --fp8-keep-output, or ' if self.keep_output else ''}a dim not "
                            f"divisible by 16): {', '.join(kept)}" if kept else ""))
        if not self.tp_plan:
            note += f"; {SAVED_NOTE}"
        else:
            blocks = [replace(blk, ops=tuple(_planned(op) if is_float8(graph, blk.name, op, chosen) else op
                                             for op in blk.ops)) if blk.name == "layer" else blk for blk in blocks]
            note += ("; torchtitan's Float8 tensor parallelism (tensorwise): each layer linear saves its input as the "
                     "8-bit cast the plan made (q, k, v and gate, up: one all-gathered, whole over the sequence, per "
                     "module; o and down: their sharded input) and its fp32 scale, its 16-bit weight as it is; the "
                     "all-gathers of those inputs and of o's and down's output gradients run in 8 bits, the "
                     f"reduce-scatters in 16 ({TP_SOURCE})")
        return replace(graph, blocks=tuple(blocks), strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,), float8=frozenset(chosen))

    def unplanned(self, graph: Graph) -> tuple[str, ...]:
        """The layer ops torchtitan's Float8 TP plan cannot take: linears left 16-bit (``Float8ColwiseParallel``
        and ``Float8RowwiseParallel`` raise on a module that is not a ``Float8Linear``) and expert ops (the plan is
        the dense Llama's, ``apply_tp``)."""
        chosen = set(self.weights(graph))
        return tuple(f"{blk.name}/{op.path}" for blk, op in graph.ops() if blk.name == "layer" and (
            op.kind == "experts" or op.kind == "linear" and not is_float8(graph, blk.name, op, chosen)))


def _planned(op: Any) -> Any:
    """``op`` (a converted layer linear) as torchtitan's Float8 TP plan runs it: its saved input is the 8-bit cast
    (``<input>:fp8``), all-gathered (no sequence axis left for sequence parallelism to split) where the linear is
    column-parallel, with the cast's fp32 scale (``<input>:fp8.scale``, 0-d: tensorwise)."""
    x = op.inputs[0]
    gathered = op.column_parallel
    saved: list[Tensor] = []
    for t in op.saved:
        saved += [replace(t, name=f"{x}:fp8", dtype=FP8, seq_axis=None if gathered else t.seq_axis),
                  Tensor(f"{x}:fp8.scale", (), FP32, role=t.role)] if t.name == x else [t]
    saved_for: list[tuple[str, tuple[str, ...]]] = []
    for name, grads in op.saved_for:
        saved_for += [(f"{x}:fp8", grads), (f"{x}:fp8.scale", grads)] if name == x else [(name, grads)]
    return replace(op, saved=tuple(saved), saved_for=tuple(saved_for))


def tp_planned(graph: Graph) -> frozenset[str]:
    """The weights (``block/param``) of the layer linears that torchtitan's Float8 TP plan covers: every Float8
    layer linear (the output layer keeps a plain ``ColwiseParallel``)."""
    return frozenset(f"{blk.name}/{p.name}" for blk, op in graph.ops() if blk.name == "layer"
                     and is_float8(graph, blk.name, op) for p in op.params if p.role == "weight")


def is_float8(graph: Graph, block: str, op: Any, chosen: Any = None) -> bool:
    """Whether ``op`` of ``block`` is a Float8 linear: one of its weights (or the tied weight it reads) converted."""
    if op.kind != "linear":
        return False
    chosen = graph.float8 if chosen is None else chosen
    return param_in(block, op, chosen) or any(f.param in chosen for f in op.flops if f.param and "/" in f.param)


def param_in(block: str, op: Any, names: Collection[str]) -> bool:
    """Whether one of ``op``'s parameters, named ``block/param``, is among ``names`` (``tp_planned``'s weights,
    ``Graph.float8``, ``timing.quantized_gathers``').

    >>> from types import SimpleNamespace as N
    >>> param_in("layer", N(params=(N(name="attn.q.weight"),)), {"layer/attn.q.weight"})
    True
    """
    return any(f"{block}/{p.name}" in names for p in op.params)


def weight_grad_in_float8(recipe: str) -> bool:
    """Whether a Float8 linear's weight gradient is a scaled 8-bit matmul under ``recipe``: its operands are cast
    (``_RECIPES``); ``rowwise_with_gw_hp`` keeps it a 16-bit ``mm``."""
    r = _RECIPES[recipe]
    return r.grad_output_for_grad_weight.granularity is not None and r.input_for_grad_weight.granularity is not None


def float8_matmul_flops(graph: Graph, recipe: str, phases: tuple[str, ...]) -> Any:
    """The matmul FLOPs that run as scaled 8-bit matmuls: every matmul term of a Float8 linear in ``phases``, less
    the weight gradient where the recipe keeps it 16-bit (``weight_grad_in_float8``), over the block's repeats."""
    skipped = () if weight_grad_in_float8(recipe) else ("weight-grad",)
    total: Any = const(0)
    for blk, op in graph.ops():
        if not is_float8(graph, blk.name, op):
            continue
        for f in op.flops:
            if f.kind == "matmul" and f.phase in phases and f.phase not in skipped:
                total = total + blk.repeat * op.share * f.count
    return total


def _converted(program: tuple[Kernel, ...], kind: str) -> tuple[Kernel, ...]:
    """``mm(x, W)`` becomes the Float8 function; ``addmm(bias, x, W)`` the function then ``output + bias``."""
    out: list[Kernel] = []
    for kern in program:
        if kern.kind == "mm":
            out.append(replace(kern, kind=kind))
        elif kern.kind == "addmm":
            bias, x, w = kern.inputs
            res = replace(kern.outputs[0], name=f"{kern.outputs[0].name}:float8_mm")
            out += [Kernel(kind, (x, w), (res,)), Kernel("add", (res.name, bias), kern.outputs, keep=kern.keep)]
        else:
            out.append(kern)
    return tuple(out)
