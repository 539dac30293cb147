"""State space and hybrid models, written out by hand: Mamba 2 (transformers' ``mamba2``) and Bamba
(``bamba``: Mamba 2 mixers and a few attention layers, each followed by a SwiGLU MLP).

A Mamba 2 mixer (Dao & Gu 2024, arXiv:2405.21060, §7; transformers' ``Mamba2Mixer``) projects the
normed input once into z (d_in), x (d_in), B and C (n_g d_st each) and dt (n_sh); x, B, C pass a
depthwise causal convolution over conv_dim = d_in + 2 n_g d_st channels with kernel d_cv; A_log,
D and dt_bias are one number per head; the scan's output is gated by z in an RMSNorm (d_in) and
projected back to h. Instead of a KV cache each mixer keeps two states per sequence: the last d_cv
inputs of the convolution, (b, conv_dim, d_cv), and the SSM state, (b, n_sh, d_sh, d_st).

>>> m = ssm_model({"model_type": "mamba2", "hidden_size": 32, "num_heads": 8, "head_dim": 8,
...                "state_size": 16, "n_groups": 2, "num_hidden_layers": 2, "vocab_size": 100})
>>> m.parameters().total.evaluate(m.values())  # transformers' Mamba2ForCausalLM: 24,848 (tests)
24848
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from memderive.derivations.models.config_fields import ConfigError
from memderive.symbolic.derive import Breakdown, Term, parameters
from memderive.symbolic.dims import V, a, a_kv, b, d_cv, d_h, d_in, d_sh, d_st, f, h, l, l_a, n, n_g, n_sh, s
from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.expr import Expr
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.tensor import Tensor

__all__ = ["SsmModel", "SSM_MODEL_TYPES", "SSM_PRESETS", "ssm_model", "is_ssm", "find_ssm"]

SSM_MODEL_TYPES = ("mamba2", "bamba")
FP32, INT64 = dtype("fp32"), dtype("int64")
#: conv_dim: the channels the causal convolution sees (x, B and C).
CONV_DIM = d_in + 2 * n_g * d_st

SSM_PRESETS: dict[str, dict[str, Any]] = {
    # state-spaces/mamba2-2.7b config.json (mamba_ssm format: d_model 2560, n_layer 64, vocab_size 50277 padded
    # to pad_vocab_size_multiple 16, tie_embeddings true) with mamba_ssm's Mamba2 defaults (d_state 128, d_conv 4,
    # expand 2, headdim 64, ngroups 1), in transformers' Mamba2Config names
    "mamba2-2.7b": {"model_type": "mamba2", "hidden_size": 2560, "num_hidden_layers": 64, "vocab_size": 50288,
                    "num_heads": 80, "head_dim": 64, "state_size": 128, "n_groups": 1, "expand": 2,
                    "conv_kernel": 4, "tie_word_embeddings": True},
    # mistralai/Mamba-Codestral-7B-v0.1 config.json: transformers' Mamba2Config defaults (hidden 4096, 64 layers,
    # 128 heads of 64, state 128, 8 groups, vocabulary 32768, untied)
    "mamba-codestral-7b": {"model_type": "mamba2", "hidden_size": 4096, "num_hidden_layers": 64,
                           "vocab_size": 32768, "num_heads": 128, "head_dim": 64, "state_size": 128, "n_groups": 8,
                           "expand": 2, "conv_kernel": 4, "tie_word_embeddings": False},
}


def _param(name: str, *shape: Any) -> Tensor:
    return Tensor(name, tuple(shape), FP32, role="bias" if name.endswith("bias") else "weight")


def _op(path: str, kind: str, *params: Tensor, out: Tensor) -> Op:
    return Op(path, kind, tuple(params), (), out)


@dataclass(frozen=True, slots=True)
class SsmModel:
    """A Mamba 2 or Bamba model: sizes by dimension name and the switches its config sets."""

    name: str
    family: str
    sizes: Mapping[str, int]
    conv_bias: bool = True
    proj_bias: bool = False
    tied: bool = False
    attention_layers: tuple[int, ...] = ()  # hybrid: the indices of layers_block_type's attention layers
    source: str = ""

    def values(self) -> dict[Expr, int]:
        return {_sym(k): v for k, v in self.sizes.items()}

    def _mixer(self, act: DType) -> list[Op]:
        x = Tensor("in", (b, s, h), act)
        proj = Tensor("mixer/in_proj.out", (b, s, 2 * d_in + 2 * n_g * d_st + n_sh), act)
        out = Tensor("mixer/out_proj.out", (b, s, h), act)
        bias = self.proj_bias
        return [
            _op("norm", "rms_norm", _param("norm.weight", h), out=x),
            _op("mixer/in_proj", "linear", _param("mixer/in_proj.weight", 2 * d_in + 2 * n_g * d_st + n_sh, h),
                *((_param("mixer/in_proj.bias", 2 * d_in + 2 * n_g * d_st + n_sh),) if bias else ()), out=proj),
            _op("mixer/conv1d", "conv1d", _param("mixer/conv1d.weight", CONV_DIM, 1, d_cv),
                *((_param("mixer/conv1d.bias", CONV_DIM),) if self.conv_bias else ()), out=proj),
            _op("mixer/scan", "ssd", _param("mixer/dt_bias", n_sh), _param("mixer/A_log", n_sh),
                _param("mixer/D", n_sh), out=proj),
            _op("mixer/norm", "gated_rms_norm", _param("mixer/norm.weight", d_in), out=proj),
            _op("mixer/out_proj", "linear", _param("mixer/out_proj.weight", h, d_in),
                *((_param("mixer/out_proj.bias", h),) if bias else ()), out=out),
        ]

    def _attention_and_mlp(self, act: DType, mixer: bool) -> list[Op]:
        """Bamba's layer: input norm, the mixer or attention (q, k, v, o without bias), then pre-MLP norm and
        a SwiGLU MLP of width f."""
        ops = self._mixer(act) if mixer else [
            _op("norm", "rms_norm", _param("norm.weight", h), out=Tensor("in", (b, s, h), act)),
            _op("attn/q", "linear", _param("attn/q.weight", a * d_h, h), out=Tensor("q", (b, s, a * d_h), act)),
            _op("attn/k", "linear", _param("attn/k.weight", a_kv * d_h, h), out=Tensor("k", (b, s, a_kv * d_h), act)),
            _op("attn/v", "linear", _param("attn/v.weight", a_kv * d_h, h), out=Tensor("v", (b, s, a_kv * d_h), act)),
            _op("attn/o", "linear", _param("attn/o.weight", h, a * d_h), out=Tensor("o", (b, s, h), act))]
        hidden = Tensor("mlp/hidden", (b, s, f), act)
        return ops + [_op("mlp_norm", "rms_norm", _param("mlp_norm.weight", h), out=Tensor("r", (b, s, h), act)),
                      _op("mlp/gate", "linear", _param("mlp/gate.weight", f, h), out=hidden),
                      _op("mlp/up", "linear", _param("mlp/up.weight", f, h), out=hidden),
                      _op("mlp/down", "linear", _param("mlp/down.weight", h, f), out=Tensor("y", (b, s, h), act))]

    def graph(self, activation_dtype: str = "bf16") -> Graph:
        """Embeddings; the Mamba layers (l of them, l - l_a in a hybrid); the attention layers (hybrid); head."""
        act = dtype(activation_dtype)
        ids = Tensor("in", (b, s), INT64, role="token-ids")
        emb = Tensor("embed/tokens.out", (b, s, h), act)
        blocks = [Block("embed", (_op("tokens", "embedding", _param("embed/tokens.weight", V, h), out=emb),), ids)]
        hybrid = self.family == "bamba"
        mixer = self._attention_and_mlp(act, True) if hybrid else self._mixer(act)
        blocks.append(Block("mamba_layer", tuple(mixer), Tensor("in", (b, s, h), act), repeat=l - l_a if hybrid else l))
        if hybrid:
            blocks.append(Block("attention_layer", tuple(self._attention_and_mlp(act, False)),
                                Tensor("in", (b, s, h), act), repeat=l_a))
        logits = Tensor("lm_head.out", (b, s, V), act)
        head = [_op("final_norm", "rms_norm", _param("final_norm.weight", h), out=Tensor("x", (b, s, h), act)),
                _op("lm_head", "linear", *(() if self.tied else (_param("lm_head.weight", V, h),)), out=logits)]
        blocks.append(Block("head", tuple(op for op in head if op.params), Tensor("in", (b, s, h), act)))
        return Graph(self.name, tuple(blocks))

    def parameters(self) -> Breakdown:
        return parameters(self.graph())

    def state(self, state_dtype: str = "bf16") -> Breakdown:
        """The inference cache after a prefill of s tokens and n decode steps, bytes, as transformers' torch path
        holds it: per Mamba layer conv_state (b, conv_dim, d_cv) in the model's dtype, ssm_state (b, n_sh, d_sh, d_st)
        in fp32 (the chunked scan and the decode update compute it in fp32: modeling_mamba2.py, measured in
        tests/test_ssm.py) and the int64 position counter of cache_utils.LinearAttentionLayer; per attention layer
        keys and values (b, a_kv, s + n, d_h)."""
        return Breakdown(tuple(Term(path, layers * per_layer) for path, layers, per_layer in self.state_parts(state_dtype)),
                         "bytes")

    def state_parts(self, state_dtype: str = "bf16") -> tuple[tuple[str, Expr, Expr], ...]:
        """``state``'s terms as (path, how many layers hold it, bytes in one layer)."""
        act = dtype(state_dtype)
        mamba_layers = l - l_a if self.family == "bamba" else l
        parts = [("mamba_layer/conv_state", mamba_layers, b * CONV_DIM * d_cv * act.nbytes),
                 ("mamba_layer/ssm_state", mamba_layers, b * n_sh * d_sh * d_st * FP32.nbytes),
                 ("mamba_layer/position", mamba_layers, Expr.lift(INT64.nbytes))]
        if self.family == "bamba":
            parts.append(("attention_layer/kv", l_a, 2 * b * a_kv * (s + n) * d_h * act.nbytes))
        return tuple(parts)


