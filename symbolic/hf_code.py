"""What a family's transformers modeling code does, as the rules ``symbolic.huggingface`` applies.

Each field is one rule, named by what the code computes (not by family); the defaults are LLaMA's
code (``modeling_llama.py``, transformers 5.25). ``derivations.models.implementations`` says which
rules each family's code follows, citing its modeling file.

>>> HfCode().softmax_fp32, HfCode(rms_norm="offset").rules()
(True, ('RMSNorm: x * (1 + w) in fp32, cast after (the fp32 (1 + w) and normed value saved)',))
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from memderive.symbolic.kernel_choices import DEVICES

__all__ = ["HfCode", "RMS_NORMS", "LAYER_NORMS", "ROTARY_TABLES", "ATTENTION_KERNELS", "DEVICES"]

ATTENTION_KERNELS = ("eager", "sdpa", "flash")
#: How an RMSNorm multiplies by its weight: ``llama`` ``w * x.to(dt)`` (16-bit normed value saved),
#: ``fp32-product`` ``(w * x).to(dt)`` (fp32 normed value saved: OLMo 2, gpt-oss), ``offset``
#: ``(x * (1 + w.float())).to(dt)`` (fp32 normed value and the fp32 ``1 + w`` saved: Gemma).
RMS_NORMS = ("llama", "fp32-product", "offset")
#: ``fused``: ``nn.LayerNorm`` (``F.layer_norm``); ``python-fp32``: Cohere's mean-centred LayerNorm
#: written out in fp32 (two centred copies, rstd, the fp32 weight and the normed value saved); ``one-plus``:
#: ``F.layer_norm(x, shape, weight + 1.0, bias)`` (Nemotron's LayerNorm1P): the (h,) ``weight + 1`` saved too.
LAYER_NORMS = ("fused", "python-fp32", "one-plus")
#: ``shared``: cos/sin made once per forward, read by every layer (LLaMA); ``per-call``: each
#: ``apply_rotary_pos_emb`` call repeats them (``repeat_interleave``, GPT-J): saved per q and k per layer;
#: ``shared-fp32``: shared, kept in fp32 (OLMo 2's rotary embedding returns them uncast).
ROTARY_TABLES = ("shared", "shared-fp32", "per-call")

_RULES = {
    ("rms_norm", "fp32-product"): "RMSNorm: (w * x) in fp32, cast after (fp32 normed value saved)",
    ("rms_norm", "offset"): "RMSNorm: x * (1 + w) in fp32, cast after (the fp32 (1 + w) and normed value saved)",
    ("layer_norm", "python-fp32"): "LayerNorm written out in fp32 (centred copies, rstd, fp32 weight, normed value)",
    ("layer_norm", "one-plus"): "LayerNorm1P: F.layer_norm with weight + 1 (the (h,) sum saved by each norm)",
    ("softmax_fp32", False): "eager softmax in the activation dtype (no fp32 copy)",
    ("scores_fp32", True): "eager scores from fp32 copies of q and k (fp32 q, k and probabilities saved)",
    ("python_gelu", True): "GeLU is gelu_new, a Python formula (input, x/2, tanh and 1 + tanh saved)",
    ("rotary_tables", "per-call"): "rotary sin/cos repeated per call (saved per q and k per layer)",
    ("rotary_tables", "shared-fp32"): "rotary cos/sin kept in fp32",
    ("q_head_major", True): "q made contiguous head-major (torch.cat): SDPA's output copied before the output "
                            "projection (CPU and CUDA flash follow q's layout)",
    ("attn_softcap", True): "attention scores softcapped, c tanh(x / c): the tanh saved",
    ("logit_softcap", True): "final logits softcapped: the tanh of the logits saved",
    ("sdpa_mask", True): "SDPA always given the materialized causal mask (allow_is_causal_skip=False): K and V "
                         "repeated to a heads (no enable_gqa), the mask converted to q's dtype and saved per layer",
    ("rotary_sets", 2): "two rotary tables, local (sliding layers) and global RoPE bases",
    ("position_buffer", True): "position ids are a registered buffer (not saved as an activation)",
    ("bool_mask", True): "eager scores masked_fill'ed with a (b, 1, s, s) bool mask, saved once per forward",
    ("routing_fp32", True): "the router's top-k weights stay fp32: the experts' outputs are scaled by (and save) "
                            "fp32 weights",
    ("router_fp32", True): "the router's linear runs on fp32 copies of its input and weight "
                           "(F.linear(x.float(), w.float())): both copies saved",
    ("strided_views", ("q",)): "eager q a strided view of the fused q/k/v output: copied by matmul at b > 1, "
                               "the whole output held at b = 1",
    ("strided_views", ("v",)): "eager V a strided view of kv_b's output: copied by matmul at b > 1, the whole "
                               "output held at b = 1",
    ("sinks", True): "attention sinks: the scores cat'ed with each head's sink logit, their row max subtracted "
                     "(its int64 indices saved), a 16-bit softmax over s + 1 columns (no fp32 copy)",
    ("router_topk_first", True): "the router takes the top-k of its logits, then a 16-bit softmax over those k: "
                                 "the k indices and weights saved, not E-wide scores",
    ("clamped_glu", True): "experts' clamped SwiGLU: gate and up clamped, gate * sigmoid(alpha gate), (up + 1) * "
                           "glu (the gate_up output, clamped gate, sigmoid, glu and up + 1 saved)",
    ("rotary_half", True): "rotary cos/sin of the d/2 frequencies only (emb = freqs, no cat): tables half as wide",
    ("router_logits_fp32", True): "the router's logits cast to fp32 before its top-k: the softmax over the k "
                                  "saves fp32",
    ("sparsemixer", True): "sparsemixer router: per pick of two, the masked_fill mask (bool), the 16-bit softmax "
                           "(b, s, E), the chosen index and its multiplier saved",
    ("input_jitter", True): "input jitter: the MoE block and its router each multiply the input in place by uniform "
                            "noise (both 16-bit noise tensors saved)",
    ("router_group_mask", True): "group-limited routing masks the scores (masked_fill): its bool (b, s, E) mask saved",
}


@dataclass(frozen=True, slots=True)
class HfCode:
    """The rules one family's modeling code follows (defaults: LLaMA's)."""

    rms_norm: str = "llama"
    layer_norm: str = "fused"
    softmax_fp32: bool = True  # eager ``softmax(dtype=float32)``: fp32 probabilities beside the 16-bit copy
    scores_fp32: bool = False  # eager q k^T on fp32 copies (GPT-J, CodeGen, GPT-Neo)
    python_gelu: bool = False  # the MLP's GeLU is gelu_new (NewGELUActivation)
    rotary_tables: str = "shared"
    q_head_major: bool = False
    attn_softcap: bool = False  # Gemma 2: tanh of the scores
    logit_softcap: bool = False  # Gemma 2: tanh of the final logits
    sdpa_mask: bool = False  # Falcon: create_causal_mask(..., allow_is_causal_skip=False), so SDPA gets a mask
    rotary_sets: int = 1  # cos/sin tables made per forward: 2 with local and global RoPE bases (Gemma 3)
    position_buffer: bool = False  # position ids sliced from a registered buffer: not an activation (BERT)
    bool_mask: bool = False  # eager scores masked_fill'ed with the model's (b, 1, s, s) bool mask (MPT)
    routing_fp32: bool = False  # the router's top-k weights left in fp32 (Mixtral): the experts save them so
    router_fp32: bool = False  # the router's linear on fp32 copies of its input and weight (DeepSeek)
    router_group_mask: bool = False  # DeepSeek-V2's group_limited_greedy: scores.masked_fill(~mask, 0) saves the mask
    sinks: bool = False  # gpt-oss's eager attention with sinks: a 16-bit softmax over s + 1 columns
    router_topk_first: bool = False  # gpt-oss's router: top-k of the logits, then softmax over the k
    router_logits_fp32: bool = False  # GraniteMoE's router: F.linear(...).float(), then top-k and softmax in fp32
    clamped_glu: bool = False  # gpt-oss's experts: clamped SwiGLU, (up + 1) * gate * sigmoid(alpha gate)
    rotary_half: bool = False  # gpt-oss's rotary: cos/sin (s, d/2), each half rotated by the same table
    sparsemixer: bool = False  # Phi-MoE's router: sparsemixer (two masked softmaxes, PhimoeMultiplier)
    input_jitter: bool = False  # Phi-MoE with input_jitter_noise > 0: two in-place noise products saved
    strided_views: tuple[str, ...] = ()  # eager operands ("q", "v") that reach the matmuls as strided views of a
    # wider projection output (no rotary, no cache copy): matmul copies them at b > 1, views them (the whole output
    # held) at b = 1

    def __post_init__(self) -> None:
        for name, allowed in (("rms_norm", RMS_NORMS), ("layer_norm", LAYER_NORMS),
                              ("rotary_tables", ROTARY_TABLES)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")

    def rules(self) -> tuple[str, ...]:
        """The rules that differ from LLaMA's code, one line each (for a derivation's assumptions)."""
        return tuple(_RULES[(f.name, getattr(self, f.name))] for f in fields(self)
                     if (f.name, getattr(self, f.name)) in _RULES)
