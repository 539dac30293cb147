"""Reading Hugging Face config fields: missing or ill-typed fields are errors that name them.

Shared by the family adapters (``derivations.models.families``): sizes, activation names, key/value
heads, dropout rates, sliding windows, and the adapter of families with LLaMA's field names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

from memderive.derivations.models.architectures import DROPOUT_PLACES, Arch
from memderive.derivations.models.defaults import FAMILY_ALIASES, FAMILY_DEFAULTS
from memderive.derivations.models.model import ModelError
from memderive.symbolic.errors import shown

__all__ = ["Adapted", "ConfigError", "DROPOUT_RATES", "MissingSizes", "PADDED_EMBEDDINGS", "padding_index", "Fields", "LOOKALIKES", "MAX_SIZE", "NULLABLE", "LlamaLike", "WindowRule", "decoder_sizes",
           "kv_head_count", "mlp_kind", "activation", "rotary_dims", "no_window", "sliding", "whole_heads", "with_dropout"]


class ConfigError(ModelError):
    """A config that cannot be mapped exactly onto a graph."""


class MissingSizes(ConfigError):
    """A config without sizes its model needs, naming them (and the defaults transformers would fill in)."""

    def __init__(self, c: Fields) -> None:
        given = ", ".join(f"{k!r}" + ("" if v is None else f" ({shown(v)})") for k, v in c.missing.items())
        plural = "s" if len(c.missing) > 1 else ""
        super().__init__(f"{c.name}: config field{plural} {given} missing: the {c.family} model's sizes must all be "
                         f"given (transformers would fill in its config class's default{plural}, shown, and build "
                         "another model); add them to config.json")


class Fields:
    """Read config fields; a missing or ill-typed one is a ``ConfigError`` that names it.

    A field absent from the config takes its family's transformers default (``FAMILY_DEFAULTS``).
    A JSON ``null`` is read as transformers reads it: where the config class's own default is
    ``None`` (a value derived from other fields) or for ``NULLABLE`` fields, as that; elsewhere
    transformers refuses it or keeps a falsy ``None``, so it is refused, naming the field.
    """

    def __init__(self, config: Mapping[str, Any], name: str, defaults: Mapping[str, Any] | None = None) -> None:
        self.config, self.name = config, name
        family = config.get("model_type")
        known = isinstance(family, str)
        self.family = family if known else ""
        self.defaults = FAMILY_DEFAULTS.get(family, {}) if defaults is None and known else (defaults or {})
        self.aliases = FAMILY_ALIASES.get(family, {}) if known else {}
        self.notes: dict[str, None] = {}  # what the config gives that transformers reads otherwise (ordered, once)
        self.missing: dict[str, Any] = {}  # required sizes the config leaves out -> the default transformers fills in

    def given(self, key: str) -> Any:
        """The config's own value (None when absent); a null that transformers does not read as absent is refused."""
        value = self.config.get(key)
        if value is None and key in self.config and key not in NULLABLE and self.defaults.get(key) is not None:
            default = self.defaults[key]
            self.fail(key, f"is not supported: null is not {json.dumps(default)}, its default; give a value "
                           "or remove the field")
        return value

    def value(self, *keys: str) -> tuple[str, Any]:
        """The first of ``keys`` the config gives (under its own name or, winning over it, an alias the
        family's config class maps onto it: ``FAMILY_ALIASES``), else the first with a family default
        (None: neither)."""
        for key in keys:
            name = self._read_as(key)
            if self.given(name) is not None:
                return name, self.config[name]
        for key in keys:
            if self.defaults.get(key) is not None:
                return key, self.defaults[key]
        return (keys or ("",))[0], None

    def _read_as(self, key: str) -> str:
        """The name transformers takes ``key``'s value from: a given alias of it, else ``key``. Two names
        that disagree, and look-alike names the family's class does not read, are noted."""
        name = next((a for a, field in self.aliases.items() if field == key and self.given(a) is not None), key)
        if name != key and self.given(key) is not None and self.config[key] != self.config[name]:
            self._note(f"config fields {key!r} = {shown(self.config[key])} and {name!r} = "
                       f"{shown(self.config[name])} disagree; transformers' {self.family} config applies {name!r} "
                       "last, so it is counted")
        readable = {key, *(a for a, field in self.aliases.items() if field == key)}
        for other in next((group for group in LOOKALIKES if key in group), ()):
            if other not in readable and other not in self.aliases and self.given(other) is not None:
                self._note(f"config field {other!r} = {shown(self.config[other])} is not read by transformers' "
                           f"{self.family} (it reads {key!r}), nor here")
        return name

    def _note(self, text: str) -> None:
        self.notes[text] = None

    def need(self, *keys: str) -> Any:
        value = self.value(*keys)[1]
        if value is None:
            raise ConfigError(f"{self.name}: config field {keys[0]!r} is missing; add it to config.json")
        return value

    def get(self, key: str, default: Any) -> Any:
        value = self.value(key)[1]
        return default if value is None else value

    def size(self, *keys: str, default: int | None = None, required: bool | None = None) -> int:
        """A positive integer from the first key present (its family default, then ``default``; else an error).

        A ``required`` size (by default one read without a ``default``: hidden size, heads, layers,
        vocabulary, MLP width) the config leaves out is noted in ``missing`` and its family default read
        on, so that ``from_config`` refuses the config naming every missing size at once: transformers
        would complete it with its config class's defaults, another model than the one meant."""
        key, value = self.value(*keys)
        if (default is None if required is None else required) and self.config.get(key) is None:
            self.missing.setdefault(keys[0], value if value is not None else default)
            if value is None and default is None:
                raise MissingSizes(self)
        if value is None:
            if default is None:
                self.need(*keys)
            return default  # type: ignore[return-value]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            self.fail(key, "must be a positive integer")
        if value > MAX_SIZE:
            self.fail(key, f"is not supported: sizes are bounded by {MAX_SIZE:,} (10^12)")
        return value

    def count(self, key: str, default: int) -> int:
        """A whole number that may be 0 (``default`` when absent); else an error naming the field."""
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.fail(key, "must be a whole number (0 or more)")
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.fail(key, "must be true or false")
        return value

    def fail(self, key: str, why: str) -> NoReturn:
        raise ConfigError(f"{self.name}: config field {key!r} = {shown(self.config.get(key))} {why}")

    def refuse(self, key: str, unless: Callable[[Any], bool], why: str) -> None:
        value = self.given(key)
        if value is not None and not unless(value):
            self.fail(key, f"is not supported: {why}")


