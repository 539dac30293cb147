"""What transformers' own layers save, as a ``Graph -> Graph`` transform of the Megatron-style graph.

The graph of ``derivations.models.architectures`` describes fused kernels as Megatron-LM runs them
(``symbolic/ops.py``). transformers' modeling files save more, and in other dtypes; measured with
``saved_tensors_hooks`` on whole ``*ForCausalLM`` forwards (``tests/test_hf_saved.py``):

* ``LlamaRMSNorm`` is Python: ``x.to(float32)`` is saved (by ``pow`` and ``mul``), with the fp32
  ``rsqrt`` and the bf16 normalized value (saved by ``weight *``): 4 + 2 bytes per element instead of
  the fused kernel's 2.
* Eager attention (LLaMA-style families) runs ``softmax(dtype=float32)``: the fp32 probabilities are
  saved beside the 16-bit copy the second matmul saves; ``repeat_kv`` copies K and V to all ``a``
  heads before the matmuls save them. GPT-2's eager softmax stays 16-bit.
* Rotary ``cos``/``sin`` (s, d_h) are computed once per forward and saved by every layer's muls (counted
  once, in the ``head`` block, which is live whenever anything trains).
* ``gelu_new`` (NewGELUActivation, Python) saves its input, ``0.5*x``, ``tanh(.)`` and ``1 + tanh(.)``.
* SDPA saves q, k, v (a_kv heads: ``enable_gqa``), the output and the fp32 logsumexp (b, a, s).

CPU and CUDA differ (``device``): on CPU ``F.dropout`` saves a mask in the input's dtype (CUDA's
``native_dropout``: 1-byte bool); ``F.layer_norm`` with bf16 weights returns bf16 mean/rstd on CPU
(fp32 on CUDA); SDPA with dropout has no CPU fused kernel and falls back to the math backend, which
upcasts to fp32 and saves what eager attention saves, in fp32, with K and V repeated. The default is
CUDA (what users train on); the tests measure CPU and pin the difference. CUDA's flash kernel also
saves two 8-byte RNG tensors (seed, offset) per layer: neglected.

>>> from memderive.symbolic.ops import BlockBuilder
>>> from memderive.symbolic.graph import Graph
>>> from memderive.symbolic.dims import b, s, h
>>> from memderive.symbolic.dtypes import dtype
>>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
>>> _ = bb.rms_norm("norm", bb.input)
>>> g = HuggingFace("eager")(Graph("toy", (bb.build(),)))
>>> [(x.name, x.dtype.name) for x in g.block("layer").ops[0].saved]
[('norm.x_fp32', 'fp32'), ('norm.rstd', 'fp32'), ('norm.normed', 'bf16')]
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.strategies import Strategy
from memderive.symbolic.tensor import Tensor

__all__ = ["HuggingFace", "ATTENTION_KERNELS", "DEVICES"]

ATTENTION_KERNELS = ("eager", "sdpa", "flash")
DEVICES = ("cuda", "cpu")
FP32, BOOL = dtype("fp32"), dtype("bool")
SCORES = "attention-scores"


def _like(x: Tensor, name: str, dt: DType | None = None, shape: tuple | None = None, role: str | None = None) -> Tensor:
    return Tensor(name, x.shape if shape is None else shape, dt or x.dtype, role=role or x.role,
                  tp_axis=x.tp_axis, seq_axis=x.seq_axis)


@dataclass(frozen=True, slots=True)
class HuggingFace(Strategy):
    """transformers' modeling code: ``attention`` kernel, ``device`` (cuda | cpu), per-family details.

    ``python_gelu``: the MLP's GeLU is ``gelu_new`` (Python tanh formula, GPT-2); ``fp32_softmax``:
    eager attention upcasts the softmax (LLaMA, Mistral, Qwen2; not GPT-2).
    """

    attention: str = "sdpa"
    device: str = "cuda"
    python_gelu: bool = False
    fp32_softmax: bool = True

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KERNELS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KERNELS)}, not {self.attention!r}")
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, not {self.device!r}")

    @property
    def name(self) -> str:
        where = "" if self.device == "cuda" else ", as on CPU"
        return f"transformers layers (hf-{self.attention}{where})"

    def __call__(self, graph: Graph) -> Graph:
        blocks = tuple(blk.map_ops(self._op) for blk in graph.blocks)
        rotary = [op for blk in blocks for op in blk.ops if op.kind == "rotary"]
        if rotary and any(blk.name == "head" for blk in blocks):  # held while any layer's backward may need them
            blocks = tuple(_with_rotary_tables(blk, rotary[0]) if blk.name == "head" else blk for blk in blocks)
        note = (f"implementation: transformers' modeling code, {self.attention} attention"
                f"{' (CPU kernels)' if self.device == 'cpu' else ' (CUDA kernels)'}")
        return replace(graph, blocks=blocks, strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))

    # --- per op ----------------------------------------------------------------------------------
    def _op(self, op: Op) -> Op:
        if op.kind == "rms_norm":
            return self._rms_norm(op)
        if op.kind == "layer_norm" and self.device == "cpu":
            return replace(op, saved=tuple(_like(x, x.name, op.output.dtype) if x.role == "norm-stats" else x
                                           for x in op.saved))
        if op.kind == "dropout" and self.device == "cpu":
            return replace(op, saved=tuple(_like(x, x.name, op.output.dtype) for x in op.saved))
        if op.kind == "gelu" and self.python_gelu:
            x = op.saved[0]
            parts = tuple(_like(x, f"{op.path}.{k}", role="activation") for k in ("half_x", "tanh", "one_plus_tanh"))
            return _needs_inputs(replace(op, kind="gelu_new", saved=(x, *parts), note="NewGELUActivation (Python)"))
        if op.kind == "attention":
            return self._attention(op)
        return op

    def _rms_norm(self, op: Op) -> Op:
        """``LlamaRMSNorm``: fp32 copy of the input, fp32 rsqrt, 16-bit normalized value."""
        x, rstd = op.saved[0], op.saved[1]
        upcast = _like(x, f"{op.path}.x_fp32", FP32, role="activation")
        normed = _like(x, f"{op.path}.normed", op.output.dtype, role="activation")
        weights = tuple(w.name for w in op.params)
        saved_for = ((upcast.name, (x.name,)), (rstd.name, (x.name,)), (normed.name, weights))  # weight * normed
        return replace(op, kind="rms_norm", saved=(upcast, rstd, normed), note="LlamaRMSNorm (Python, fp32 copy)",
                       saved_for=saved_for if op.saved_for else ())

    def _attention(self, op: Op) -> Op:
        q = next(x for x in op.saved if x.role == "q")
        k = next(x for x in op.saved if x.role == "k")
        v = next(x for x in op.saved if x.role == "v")
        dropout = any(x.name.endswith(".dropout.mask") for x in op.saved)
        if self.attention == "eager":
            return self._eager(op, q, dropout, q.dtype, self.fp32_softmax, "eager_attention_forward")
        if self.device == "cpu" and dropout:  # no fused CPU kernel with dropout: math backend, fp32
            return self._eager(op, q, dropout, FP32, False, "SDPA math backend (CPU, dropout): fp32")
        lse = Tensor(f"{op.path}.logsumexp", q.shape[:3], FP32, role="softmax-stats", tp_axis=q.tp_axis,
                     seq_axis=q.seq_axis)
        return _needs_inputs(replace(op, kind="sdpa", saved=(q, k, v, op.output, lse),
                                     note="scaled_dot_product_attention"))

    def _eager(self, op: Op, q: Tensor, dropout: bool, dt: DType, fp32_softmax: bool, note: str) -> Op:
        """q, K and V repeated to a heads (``repeat_kv``), probabilities (fp32 and 16-bit), dropout.

        ``saved_for`` follows autograd: ``q k^T`` saves each for the other's gradient, softmax its output
        for the scores' (q's and k's), the cast 16-bit copy only as ``P v``'s operand (v's gradient).
        """
        bsz, heads, seq, d_head = q.shape
        full, scores = (bsz, heads, seq, d_head), (bsz, heads, seq, seq)
        qn, kn, vn = op.inputs if len(op.inputs) == 3 else ("q", "k", "v")
        q_in = _like(q, f"{op.path}.q_in", dt, full, "q") if dt != q.dtype else q
        saved: list[tuple[Tensor, tuple[str, ...]]] = [(q_in, (kn,)), (_like(q, f"{op.path}.k_rep", dt, full, "k"), (qn,))]
        upcast = fp32_softmax and dt != FP32  # in an fp32 model .to(float32) returns the same tensor
        if upcast:
            saved.append((_like(q, f"{op.path}.softmax_fp32", FP32, scores, SCORES), (qn, kn)))
        if not (upcast and dropout):  # the cast copy is saved only by P v; softmax's own output always
            probs = _like(q, f"{op.path}.softmax", dt, scores, SCORES)
            saved.append((probs, (vn,) if upcast else (qn, kn) if dropout else (qn, kn, vn)))
        if dropout:
            mask_dt = BOOL if self.device == "cuda" else dt
            saved += [(_like(q, f"{op.path}.dropout.mask", mask_dt, scores, SCORES), (qn, kn)),
                      (_like(q, f"{op.path}.dropout.out", dt, scores, SCORES), (vn,))]
        saved.append((_like(q, f"{op.path}.v_rep", dt, full, "v"), (qn, kn)))
        return replace(op, kind="attention", saved=tuple(x for x, _ in saved), note=note,
                       saved_for=tuple((x.name, grads) for x, grads in saved) if op.saved_for else ())


def _needs_inputs(op: Op) -> Op:
    """Every saved tensor serves the gradients of the op's inputs (where the op declares them)."""
    if not op.saved_for:
        return op
    return replace(op, saved_for=tuple((x.name, op.inputs) for x in op.saved))


def _with_rotary_tables(blk: Block, rotary: Op) -> Block:
    """cos and sin (s, d_h), 16-bit, made once per forward by the model's rotary embedding."""
    seq, d_head, act = blk.input.shape[1], rotary.output.shape[-1], rotary.output.dtype
    cos, sin = (Tensor(f"rotary.{k}", (seq, d_head), act, role="rotary-tables", seq_axis=0) for k in ("cos", "sin"))
    op = Op("rotary_tables", "rotary-tables", (), (cos, sin), sin,
            "cos/sin computed once per forward (by the model, before the layers), saved by every layer")
    return replace(blk, ops=(*blk.ops, op))