def _sym(name: str) -> Expr:
    return {"h": h, "V": V, "l": l, "l_a": l_a, "d_in": d_in, "n_sh": n_sh, "d_sh": d_sh, "d_st": d_st, "n_g": n_g,
            "d_cv": d_cv, "a": a, "a_kv": a_kv, "d_h": d_h, "f": f}[name]


def is_ssm(config: Any) -> bool:
    return isinstance(config, Mapping) and config.get("model_type") in SSM_MODEL_TYPES


def find_ssm(model: object) -> SsmModel | None:
    """The state space model a name or a ``config.json`` path means (a path wins, as in ``resolve_model``); None
    for anything else, which ``resolve_model`` then reads."""
    if isinstance(model, Mapping):
        return ssm_model(model) if is_ssm(model) else None
    if not isinstance(model, (str, Path)) or len(str(model)) > 4096 or "\0" in str(model):
        return None
    path = Path(model)
    path = path / "config.json" if path.is_dir() else path
    if path.is_file():
        try:
            config = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            return None  # resolve_model reads it again and says what is wrong
        return ssm_model(config, str(config.get("_name_or_path") or path.parent.name if path.name == "config.json"
                                     else path.stem), str(path)) if is_ssm(config) else None
    name = str(model).lower()
    return ssm_model(SSM_PRESETS[name], name, "bundled preset") if name in SSM_PRESETS else None