#: Names configs use for one size; a family reads one of each (and its aliases): another given is noted.
LOOKALIKES = (("hidden_size", "n_embd", "n_embed", "d_model"),
              ("num_attention_heads", "n_head", "n_heads", "num_heads"),
              ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
              ("max_position_embeddings", "n_positions"),
              ("num_experts", "num_local_experts", "n_routed_experts"))
#: Fields whose null transformers reads as "none": no sliding window, no layer-type list, no query compression.
NULLABLE = frozenset({"sliding_window", "layer_types", "q_lora_rank"})
#: The largest size a config may give (hidden size, layers, vocabulary, ...): 10^12.
MAX_SIZE = 10**12


Adapted = tuple[Arch, dict[str, int], dict[str, Any]]

GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")


def activation(c: Fields, key: str, default: str, gated: bool = False) -> dict[str, str]:
    """``mlp`` (the MLP kind) and ``act_fn`` (the config's activation name, whose transformers code
    decides what it saves: ``gelu_new`` is a Python formula) of an ``Arch``."""
    return {"mlp": mlp_kind(c, key, default, gated), "act_fn": c.get(key, default)}


def rotary_dims(c: Fields, d_head: int, key: str, default: float | None) -> dict[str, Any]:
    """Partial rotary as transformers computes it: ``int(d_h * partial_rotary_factor)`` dimensions of
    each head, the factor from ``rope_parameters`` (what transformers 5 writes), else the config's own
    ``key`` (``rotary_pct``, ``partial_rotary_factor``), else ``default``; ``key`` ``rotary_dim`` is a
    count (GPT-J, CodeGen; null: all). ``{}`` when every dimension rotates, else
    ``{"partial_rotary": True, "d_r": n}``."""
    rope = c.get("rope_parameters", None)
    if key == "rotary_dim":  # more than the head rotates the whole head (transformers' slice q[..., :rotary_dim])
        given = c.config.get(key, default) if key in c.config else default
        if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given <= 0):
            c.fail(key, "must be a positive number of rotary dimensions or null")
        count = d_head if given is None else min(given, d_head)
    else:
        factor = rope.get("partial_rotary_factor") if isinstance(rope, Mapping) else None
        factor = c.get(key, default) if factor is None else factor
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            c.fail(key, "must be a fraction of the head size in (0, 1]")
        count = int(d_head * factor)
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= d_head:
        c.fail(key, f"must give between 1 and the head size {d_head} rotary dimensions")
    return {} if count == d_head else {"partial_rotary": True, "d_r": count}


