"""Megatron-Core's precision-aware optimizer (``--precision-aware-optimizer``, with ``--moments`` and
``--main-params``): Transformer Engine's ``FusedAdam`` keeps Adam's moments and the main params in the dtypes the run
names (megatron/core/optimizer/__init__.py ``get_megatron_optimizer``: ``exp_avg_dtype``, ``exp_avg_sq_dtype``,
``master_weight_dtype``, ``store_param_remainders``), under Megatron-Core's distributed optimizer.

Bytes per parameter, 16-bit weights of w bytes, the states sharded over the d ranks of the distributed optimizer:

* **weights** w; **gradients** the buffer's (``--grad-buffer``): ``param`` is Megatron-LM's ``--main-grads-dtype
  bf16`` (``accumulate_allreduce_grads_in_fp32`` stays off, the buffer in the weights' dtype), ``fp32`` its default
  (arguments.py sets ``accumulate_allreduce_grads_in_fp32`` under ``--bf16`` when main_grads_dtype is fp32). FusedAdam
  reads the buffer's shard in place (distrib_optimizer.py ``_copy_model_grads_to_main_grads``: ``decoupled_grad =
  shard_model_grad``, no copy).
* **main params**: FusedAdam's (``master_weights=True``), except under Transformer Engine's current or MX fp8
  scaling with fp32 main params (optimizer_config.py ``use_precision_aware_optimizer_no_fp8_or_ds_fp8`` false),
  where Megatron-Core keeps its own fp32 copy (4) and gives FusedAdam ``main_grad.float()``, an fp32 copy of a
  16-bit buffer's shard. FusedAdam's: fp16 main params 2; fp32 ones of bf16 weights only their low 16 bits, an int16
  remainder beside the bf16 weight (``store_param_remainders``, True by default in Megatron-Core's OptimizerConfig,
  passed from Transformer Engine 2.1 on), 2; fp32 ones of fp16 weights 4.
* **moments**: exp_avg and exp_avg_sq of the ``--moments`` width each (fp8: a Float8Tensor, 1 byte an element).
* **in the optimizer step only**: Megatron-Core's fp32 gradient copy above, and FusedAdam's fp32 copy of each state
  not kept in fp32 (Transformer Engine 2.9 and 2.12 ``FusedAdam.step``: ``get_unscaled_state`` is ``.float()`` of
  bf16, fp16 and fp8 moments and fp16 main params, for every parameter of the group before the kernel runs, freed
  after ``_apply_scale``), 4 bytes each; later Transformer Engine reads bf16 moments in the kernel itself
  (TransformerEngine#2632, 459e7cf4, after 2.12: not the runs' versions). The step runs after the backward has freed
  the activations.

Not counted: FusedAdam's per-tensor fp32 scalars (one scale per state not in fp32, and for fp8 moments the
quantizer's scale and amax and the tensor's scale_inv: at most 16 bytes per state of each parameter tensor).

>>> [PrecisionAware(m).widths("bf16", "param") for m in ("fp32", "bf16")]  # bf16 weights, fp32 main params
[AwareWidths(master=2, moments=8, copy=0, unscaled=0), AwareWidths(master=2, moments=4, copy=0, unscaled=8)]
>>> PrecisionAware("bf16", fp8="te-mxfp8").widths("bf16", "param")  # Megatron-Core's fp32 main params and copy
AwareWidths(master=4, moments=4, copy=4, unscaled=8)
"""

from __future__ import annotations

from dataclasses import dataclass

from memderive.derivations.options import Options
from memderive.symbolic.dtypes import dtype
from memderive.symbolic.formula import Citation

__all__ = ["PrecisionAware", "AwareWidths", "precision_aware", "PRECISION_AWARE_CITATION", "PRECISION_AWARE_NOTE",
           "aware_step_bytes", "MEGATRON_KEEPS_MAIN"]

PRECISION_AWARE_CITATION = Citation(
    "megatron-optimizer-init", "get_megatron_optimizer: Adam with exp_avg_dtype, exp_avg_sq_dtype; master_weights, "
    "master_weight_dtype, store_param_remainders when use_precision_aware_optimizer_no_fp8_or_ds_fp8",
    also=(Citation("megatron-distrib-optimizer-code", "_build_model_and_main_param_groups (main params held by "
                   "FusedAdam), _copy_model_grads_to_main_grads (decoupled_grad, or .float())"),
          Citation("te-fused-adam", "_initialize_state, get_unscaled_state, _apply_scale, step")))
#: The fp8 recipes under which Megatron-Core keeps fp32 main params itself (``fp8_recipe`` neither None nor
#: "delayed"; memderive's ``--fp8`` te-delayed is Transformer Engine's delayed scaling).
MEGATRON_KEEPS_MAIN = ("te-current", "te-mxfp8")
#: TE FusedAdam's unscale and rescale of a state not in fp32, HBM bytes per element beyond the kernel's fp32 read and
#: write (``get_unscaled_state`` and ``_apply_scale``, Transformer Engine 2.9): bf16 ``.float()`` (r 2, w 4), then
#: ``copy_(x.bfloat16())`` (r 4, w 2; r 2, w 2); fp16 ``.float()`` and ``mul_`` by its scale (r 2 w 4, r 4 w 4), then
#: ``aminmax`` (r 4), ``mul_`` (r 4, w 4) and ``copy_`` (r 4, w 2); fp8 ``.float()`` (r 1, w 4), then ``aminmax``
#: (r 4) and the quantizing ``copy_`` (r 4, w 1).
_RESCALE = {"fp32": 0, "bf16": 6 + 10, "fp16": 14 + 18, "fp8": 5 + 9}

