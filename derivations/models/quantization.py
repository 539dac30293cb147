"""A checkpoint's ``quantization_config`` (config.json) read as the storage scheme of its linear weights.

Each method stores the weight matrices of the layers' linear modules in its own tensors (the byte
counts live in ``derivations.quantities.stored``); here the config is read: which method, its bits,
groups or blocks, static input scales, double quantization, and the modules it leaves in 16 bit.
A config memderive cannot store exactly is kept as a ``reason``: it becomes an error only when the
stored bytes are asked for (an explicit ``--weight-dtype`` overrides the checkpoint and needs none).

>>> q = read_quantization({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False})
>>> q.method, q.bits, q.group, q.label
('gptq', 4, 128, 'gptq 4-bit, groups of 128 (qweight, qzeros, scales, g_idx)')
>>> read_quantization({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}).reason
"awq version 'gemv' is not modelled (GEMM's qweight/qzeros/scales are); give --weight-dtype"
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Quantization", "read_quantization", "skips_module", "METHODS"]

#: Methods read, as ``quant_method`` names them (transformers' ``QuantizationMethod``; ``modelopt``: NVIDIA
#: TensorRT Model Optimizer's unified Hugging Face checkpoint, as vLLM names it, ``_modelopt``).
METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "gptq", "awq", "bitsandbytes", "mxfp4", "modelopt")
#: ModelOpt's ``quant_algo`` values read (``_modelopt``).
MODELOPT_ALGOS = ("FP8", "NVFP4")
_FLOAT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class Quantization:
    """The storage of the quantized linears (see the module docstring).

    ``scheme``: ``fp8`` (transformers' FineGrainedFP8), ``fbgemm_fp8``, ``ct-float``, ``ct-int``, ``ct-pack``
    (compressed-tensors' float-quantized, int/naive-quantized and pack-quantized formats), ``gptq``, ``awq``,
    ``nf4``/``fp4`` (bitsandbytes 4-bit), ``int8`` (bitsandbytes LLM.int8()), ``mxfp4``, ``modelopt-fp8``,
    ``modelopt-nvfp4`` (ModelOpt's per-tensor FP8 and NVFP4).
    ``group``: values per scale along the input features (None: per output channel or per tensor);
    ``block``: ``(rows, cols)`` of one scale (FP8 ``weight_block_size``); ``per_tensor``: one scale per matrix;
    ``scale_bytes``: bytes of one scale; ``skip``: the ``modules_to_not_convert`` / ``ignore`` patterns.
    """

    method: str
    scheme: str = ""
    bits: int = 16
    group: int | None = None
    block: tuple[int, int] | None = None
    per_tensor: bool = False
    static_input: bool = False
    zero_points: bool = False
    double_quant: bool = False
    act_order: bool = False
    scale_bytes: int = 2
    skip: tuple[str, ...] = ()
    regex_skip: bool = False  # compressed-tensors' ``ignore``: "re:" patterns, else exact names
    lm_head: bool = False  # GPTQ's ``lm_head``: the output layer quantized too
    reason: str = ""  # why the stored bytes cannot be derived ("" when they can)

    @property
    def label(self) -> str:
        """What the checkpoint declares, in words."""
        if self.reason:
            return f"{self.method} (not modelled)"
        groups = f"groups of {self.group}" if self.group else "one group per row"
        return {
            "fp8": "fp8 (FineGrainedFP8), weight_scale_inv per "
                   + (f"{self.block[0]}x{self.block[1]} block" if self.block else "tensor")
                   + (", static input scale" if self.static_input else ""),
            "fbgemm_fp8": "fbgemm_fp8: fp8 weight, one fp32 scale per output channel",
            "ct-float": f"compressed-tensors float-quantized fp8, {self._ct_scales()}",
            "ct-int": f"compressed-tensors int{self.bits}, {self._ct_scales()}",
            "ct-pack": f"compressed-tensors pack-quantized int{self.bits} in int32, {self._ct_scales()}",
            "gptq": f"gptq {self.bits}-bit, {groups} (qweight, qzeros, scales, g_idx)",
            "awq": f"awq {self.bits}-bit GEMM, {groups} (qweight, qzeros, scales)",
            "nf4": f"bitsandbytes nf4, absmax per 64 {'double-quantized' if self.double_quant else 'in fp32'}",
            "fp4": f"bitsandbytes fp4, absmax per 64 {'double-quantized' if self.double_quant else 'in fp32'}",
            "int8": "bitsandbytes LLM.int8(): int8 weight, one fp32 scale per row (SCB)",
            "mxfp4": "mxfp4: routed experts in 4-bit blocks, one e8m0 scale per 32",
            "modelopt-fp8": "ModelOpt FP8: fp8 weight, one fp32 weight_scale and input_scale per tensor",
            "modelopt-nvfp4": f"ModelOpt NVFP4: 4-bit weight two a byte, an fp8 weight_scale per {self.group} "
                              "inputs, fp32 weight_scale_2 and input_scale per tensor",
        }[self.scheme]

    def _ct_scales(self) -> str:
        kind = ("one scale per tensor" if self.per_tensor else f"one scale per {self.block[0]}x{self.block[1]} block"
                if self.block else f"one scale per {self.group} inputs" if self.group else "one scale per channel")
        return kind + (", zero points" if self.zero_points else "") + (", static input scale" if self.static_input
                                                                        else "")


def _int(cfg: Mapping[str, Any], key: str, default: Any) -> Any:
    value = cfg.get(key, default)
    return value if value is None or (isinstance(value, int) and not isinstance(value, bool)) else "bad"


def _names(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return tuple(value)
    return None


def read_quantization(cfg: Any, dtype_bytes: int = 2) -> Quantization:
    """The scheme a ``quantization_config`` declares (``dtype_bytes``: the checkpoint's 16-bit dtype,
    which compressed-tensors stores its scales in)."""
    if not isinstance(cfg, Mapping):
        return Quantization("?", reason="quantization_config is not a JSON object")
    method = cfg.get("quant_method")
    if method is None and ("quant_algo" in cfg or isinstance(cfg.get("quantization"), Mapping)):
        method = "modelopt"  # ModelOpt's export without the name vLLM reads it by (or its hf_quant_config nesting)
    if not isinstance(method, str):
        return Quantization("?", reason="quantization_config has no quant_method (nor ModelOpt's quant_algo); give "
                                        "--weight-dtype")
    if method not in METHODS:
        return Quantization(method, reason=f"quant_method {method!r} is not modelled (read: {', '.join(METHODS)}); "
                                           "give --weight-dtype")
    skip = _names(cfg.get("modules_to_not_convert"))
    if skip is None:
        return Quantization(method, reason="modules_to_not_convert must be a list of names")
    reader = {"fp8": _fp8, "fbgemm_fp8": _fbgemm, "compressed-tensors": _compressed, "gptq": _gptq, "awq": _awq,
              "bitsandbytes": _bnb, "mxfp4": _mxfp4, "modelopt": _modelopt}[method]
    return reader(cfg, method, skip, dtype_bytes)


def _fp8(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    """transformers' ``FineGrainedFP8Config``: ``weight_block_size`` (default [128, 128]; null: per tensor),
    ``activation_scheme`` (``dynamic`` default; ``static`` adds an fp32 activation scale per linear)."""
    block = cfg.get("weight_block_size", [128, 128])
    scheme = cfg.get("activation_scheme", "dynamic")
    if block is not None and not (isinstance(block, list) and len(block) == 2
                                  and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in block)):
        return Quantization(method, reason="weight_block_size must be two positive integers or null")
    if scheme not in ("dynamic", "static"):
        return Quantization(method, reason=f"activation_scheme {scheme!r} is neither dynamic nor static")
    return Quantization(method, "fp8", 8, block=tuple(block) if block else None, per_tensor=block is None,
                        static_input=scheme == "static", scale_bytes=4, skip=skip)


def _fbgemm(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    return Quantization(method, "fbgemm_fp8", 8, scale_bytes=4, skip=skip)


def _gptq(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    bits, group = _int(cfg, "bits", None), _int(cfg, "group_size", 128)
    if bits not in (2, 4, 8):
        return Quantization(method, reason=f"gptq bits {cfg.get('bits')!r} is not modelled (2, 4 or 8 pack into "
                                           "int32 evenly); give --weight-dtype")
    if group == "bad" or group == 0 or (group is not None and group < -1):
        return Quantization(method, reason="gptq group_size must be a positive integer or -1")
    if cfg.get("checkpoint_format", "gptq") not in ("gptq", "gptq_v2"):
        return Quantization(method, reason=f"gptq checkpoint_format {cfg.get('checkpoint_format')!r} is not "
                                           "modelled (gptq, gptq_v2 are); give --weight-dtype")
    return Quantization(method, "gptq", bits, group=None if group in (-1, None) else group, zero_points=True,
                        act_order=bool(cfg.get("desc_act")), skip=skip, lm_head=bool(cfg.get("lm_head")))


def _awq(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    bits, group = _int(cfg, "bits", 4), _int(cfg, "group_size", 128)
    version = str(cfg.get("version", "gemm")).lower()
    if bits not in (4, 8):
        return Quantization(method, reason=f"awq bits {cfg.get('bits')!r} is not modelled; give --weight-dtype")
    if not isinstance(group, int) or group < -1 or group == 0:
        return Quantization(method, reason="awq group_size must be a positive integer or -1")
    if version not in ("gemm", "exllama", "ipex"):  # exllama and ipex load the GEMM checkpoint layout
        return Quantization(method, reason=f"awq version {version!r} is not modelled (GEMM's qweight/qzeros/scales "
                                           "are); give --weight-dtype")
    return Quantization(method, "awq", bits, group=None if group == -1 else group, zero_points=bool(
        cfg.get("zero_point", True)), skip=skip)


def _bnb(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    """transformers' ``BitsAndBytesConfig`` as saved: ``_load_in_4bit``/``load_in_4bit``, ``bnb_4bit_quant_type``,
    ``bnb_4bit_use_double_quant``; skipped modules under ``llm_int8_skip_modules``."""
    four = bool(cfg.get("_load_in_4bit", cfg.get("load_in_4bit")))
    eight = bool(cfg.get("_load_in_8bit", cfg.get("load_in_8bit")))
    more = _names(cfg.get("llm_int8_skip_modules"))
    if more is None:
        return Quantization(method, reason="llm_int8_skip_modules must be a list of names")
    if four == eight:
        return Quantization(method, reason="bitsandbytes config must load in exactly one of 4 or 8 bit")
    if eight:
        return Quantization(method, "int8", 8, scale_bytes=4, skip=skip + more)
    kind = cfg.get("bnb_4bit_quant_type", "fp4")
    if kind not in ("nf4", "fp4"):
        return Quantization(method, reason=f"bnb_4bit_quant_type {kind!r} is neither nf4 nor fp4")
    return Quantization(method, kind, 4, group=64, double_quant=bool(cfg.get("bnb_4bit_use_double_quant")),
                        scale_bytes=4, skip=skip + more)


def _mxfp4(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    return Quantization(method, "mxfp4", 4, group=32, scale_bytes=1, skip=skip)


def _modelopt(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], _: int) -> Quantization:
    """NVIDIA ModelOpt's unified Hugging Face checkpoint (``quant_algo``; vLLM's ModelOptFp8Config and
    ModelOptNvFp4Config read the same tensors): FP8, per-tensor ``weight`` fp8 with an fp32 ``weight_scale`` and
    ``input_scale``; NVFP4, ``weight`` uint8 (two values a byte), ``weight_scale`` fp8 per ``group_size`` (16) inputs,
    fp32 ``weight_scale_2`` and ``input_scale``. Left alone: ``exclude_modules`` and ``ignore``, shell-style
    patterns (``*``, as vLLM's fnmatch reads them). ``quant_algo`` in any case; the fields may sit under
    ``quantization`` (hf_quant_config.json's nesting). Not counted: an FP8 KV cache's ``k_scale`` and ``v_scale``
    (fp32, 8 bytes a layer)."""
    if isinstance(cfg.get("quantization"), Mapping) and "quant_algo" not in cfg:
        cfg = cfg["quantization"]
    algo = str(cfg.get("quant_algo")).upper()
    if algo not in MODELOPT_ALGOS:
        return Quantization(method, reason=f"ModelOpt quant_algo {cfg.get('quant_algo')!r} is not modelled (read: "
                                           f"{', '.join(MODELOPT_ALGOS)}); give --weight-dtype")
    excluded, ignored = _names(cfg.get("exclude_modules")), _names(cfg.get("ignore"))
    if excluded is None or ignored is None:
        return Quantization(method, reason="ModelOpt exclude_modules and ignore must be lists of names")
    names = excluded + ignored
    skip = skip + tuple("re:" + fnmatch.translate(p) for p in names)
    if algo == "FP8":
        return Quantization(method, "modelopt-fp8", 8, per_tensor=True, static_input=True, scale_bytes=4, skip=skip,
                            regex_skip=True)
    group = _int(cfg, "group_size", 16)
    if not isinstance(group, int) or group <= 0:
        return Quantization(method, reason="ModelOpt group_size must be a positive integer")
    return Quantization(method, "modelopt-nvfp4", 4, group=group, per_tensor=True, static_input=True,
                        scale_bytes=1, skip=skip, regex_skip=True)


def _compressed(cfg: Mapping[str, Any], method: str, skip: tuple[str, ...], dtype_bytes: int) -> Quantization:
    """compressed-tensors' ``QuantizationConfig``: one config group targeting ``Linear``; its ``format`` (or
    the top-level one); weights' ``num_bits``, ``type``, ``strategy``, ``group_size``, ``block_structure``,
    ``symmetric``, ``actorder``; static ``input_activations`` add one input scale; ``ignore`` lists the
    modules left alone ("re:" patterns are regular expressions, others exact names)."""
    groups = cfg.get("config_groups")
    if not isinstance(groups, Mapping) or len(groups) != 1:
        return Quantization(method, reason="compressed-tensors with other than one config group is not modelled; "
                                           "give --weight-dtype")
    group = next(iter(groups.values()))
    if not isinstance(group, Mapping) or not isinstance(group.get("weights"), Mapping):
        return Quantization(method, reason="compressed-tensors config group has no weights arguments")
    weights, inputs = group["weights"], group.get("input_activations")
    fmt = group.get("format") or cfg.get("format")
    ignore = _names(cfg.get("ignore"))
    if ignore is None:
        return Quantization(method, reason="compressed-tensors ignore must be a list of names")
    bits, strategy = _int(weights, "num_bits", 8), weights.get("strategy", "tensor")
    size = _int(weights, "group_size", None)
    block = weights.get("block_structure")
    scheme = {"float-quantized": "ct-float", "int-quantized": "ct-int", "naive-quantized": "ct-int",
              "pack-quantized": "ct-pack"}.get(fmt)
    if scheme is None or bits not in (4, 8) or (scheme == "ct-float" and bits != 8):
        return Quantization(method, reason=f"compressed-tensors format {fmt!r} with {bits}-bit weights is not "
                                           "modelled (float-quantized fp8, int/naive-quantized and pack-quantized "
                                           "are); give --weight-dtype")
    if strategy not in ("tensor", "channel", "group", "block") or (strategy == "group" and not (
            isinstance(size, int) and size > 0)) or (strategy == "block" and not (
            isinstance(block, list) and len(block) == 2 and all(isinstance(x, int) and x > 0 for x in block))):
        return Quantization(method, reason=f"compressed-tensors weight strategy {strategy!r} (group_size "
                                           f"{weights.get('group_size')!r}) is not modelled; give --weight-dtype")
    static = isinstance(inputs, Mapping) and inputs.get("dynamic") is False
    return Quantization(method, scheme, bits, group=size if strategy == "group" else None,
                        block=tuple(block) if strategy == "block" else None, per_tensor=strategy == "tensor",
                        static_input=static, zero_points=weights.get("symmetric", True) is False,
                        act_order=strategy == "group" and weights.get("actorder") == "group",
                        scale_bytes=dtype_bytes, skip=ignore, regex_skip=True)


def skips_module(q: Quantization, name: str) -> bool:
    """Whether a module (its full name, ``model.layers.0.self_attn.q_proj``) is left unquantized: transformers'
    ``should_convert_module`` (a pattern matches from the start up to a module boundary, as a regular
    expression, or as a suffix); compressed-tensors' ``ignore`` (``re:`` regular expressions, else exact names).

    >>> q = Quantization("fp8", "fp8", skip=("model.layers.*.mlp.gate", "lm_head"))
    >>> [skips_module(q, f"model.layers.3.mlp.{x}") for x in ("gate", "gate_proj")]
    [True, False]
    """
    if q.regex_skip:
        return any(re.match(p[3:], name) if p.startswith("re:") else p == name for p in q.skip)
    boundary = r"(?:(?<=\.)|(?=\.|$))"
    return any(re.match(rf"(?:{p}){boundary}", name) or name.endswith(p) for p in q.skip)