def mlp_kind(c: Fields, key: str, default: str, gated: bool = False) -> str:
    """The MLP kind for an activation name; a name the graph has no op for is refused."""
    act = c.get(key, default)
    if not isinstance(act, str):
        c.fail(key, "must be an activation name (a string)")
    if gated:
        kinds = {"silu": "swiglu", "swish": "swiglu", **dict.fromkeys(GELUS, "geglu")}
    else:
        kinds = {"relu": "relu", "relu2": "relu2", **dict.fromkeys(GELUS, "gelu")}
    if act not in kinds:
        c.fail(key, f"is not supported: the {'gated ' if gated else ''}MLP is modelled with {', '.join(kinds)}")
    return kinds[act]


def whole_heads(c: Fields, h: int, a: int, keys: tuple[str, str]) -> None:
    """Families whose head size is hidden/heads (no ``head_dim`` field) need an exact split."""
    if h % a:
        c.fail(keys[0], f"is not divisible by {keys[1]} = {a}; this family's head size is {keys[0]} / {keys[1]}")


def kv_head_count(c: Fields, a: int, key: str = "num_key_value_heads", default: int | None = None) -> int:
    """Key/value heads; a missing field takes the config class's default (None: one per query head)."""
    a_kv = c.size(key, default=default or a)
    if a % a_kv:
        given = "" if c.given(key) is not None else f", absent: the {c.config['model_type']} default"
        raise ConfigError(f"{c.name}: {a} attention heads are not divisible by {a_kv} key/value heads "
                          f"(config field {key!r}{given})")
    return a_kv


_E, _A, _O, _M = ("embed",), ("attention",), ("attn_out",), ("mlp_out",)
_R = _O + _M
_LLAMA_DROPOUT = {"attention_dropout": (0.0, _A)}
#: Dropout rates each family's modeling code reads (dotted: nested), with its config class's default and
#: the places (``architectures.DROPOUT_PLACES``) it drops out at.
DROPOUT_RATES: dict[str, dict[str, tuple[float, tuple[str, ...]]]] = {
    "gpt2": {"resid_pdrop": (0.1, _R), "embd_pdrop": (0.1, _E), "attn_pdrop": (0.1, _A)},
    **dict.fromkeys(("gptj", "codegen"), {"resid_pdrop": (0.0, _R), "embd_pdrop": (0.0, _E), "attn_pdrop": (0.0, _A)}),
    "opt": {"dropout": (0.1, _R), "attention_dropout": (0.0, _A)},  # OPTDecoder drops out no embedding
    "phi": {"resid_pdrop": (0.0, _R), "embd_pdrop": (0.0, _E), "attention_dropout": (0.0, _A)},
    "phi3": {"resid_pdrop": (0.0, _R), "embd_pdrop": (0.0, _E), "attention_dropout": (0.0, _A)},
    "falcon": {"hidden_dropout": (0.0, _R), "attention_dropout": (0.0, _A)},
    "starcoder2": {"residual_dropout": (0.0, _R), "embedding_dropout": (0.0, _E), "attention_dropout": (0.0, _A)},
    "bloom": {"hidden_dropout": (0.0, _R), "attention_dropout": (0.0, _A)},
    "mpt": {"attn_config.attn_pdrop": (0.0, _A + _R)},  # transformers' MPT uses it for every dropout of a block
    "gpt_neo": {"resid_dropout": (0.0, _R), "embed_dropout": (0.0, _E), "attention_dropout": (0.0, _A)},
    "gpt_bigcode": {"resid_pdrop": (0.1, _R), "embd_pdrop": (0.1, _E), "attn_pdrop": (0.1, _A)},
    "gpt_neox": {"hidden_dropout": (0.0, _E + _R), "attention_dropout": (0.0, _A)},
    "bert": {"hidden_dropout_prob": (0.1, _E + _R), "attention_probs_dropout_prob": (0.1, _A)},
    "stablelm": {"hidden_dropout": (0.0, _M), "attention_dropout": (0.0, _A)},  # the MLP output only
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "granite",
                     "cohere", "nemotron", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3", "gpt_oss",
                     "phimoe", "granitemoe"), _LLAMA_DROPOUT),
}