def _int(config: Mapping[str, Any], key: str, default: Any, name: str) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}: {key} must be a positive integer, got {value!r}; fix config.json")
    return value


def ssm_model(config: Mapping[str, Any], name: str | None = None, source: str = "") -> SsmModel:
    """A Mamba2Config or BambaConfig dict (config.json), with the config classes' defaults for missing fields."""
    kind, name = config.get("model_type"), name or str(config.get("model_type"))
    if kind == "mamba2":
        return _mamba2(config, name, source)
    if kind == "bamba":
        return _bamba(config, name, source)
    raise ConfigError(f"{name}: model_type {kind!r} is not a state space model ({', '.join(SSM_MODEL_TYPES)})")


def _mamba2(c: Mapping[str, Any], name: str, source: str) -> SsmModel:
    # Mamba2Config's defaults (transformers 5.25 configuration_mamba2.py)
    hidden = _int(c, "hidden_size", 4096, name)
    expand = c.get("expand", 2)
    sizes = {"h": hidden, "V": _int(c, "vocab_size", 32768, name), "l": _int(c, "num_hidden_layers", 64, name),
             "d_in": int(expand * hidden), "n_sh": _int(c, "num_heads", 128, name),
             "d_sh": _int(c, "head_dim", 64, name), "d_st": _int(c, "state_size", 128, name),
             "n_g": _int(c, "n_groups", 8, name), "d_cv": _int(c, "conv_kernel", 4, name)}
    _check_heads(sizes, name, "num_heads * head_dim", "expand * hidden_size")
    return SsmModel(name, "mamba2", MappingProxyType(sizes), conv_bias=bool(c.get("use_conv_bias", True)),
                    proj_bias=bool(c.get("use_bias", False)), tied=bool(c.get("tie_word_embeddings", False)),
                    source=source)


