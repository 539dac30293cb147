"""The values some options choose among, whose meaning the quantities define (``quantities.model_states``):
the precision recipes, the gradient buffers, the optimizers and the implementations (``models.implementations``). Kept below both, so that ``options`` validates
a choice without importing the quantities."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PRECISIONS", "GRAD_BUFFERS", "Optimizer", "OPTIMIZERS", "IMPLEMENTATIONS", "SHORTHANDS", "DESCRIPTIONS",
           "parse_implementation", "describe", "MOMENT_DTYPES", "MAIN_PARAM_DTYPES"]

#: The precision recipes: 16-bit model with an fp32 master copy, torch.autocast over an fp32 model, 16-bit only.
PRECISIONS = ("master", "autocast", "pure")
#: Where the optimizer's gradients live under ``master``: the weights' dtype (ZeRO's accounting), an fp32
#: buffer (Megatron-LM under --bf16, DeepSpeed's BF16_Optimizer), a 16-bit buffer and an fp32 copy (Megatron-LM
#: under --fp16).
GRAD_BUFFERS = ("param", "fp32", "param+fp32")
#: The dtypes of Adam's exp_avg and exp_avg_sq and of the main params under Megatron-Core's precision-aware
#: optimizer (megatron/training/arguments.py: --exp-avg-dtype / --exp-avg-sq-dtype fp32, fp16, bf16, fp8;
#: --main-params-dtype fp32, fp16; ``quantities.precision_aware``).
MOMENT_DTYPES = ("fp32", "bf16", "fp16", "fp8")
MAIN_PARAM_DTYPES = ("fp32", "fp16")


@dataclass(frozen=True, slots=True)
class Optimizer:
    name: str
    state_bytes: int  # bytes of optimizer state per parameter, master weights excluded
    states: str
    source: str
    paged: bool = False  # bitsandbytes paged optimizer: states in unified memory, evicted to the CPU
    like_param: bool = False  # torch.optim: states are zeros_like(param), in the parameter's dtype
    factored: bool = False  # Adafactor: second moments per matrix row and column (``factored_state_elements``)
    muon: bool = False  # Muon: a momentum for every parameter, Adam's second moment for those Muon does not own


OPTIMIZERS = {
    "adamw": Optimizer("adamw", 8, "fp32 momentum + fp32 variance", "Kingma & Ba 2015; ZeRO §3.1 (K = 12 with master)",
                          like_param=True),
    "adam": Optimizer("adam", 8, "fp32 momentum + fp32 variance", "Kingma & Ba 2015; ZeRO §3.1",
                          like_param=True),
    "adam-8bit": Optimizer("adam-8bit", 2, "8-bit momentum + 8-bit variance (block scales neglected)",
                           "Dettmers et al. 2022, arXiv:2110.02861"),
    "paged-adamw": Optimizer("paged-adamw", 8, "fp32 momentum + fp32 variance, paged",
                             "bitsandbytes PagedAdamW32bit; Dettmers et al. 2023 (QLoRA) §3", paged=True),
    "paged-adamw-8bit": Optimizer("paged-adamw-8bit", 2, "8-bit momentum + 8-bit variance, paged",
                                  "bitsandbytes PagedAdamW8bit", paged=True),
    "sgd-momentum": Optimizer("sgd-momentum", 4, "fp32 momentum buffer", "torch.optim.SGD(momentum>0)",
                                  like_param=True),
    "sgd": Optimizer("sgd", 0, "no state", "torch.optim.SGD(momentum=0)"),
    "adafactor": Optimizer("adafactor", 0, "fp32 factored second moments (the gradients' dtype under "
                           "--precision pure): a row and a column vector per matrix, "
                           "the whole second moment of a vector; no first moment (beta1=None)",
                           "Shazeer & Stern 2018 §3; torch.optim.Adafactor, transformers' Adafactor", factored=True),
    "muon": Optimizer("muon", 4, "fp32 momentum for the 2-D weights Muon orthogonalizes (Newton-Schulz); Adam's "
                      "fp32 exp_avg and exp_avg_sq for the rest: embedding, output layer, norms, biases",
                      "Jordan et al. 2024; Megatron-Core's TensorParallelMuon (emerging_optimizers)",
                      like_param=True, muon=True),
}


IMPLEMENTATIONS = ("megatron", "hf")
SHORTHANDS = {"hf-eager": ("hf", "eager"), "hf-sdpa": ("hf", "sdpa")}
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


def describe(implementation: str, attention: str) -> str:
    """One line for reports: ``hf-sdpa: transformers' modeling code``."""
    label = implementation if implementation == "megatron" else f"{implementation}-{attention}"
    return f"{label} ({DESCRIPTIONS[implementation]})"