PRECISION_AWARE_NOTE = (
    "Megatron-Core's precision-aware optimizer (Transformer Engine's FusedAdam): exp_avg and exp_avg_sq in the "
    "--moments dtype; the main params held by FusedAdam (fp32 ones of bf16 weights as 16-bit remainders beside "
    "the weights, store_param_remainders; fp16 ones 2 bytes), or by Megatron-Core in fp32 under --fp8 te-current "
    "or te-mxfp8 with fp32 main params, with an fp32 copy of 16-bit gradients in the step; FusedAdam's fp32 copies "
    "of the states not kept in fp32 live in the optimizer step only, so total_bytes adds only what they exceed the "
    "activations by; its per-tensor fp32 scales (at most 16 bytes per state of each parameter tensor) not counted")


@dataclass(frozen=True, slots=True)
class AwareWidths:
    """Bytes per parameter, each sharded with the optimizer states: the main params, both moments, and in the
    optimizer step only the fp32 gradient copy and the fp32 copies of the states not kept in fp32."""

    master: int
    moments: int
    copy: int
    unscaled: int


@dataclass(frozen=True, slots=True)
class PrecisionAware:
    """The precision-aware optimizer's dtypes: ``moments`` (exp_avg and exp_avg_sq), ``main_params``, and the run's
    ``fp8`` recipe (``--fp8``), which decides who keeps fp32 main params."""

    moments: str = "fp32"
    main_params: str = "fp32"
    fp8: str = "none"

    @property
    def megatron_keeps_main(self) -> bool:
        return self.fp8 in MEGATRON_KEEPS_MAIN and self.main_params == "fp32"

    def widths(self, param_dtype: str, grad_buffer: str) -> AwareWidths:
        """The bytes per parameter of 16-bit ``param_dtype`` weights with gradients in ``grad_buffer``."""
        grad = 4 if grad_buffer == "fp32" else dtype(param_dtype).nbytes
        moment = dtype(self.moments).nbytes
        unscaled = 2 * 4 * (self.moments != "fp32") + 4 * (self.main_params != "fp32")
        if self.megatron_keeps_main:
            return AwareWidths(4, 2 * moment, 4 if grad < 4 else 0, unscaled)
        if self.main_params == "fp16":
            master = 2
        else:  # store_param_remainders: the low 16 bits of an fp32 main param of a bf16 weight
            master = 2 if param_dtype == "bf16" else 4
        return AwareWidths(master, 2 * moment, 0, unscaled)

    def step_bytes(self, param_dtype: str, grad_buffer: str) -> int:
        """HBM bytes per parameter of one optimizer step (Transformer Engine 2.9's FusedAdam, ``multi_tensor_adam``
        kernels; ``_RESCALE``) and its gradient clipping, a norm read and a scaling of the gradient it reads.

        The kernel reads the gradient and both moments (fp32, unscaled) and writes the moments; the main params:
        ``AdamFunctorMasterParamRemainder`` reads and writes the bf16 weight and its int16 remainder (8),
        ``AdamFunctorMaster`` reads and writes the fp32 main param and writes the 16-bit weight (10), and where
        Megatron-Core keeps them ``AdamFunctor`` reads and writes fp32 params (8), the gradient copied to fp32 first
        (r w + w 4) and the main params copied into the 16-bit weights after (r 4, w 2).

        >>> PrecisionAware().step_bytes("bf16", "fp32")  # r g 4 + p, remainder 8 + moments 16; clipping 3 x 4
        40
        >>> PrecisionAware("bf16").step_bytes("bf16", "param")  # 2 + 8 + 2 (8 + 16) + 3 x 2
        64
        """
        width = dtype(param_dtype).nbytes
        grad = 4 if grad_buffer == "fp32" else width
        moments = 2 * (8 + _RESCALE[self.moments])
        if self.megatron_keeps_main:
            copy = width + 4 if grad < 4 else 0
            return copy + 4 + 8 + moments + 6 + 3 * 4
        main = self.widths(param_dtype, grad_buffer).master
        params = 8 if main == 2 and self.main_params == "fp32" else 10 + _RESCALE[self.main_params]
        return grad + params + moments + 3 * grad


def precision_aware(opts: Options) -> PrecisionAware | None:
    """The precision-aware optimizer of ``opts`` (None: Megatron-Core's usual fp32 states)."""
    if not opts.precision_aware_optimizer:
        return None
    return PrecisionAware(opts.moments, opts.main_params, opts.fp8)


def aware_step_bytes(opts: Options) -> int:
    """``PrecisionAware.step_bytes`` of ``opts`` (which run the precision-aware optimizer)."""
    aware = precision_aware(opts)
    if aware is None:
        raise ValueError("aware_step_bytes: the options do not run the precision-aware optimizer")
    return aware.step_bytes(opts.dtype, opts.grad_buffer)
