"""Implementations a training run may use, as graph variants: which code computes each op.

``megatron`` (the default) is the graph as built: Megatron-LM's fused kernels, the ops of
Korthikanti et al. 2022 (fused RMSNorm/LayerNorm, a 16-bit softmax, grouped K/V never copied).
``hf`` is transformers' own modeling code (``symbolic.huggingface.HuggingFace``), with its
attention kernel: ``hf-eager`` and ``hf-sdpa`` are shorthands that also set the kernel.

>>> from memderive.derivations.models.architectures import GPT, LLAMA
>>> hf_layers(LLAMA, "eager").fp32_softmax, hf_layers(GPT, "sdpa").fp32_softmax
(True, False)
>>> parse_implementation("hf-eager")
('hf', 'eager')
"""

from __future__ import annotations

from memderive.derivations.models.architectures import Arch
from memderive.symbolic.huggingface import HuggingFace

__all__ = ["IMPLEMENTATIONS", "SHORTHANDS", "PYTHON_GELUS", "parse_implementation", "hf_layers", "describe"]

IMPLEMENTATIONS = ("megatron", "hf")
SHORTHANDS = {"hf-eager": ("hf", "eager"), "hf-sdpa": ("hf", "sdpa")}
#: Activations transformers implements as Python formulas (every intermediate saved).
PYTHON_GELUS = frozenset({"gelu_new", "gelu_fast", "gelu_python_tanh"})
DESCRIPTIONS = {
    "megatron": "Megatron-LM fused kernels, as in Korthikanti et al. 2022",
    "hf": "transformers' modeling code",
}


def parse_implementation(name: str) -> tuple[str, str | None]:
    """``(implementation, attention kernel or None)`` for a name or shorthand; unknown names raise ValueError."""
    if name in SHORTHANDS:
        return SHORTHANDS[name]
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"--implementation must be one of {', '.join(IMPLEMENTATIONS + tuple(SHORTHANDS))}, "
                         f"got {name!r}")
    return name, None


def hf_layers(arch: Arch, attention: str, device: str = "cuda") -> HuggingFace:
    """The transform for ``arch`` in transformers: LLaMA-style (RMSNorm) families upcast the eager
    softmax to fp32 (``softmax(dtype=float32)``), GPT-2's stays 16-bit; ``gelu_new`` is Python."""
    return HuggingFace(attention, device, python_gelu=arch.mlp == "gelu" and arch.act_fn in PYTHON_GELUS,
                       fp32_softmax=arch.norm == "rmsnorm")


def describe(implementation: str, attention: str) -> str:
    """One line for reports: ``hf-sdpa: transformers' modeling code``."""
    label = implementation if implementation == "megatron" else f"{implementation}-{attention}"
    return f"{label} ({DESCRIPTIONS[implementation]})"