def _bamba(c: Mapping[str, Any], name: str, source: str) -> SsmModel:
    # BambaConfig's defaults (transformers 5.25 configuration_bamba.py)
    hidden, layers = _int(c, "hidden_size", 4096, name), _int(c, "num_hidden_layers", 32, name)
    heads = _int(c, "num_attention_heads", 32, name)
    indices = c.get("attn_layer_indices") or []
    if not isinstance(indices, list) or any(isinstance(i, bool) or not isinstance(i, int) for i in indices):
        raise ConfigError(f"{name}: attn_layer_indices must be a list of layer numbers; fix config.json")
    attention = tuple(sorted({i for i in indices if 0 <= i < layers}))
    expand, mamba_heads = _int(c, "mamba_expand", 2, name), _int(c, "mamba_n_heads", 128, name)
    head_dim = c.get("mamba_d_head", "auto")
    head_dim = expand * hidden // mamba_heads if head_dim == "auto" else _int(c, "mamba_d_head", 64, name)
    if hidden % heads:
        raise ConfigError(f"{name}: hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    sizes = {"h": hidden, "V": _int(c, "vocab_size", 128000, name), "l": layers, "l_a": len(attention) or 1,
             "a": heads, "a_kv": _int(c, "num_key_value_heads", 8, name) if c.get("num_key_value_heads", 8) else heads,
             "d_h": hidden // heads, "f": _int(c, "intermediate_size", 14336, name), "d_in": expand * hidden,
             "n_sh": mamba_heads, "d_sh": head_dim, "d_st": _int(c, "mamba_d_state", 256, name),
             "n_g": _int(c, "mamba_n_groups", 1, name), "d_cv": _int(c, "mamba_d_conv", 4, name)}
    if not attention:
        raise ConfigError(f"{name}: attn_layer_indices names no layer below num_hidden_layers = {layers}; a Bamba "
                          "without attention layers is a plain Mamba 2 (model_type mamba2)")
    _check_heads(sizes, name, "mamba_n_heads * mamba_d_head", "mamba_expand * hidden_size")
    for key, value in (("attention_bias", False), ("mlp_bias", False)):
        if c.get(key, False) is not value:
            raise ConfigError(f"{name}: {key} true is not modelled for bamba; drop it")
    return SsmModel(name, "bamba", MappingProxyType(sizes), conv_bias=bool(c.get("mamba_conv_bias", True)),
                    proj_bias=bool(c.get("mamba_proj_bias", False)), tied=bool(c.get("tie_word_embeddings", False)),
                    attention_layers=attention, source=source)


def _check_heads(sizes: dict[str, int], name: str, heads: str, width: str) -> None:
    if sizes["n_sh"] * sizes["d_sh"] != sizes["d_in"]:
        raise ConfigError(f"{name}: {heads} = {sizes['n_sh'] * sizes['d_sh']} must equal {width} = {sizes['d_in']} "
                          "(the scan splits x into heads); fix the config")