def with_dropout(c: Fields, arch: Arch, extra: dict[str, Any]) -> tuple[Arch, dict[str, Any]]:
    """Dropout is in the graph where a rate is non-zero (p = 0 is the identity and saves nothing):
    at the places each rate's modeling code drops out (the rates' values change no byte)."""
    defaults = DROPOUT_RATES.get(c.config["model_type"])
    if defaults is None:
        return arch, extra
    places: set[str] = set()
    for key, (default, where) in defaults.items():
        outer, _, inner = key.rpartition(".")
        rate = Fields(c.get(outer, {}), c.name).get(inner, default) if outer else c.get(key, default)
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate < 1:
            c.fail(key, "must be a dropout rate in [0, 1)")
        if rate > 0:
            places.update(where)
    off = tuple(p for p in DROPOUT_PLACES if p not in places)
    return replace(arch, dropout=bool(places), no_dropout_at=off if places else ()), extra


#: Families whose embedding is ``nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)``
#: (transformers 5.25's modeling code: ``self.padding_idx = config.pad_token_id``); GPT-2, GPT-J, CodeGen, Falcon,
#: BLOOM, MPT, GPT-Neo, GPT-BigCode and GPT-NeoX pass no ``padding_idx``.
PADDED_EMBEDDINGS = frozenset({
    "llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "olmo2", "granite", "cohere",
    "nemotron", "stablelm", "starcoder2", "phi", "opt", "bert", "mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2",
    "deepseek_v3", "gpt_oss", "phimoe", "granitemoe"})


def padding_index(c: Fields, vocab: int) -> None:
    """``pad_token_id`` as ``nn.Embedding`` takes it for ``padding_idx``: an index in [-V, V) (its assertion
    "Padding_idx must be within num_embeddings" stops transformers from building the model otherwise)."""
    if c.family not in PADDED_EMBEDDINGS or c.config.get("pad_token_id") is None:
        return
    pad = c.config["pad_token_id"]
    if isinstance(pad, bool) or not isinstance(pad, int):
        c.fail("pad_token_id", "must be a token id (an integer) or null")
    if not -vocab <= pad < vocab:
        c.fail("pad_token_id", f"is not a token of the vocabulary of {vocab:,} (vocab_size): transformers cannot "
                               "build the embedding (nn.Embedding's padding_idx must be in [-vocab_size, vocab_size)); "
                               "give an id below vocab_size or null")


def decoder_sizes(c: Fields, head_dim: int | None = None, kv_heads: int | None = None) -> dict[str, int]:
    """LLaMA-style field names; ``head_dim``, ``kv_heads``: the config class's defaults (None: derived)."""
    sizes = {"h": c.size("hidden_size"), "a": c.size("num_attention_heads"), "l": c.size("num_hidden_layers"),
             "V": c.size("vocab_size"), "f": c.size("intermediate_size")}
    sizes["a_kv"] = kv_head_count(c, sizes["a"], default=kv_heads)
    if c.get("head_dim", None) is not None:
        sizes["d_h"] = c.size("head_dim")
    elif head_dim is not None:
        sizes["d_h"] = head_dim
    return sizes


WindowRule = Callable[[Fields, int], dict[str, Any]]


#: ``layer_types`` entries by whether the layer slides ("attention": transformers' legacy name, remapped).
_LAYER_TYPES = {"sliding_attention": True, "full_attention": False, "attention": False}


