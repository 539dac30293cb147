"""The options of an estimate: mode, sizes of a step, precision, optimizer and layout.

>>> Options(mode="train", batch=1, seq=2048, tp=8).strategy_names()
('tensor parallel',)
"""

from __future__ import annotations

from dataclasses import dataclass

from symbolic import dims
from symbolic.dtypes import dtype
from symbolic.errors import DerivationError
from symbolic.strategies import (FlashAttention, FullRecompute, PipelineParallel, SelectiveRecompute,
                                 SequenceParallel, Strategy, TensorParallel)

__all__ = ["Options", "OptionsError", "MODES", "RECOMPUTE", "PROFILES"]

MODES = ("params", "train", "infer")
TRAIN_DTYPES = ("fp32", "bf16", "fp16")
RECOMPUTE = ("none", "selective", "full")
#: Activation profiles: which saved tensors a profile neglects, and why.
PROFILES = {
    "exact": ((), "every tensor autograd saves"),
    "korthikanti": (("norm-stats", "token-ids", "loss-scalars"),
                    "Korthikanti et al. 2022 §4: LayerNorm statistics, token ids and loss scalars neglected"),
}


class OptionsError(DerivationError):
    """Options that contradict each other or the model."""


def _positive(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise OptionsError(f"--{name} must be a positive integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class Options:
    mode: str = "params"
    batch: int | None = None
    seq: int | None = None
    new_tokens: int = 0
    dtype: str = "bf16"  # parameter / compute dtype in training
    optimizer: str = "adamw"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    sp: bool = False
    zero: int = 0
    offload: bool = False
    recompute: str = "none"
    flash: bool = False
    dropout: bool = True
    micro_batches: int | None = None
    virtual_stages: int | None = None
    profile: str = "korthikanti"
    overhead_bytes: int = 0
    weight_dtype: str | None = None  # inference
    kv_dtype: str | None = None  # inference
    quant_group: int = 128
    implementation: str = "megatron"  # megatron | hf | hf-eager | hf-sdpa (derivations.models.implementations)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise OptionsError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        for name in ("batch", "seq", "tp", "pp", "dp", "micro_batches", "virtual_stages", "quant_group"):
            _positive(name.replace("_", "-"), getattr(self, name))
        for name in ("new_tokens", "overhead_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise OptionsError(f"--{name.replace('_', '-').replace('-bytes', '')} must be a whole number "
                                   f"that is not negative, got {value!r}")
        if self.recompute not in RECOMPUTE:
            raise OptionsError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        if self.zero not in (0, 1, 2, 3):
            raise OptionsError(f"--zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.zero and self.dp == 1:
            raise OptionsError(f"ZeRO stage {self.zero} shards over data parallelism; give --dp greater than 1")
        if self.sp and self.tp == 1:
            raise OptionsError("sequence parallelism splits over the tensor-parallel ranks; give --tp greater than 1")
        if self.profile not in PROFILES:
            raise OptionsError(f"--profile must be one of {', '.join(PROFILES)}, got {self.profile!r}")
        for name in ("dtype", "weight_dtype", "kv_dtype"):
            value = getattr(self, name)
            if value is not None:
                try:
                    dtype(value)
                except ValueError as exc:
                    raise OptionsError(f"--{name.replace('_', '-')}: {exc}") from None
        if self.mode == "train" and dtype(self.dtype).name not in TRAIN_DTYPES:
            raise OptionsError(f"--dtype {self.dtype} is not a training precision; choose one of "
                               f"{', '.join(TRAIN_DTYPES)} (bf16/fp16 = mixed precision with fp32 master weights)")
        if self.mode in ("train", "infer") and (self.batch is None or self.seq is None):
            raise OptionsError(f"--mode {self.mode} needs --batch and --seq")
        self._check_implementation()

    def _check_implementation(self) -> None:
        from derivations.models.implementations import parse_implementation

        try:
            kind, _ = parse_implementation(self.implementation)
        except ValueError as exc:
            raise OptionsError(str(exc)) from None
        if kind == "hf" and (self.tp > 1 or self.pp > 1 or self.sp or self.recompute == "selective"):
            raise OptionsError("transformers' layers run whole on each GPU and checkpoint whole layers: tensor, "
                               "sequence and pipeline parallelism and selective recompute are Megatron's; use "
                               "--implementation megatron with them")
        if self.implementation == "hf-eager" and self.flash:
            raise OptionsError("--flash contradicts --implementation hf-eager; use hf-sdpa (or hf --flash)")

    @property
    def implementation_kind(self) -> str:
        """``megatron`` or ``hf`` (shorthands resolved)."""
        from derivations.models.implementations import parse_implementation

        return parse_implementation(self.implementation)[0]

    @property
    def hf_attention(self) -> str:
        """The attention kernel transformers runs: the shorthand's, else ``--attention`` / ``--flash``, else
        sdpa (transformers' default ``attn_implementation``)."""
        from derivations.models.implementations import parse_implementation

        kernel = parse_implementation(self.implementation)[1]
        chosen = getattr(self, "attention", None)
        return kernel or chosen or ("flash" if self.flash else "sdpa")

    def strategies(self) -> tuple[Strategy, ...]:
        """The graph transforms these options apply, in order."""
        out: list[Strategy] = []
        if self.flash:
            out.append(FlashAttention())
        if self.recompute == "selective":
            out.append(SelectiveRecompute())
        elif self.recompute == "full":
            out.append(FullRecompute())
        # Degrees enter as symbols (t, p, m, v) so closed forms keep them; values come later.
        if self.tp > 1:
            out.append(TensorParallel(dims.t))
        if self.sp:
            out.append(SequenceParallel(dims.t))
        if self.pp > 1:
            out.append(PipelineParallel(dims.p, None if self.virtual_stages in (None, 1) else dims.v,
                                        None if self.micro_batches is None else dims.m))
        return tuple(out)

    def strategy_names(self) -> tuple[str, ...]:
        return tuple(x.name for x in self.strategies())