def sliding(default: int | None = None, switch: str | None = None,
            slides: Callable[[Fields, int], int] = lambda c, l: l) -> WindowRule:
    """Sliding-window attention as transformers applies it, as ``Model`` fields.

    ``switch`` (when named) turns it on; an explicit null ``sliding_window`` turns it off. Layer
    ``i`` slides per ``layer_types`` when the config lists them (transformers' cache follows that
    list in every family), else ``slides(c, l)`` of the ``l`` layers do (counted by the rule the
    config class builds the list with, in closed form: no path depends on the layer count).
    The model's ``window`` is the window; ``window_layers`` how many layers slide, the others
    caching their whole context.
    """
    def rule(c: Fields, l: int) -> dict[str, Any]:
        raw = c.config["sliding_window"] if "sliding_window" in c.config else c.defaults.get("sliding_window", default)
        if (switch is not None and not c.flag(switch, False)) or raw is None:
            return {}
        window = c.size("sliding_window", default=default)
        listed = layer_types(c, l)
        count = sum(listed) if listed is not None else slides(c, l)
        if count in (0, l):
            return {"window": window} if count else {}
        return {"window": window, "window_layers": count,
                "notes": (f"{count} of {l} layers (l_w) attend to a sliding window of {window} tokens, "
                          "the others to the whole context",)}

    return rule


def layer_types(c: Fields, l: int) -> list[bool] | None:
    """Which layers slide, from the config's ``layer_types`` list (None when it has none)."""
    types = c.config.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != l or any(x not in _LAYER_TYPES for x in types):
        c.fail("layer_types", f"is not supported: expected one of {', '.join(_LAYER_TYPES)} for each of the {l} "
                              "layers")
    return [_LAYER_TYPES[x] for x in types]


def no_window(c: Fields, l: int) -> dict[str, Any]:
    return {}


def _number_or_none(c: Fields, key: str) -> bool:
    """Whether a capping field is set: a positive number on, null off."""
    value = c.get(key, None)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
        c.fail(key, "must be a positive number or null")
    return value is not None


@dataclass(frozen=True, slots=True)
class LlamaLike:
    """Families with LLaMA's field names.

    ``reads``: the bias fields their modeling code reads; ``head_dim``, ``kv_heads``: the config
    class's defaults (None: derived); ``act``: the activation field; ``window``: which layers slide.
    """

    arch: Arch
    reads: tuple[str, ...] = ("attention_bias", "mlp_bias")
    head_dim: int | None = None
    kv_heads: int | None = None
    act: str = "hidden_act"
    window: WindowRule = no_window
    rotary: tuple[str, float] | None = None  # (config key, default) of a partial rotary factor (Phi-3)
    softcap: bool = False  # reads attn_logit_softcapping and final_logit_softcapping (Gemma 2 / 3)

    def __call__(self, c: Fields) -> Adapted:
        arch = self.arch
        c.refuse("num_local_experts", lambda v: v in (0, 1), "mixture-of-experts layers are not modelled")
        mlp = mlp_kind(c, self.act, "silu" if arch.mlp == "swiglu" else "gelu_pytorch_tanh", gated=True)
        attn_bias = "attention_bias" in self.reads and c.flag("attention_bias", False)
        mlp_bias = c.flag("mlp_bias", arch.mlp_bias) if "mlp_bias" in self.reads else arch.mlp_bias
        chosen = replace(arch, mlp=mlp, tied_embeddings=c.flag("tie_word_embeddings", arch.tied_embeddings),
                         qkv_bias=arch.qkv_bias or attn_bias, out_bias=arch.out_bias or attn_bias, mlp_bias=mlp_bias)
        sizes = decoder_sizes(c, self.head_dim, self.kv_heads)
        if self.softcap:
            chosen = replace(chosen, attn_softcap=_number_or_none(c, "attn_logit_softcapping"),
                             logit_softcap=_number_or_none(c, "final_logit_softcapping"))
        if self.rotary is not None:
            d_head = sizes.get("d_h") or sizes["h"] // sizes["a"]
            part = rotary_dims(c, d_head, *self.rotary)
            chosen = replace(chosen, partial_rotary=bool(part))
            sizes.update({k: v for k, v in part.items() if k == "d_r"})
        return chosen, sizes, {"max_positions": c.get("max_position_embeddings", None), **self.window(c, sizes["l"])}
