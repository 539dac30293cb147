"""The names a claim may use without a mapping, by the quantity it is about, and the author's mappings.

Our own symbols (``symbolic.dims``, by name and as we print them in LaTeX: ``d_{h}^{R}``), the letters
the literature uses (REFERENCES.md notation: ``L``, ``d_model``, ``\\Psi``), and config names as code
prints them (transformers' ``hidden_size``, Megatron's ``num_query_groups``, nanoGPT's ``n_embd``;
``args.hidden_size`` is read as ``hidden_size``). Some letters mean what the quantity makes them mean:

* ``s`` counts learned positions in parameter counts (Narayanan Eq. 2: ``(V + s)h``);
* ``P``, ``N``, ``Psi`` are the parameter count in model-state, weight and FLOPs claims;
  ``N_active`` (``N_a``, ``n_active``) the parameters one token uses;
* ``d`` is the data-parallel degree in model states (ZeRO's ``N_d``) and the hidden size elsewhere;
* ``D`` is the tokens of one step, ``b s``, in step FLOPs (Chinchilla's ``6ND``);
* ``v`` is the vocabulary, but the virtual pipeline stages in activations; ``w``, ``l_w`` the window in
  KV-cache claims.

>>> from memderive.derivations.claims.spec import quantity_spec
>>> table = default_symbols(quantity_spec("flops.step"))
>>> table["D"], table["d"], table["hidden_size"]
(b*s, h, h)
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from memderive.derivations.claims.lexer import FormulaError, functions, normalize_name
from memderive.derivations.claims.spec import ClaimError, QuantitySpec
from memderive.symbolic.dims import DIMS
from memderive.symbolic import dims_sympy as ds
from memderive.derivations.claims.parser import parse_formula
from memderive.symbolic.lazy import lazy, lazy_names

sp = lazy("sympy")

__all__ = ["OURS", "COMMON", "CONFIG_NAMES", "our_symbols", "default_symbols", "parse_symbols", "context_notes",  # noqa: F822 (OURS, COMMON, CONFIG_NAMES: __getattr__)
           "HINTS"]


@cache
def _tables() -> dict[str, dict[str, sp.Expr]]:
    """The symbol tables below by name, built on first use (importing this module builds no SymPy symbol)."""
    Psi, Psi_a, V, a, a_kv, b, d, d_h, f, h, l, l_w, n_ctx, s, w = (ds.symbols()[name] for name in (
        "Psi", "Psi_a", "V", "a", "a_kv", "b", "d", "d_h", "f", "h", "l", "l_w", "n_ctx", "s", "w"))
    # Our symbols by name, for the right-hand sides of a mapping (``D=h/a``).
    OURS: dict[str, sp.Expr] = {dim.name: dim.symbol for dim in DIMS}
    # Our symbols as we print them in LaTeX (``d_{h}^{R}``, ``d_{c}'``, ``e_{p}``), read back.
    _PRINTED = {normalize_name(dim.latex): dim.symbol for dim in DIMS if normalize_name(dim.latex) != dim.name}
    # Letters and names the literature uses, onto ours: the papers' own (korthikanti-2022's s b h a L t p v,
    # rajbhandari-2020's Psi N_d K, kaplan-2020's n_layer d_model n_ctx d_attn) and the calculators' argument
    # names.
    COMMON: dict[str, sp.Expr] = {
        **{name: OURS[name] for name in ("b", "s", "h", "a", "l", "t", "p", "d", "V", "f", "n", "d_h", "a_kv",
                                         "n_type")},
        "B": b, "S": s, "L": l, "v": V, "n_vocab": V, "d_ff": f, "N_d": d, "d_head": d_h, "d_k": d_h,
        "d_model": h, "n_embd": h, "d_attn": a * d_h, "n_kv_heads": a_kv, "n_kv": a_kv, "n_layers": l, "n_layer": l,
        "n_heads": a, "n_head": a, "n_ctx": s, "Psi": Psi, "Phi": Psi, "psi": Psi, "phi": Psi,
        # mixture of experts (symbolic/dims.py), with transformers' config names
        **{name: OURS[name] for name in ("E", "k", "f_e", "f_s", "l_d", "r")},
        "num_local_experts": OURS["E"], "num_experts": OURS["E"], "n_routed_experts": OURS["E"],
        "num_experts_per_tok": OURS["k"], "top_k": OURS["k"]}
    # Config fields as code prints them (transformers, Megatron-LM arguments, nanoGPT's GPTConfig).
    CONFIG_NAMES: dict[str, sp.Expr] = {
        "hidden_size": h, "num_attention_heads": a, "num_key_value_heads": a_kv, "num_query_groups": a_kv,
        "num_hidden_layers": l, "num_layers": l, "intermediate_size": f, "ffn_hidden_size": f, "vocab_size": V,
        "padded_vocab_size": V, "head_dim": d_h, "kv_channels": d_h, "seq_length": s, "seq_len": s, "block_size": s,
        "max_seq_len": s, "batch_size": b, "micro_batch_size": b, "moe_router_topk": OURS["k"],
        "moe_ffn_hidden_size": OURS["f_e"], "moe_intermediate_size": OURS["f_e"], "kv_lora_rank": OURS["d_c"],
        "q_lora_rank": OURS["d_cq"], "qk_rope_head_dim": OURS["d_hR"], "v_head_dim": OURS["d_v"],
        "num_params": Psi, "total_params": Psi}
    # The parameters one token uses, as FLOPs notes name them (``6 N_active D``).
    _ACTIVE = {name: Psi_a for name in ("N_active", "n_active", "N_a", "P_active", "N_act", "active_params")}
    # In parameter counts the sequence letter counts learned positions (Narayanan Eq. 2: (V + s)h).
    _PARAM_COMMON: dict[str, sp.Expr] = {"s": n_ctx, "S": n_ctx, "n_ctx": n_ctx, "block_size": n_ctx,
                                         "max_position_embeddings": n_ctx}
    # In model-state formulas these letters are the parameter count (ZeRO's Psi, Zhihu's Phi).
    _STATE_COMMON: dict[str, sp.Expr] = {"P": Psi, "N": Psi, "params": Psi}
    # In KV-cache formulas (and the inference total that holds the cache): the sliding window and the
    # layers that have one (Mistral, Gemma 2); ``n`` (generated tokens) is already common.
    _KV_COMMON: dict[str, sp.Expr] = {"w": w, "l_w": l_w}
    return {"OURS": OURS, "_PRINTED": _PRINTED, "COMMON": COMMON, "CONFIG_NAMES": CONFIG_NAMES, "_ACTIVE": _ACTIVE,
            "_PARAM_COMMON": _PARAM_COMMON, "_STATE_COMMON": _STATE_COMMON, "_KV_COMMON": _KV_COMMON}


def our_symbols() -> dict[str, sp.Expr]:
    """``OURS``: our symbols by name."""
    return _tables()["OURS"]


#: ``OURS``, ``COMMON`` and ``CONFIG_NAMES`` by their names, built on first read
__getattr__ = lazy_names(__name__, OURS=our_symbols, COMMON=lambda: _tables()["COMMON"],
                         CONFIG_NAMES=lambda: _tables()["CONFIG_NAMES"])

#: Quantities whose FLOPs are those of one micro-batch step: D (tokens) is b s there.
_STEP_FLOPS = ("flops.step", "flops.forward", "flops.hardware", "flops.prefill", "flops.attention")
#: What a name the table lacks means, where notes use it (the parser's one-line hint).
HINTS = {"D": "D counts tokens (Chinchilla's 6ND): per token write 6N, or check flops.step, where D = b s",
         "N": "N (and P, Psi) is the parameter count in model-state, weight and FLOPs claims; map N=... here",
         "P": "P (and N, Psi) is the parameter count in model-state, weight and FLOPs claims; map P=... here",
         "T": "T is a length in tokens in most notes: map T=s",
         "W": "W is a sliding window in most notes, and this model has none (Mistral-7B has): map W=... or check "
              "the model the note is about (--model)"}


def _prefix(spec: QuantitySpec) -> str:
    return spec.name.split("[")[0]


def default_symbols(spec: QuantitySpec, k_bytes: int | None = None) -> dict[str, sp.Expr]:
    """The author's letters read without a mapping: ``L -> l``, ``v -> V``, ``\\Psi -> Psi``, ...

    ``K`` (ZeRO's optimizer bytes per parameter) is a number, given for model states.
    """
    name, tables = _prefix(spec), _tables()
    table = {**{k: v for k, v in tables["OURS"].items() if k not in ("w", "l_w")}, **tables["_PRINTED"],
             **tables["CONFIG_NAMES"], **tables["COMMON"], **tables["_ACTIVE"]}
    if not name.startswith(("model_states", "train", "params.per_gpu")):
        table["d"] = ds.h  # notes mean the hidden size; the data-parallel degree only where states are sharded
    if name.startswith("params"):
        table.update(tables["_PARAM_COMMON"])
    if name.startswith(("model_states", "train", "weights", "infer", "flops")):
        table.update(tables["_STATE_COMMON"])
    if name.startswith("kv_cache") or name == "infer.total":
        table.update(tables["_KV_COMMON"])
    if name.startswith("activations"):
        table["v"] = tables["OURS"]["v"]
    if name.startswith(_STEP_FLOPS):
        table["D"] = ds.b * ds.s
    if k_bytes is not None:
        table["K"] = sp.Integer(k_bytes)
    return table


def context_notes(spec: QuantitySpec, used: tuple[str, ...], mapping: Mapping[str, Any]) -> list[str]:
    """What the claim's letters were read as where the quantity decides it (``d``, ``D``)."""
    notes, name = [], _prefix(spec)
    if "d" in used and "d" not in mapping:
        if default_symbols(spec).get("d") == ds.h:
            notes.append("d read as the hidden size (d_model), as notes write it; map d=... for another size "
                         "(the data-parallel degree is N_d)")
        else:
            notes.append("d is the data-parallel degree here (ZeRO's N_d); map d=h if it is the hidden size")
    if "D" in used and "D" not in mapping and name.startswith(_STEP_FLOPS):
        notes.append("D = b s: the tokens of one micro-batch step (Chinchilla's D counts every training token)")
    return notes


def parse_symbols(mapping: str | Mapping[str, str | int | sp.Expr] | None) -> dict[str, sp.Expr]:
    """``"R=l, N=a, D=h/a"`` (or a dict) into ``{author name: our expression}``; the right-hand sides may
    use our names and the literature's (``D=N_d``, ``Q=n_embd//n_head``), keys may be dotted
    (``args.ffn_hidden_size=f_e``).

    >>> parse_symbols("R=l, N=a, D=h/a, b=1")
    {'R': l, 'N': a, 'D': h/a, 'b': 1}
    """
    if mapping is None or mapping == "":
        return {}
    if isinstance(mapping, str):
        pairs = []
        for item in filter(None, (x.strip() for x in mapping.split(","))):
            name, sep, value = item.partition("=")
            if not sep:
                raise ClaimError(f"symbol mapping {item!r} needs the form NAME=EXPR, e.g. R=l")
            pairs.append((name.strip(), value.strip()))
    elif isinstance(mapping, Mapping):
        pairs = list(mapping.items())
    else:
        raise ClaimError(f"symbols must be text like 'R=l,N=a' or a dict, not {type(mapping).__name__}")
    tables = _tables()
    targets = {**tables["CONFIG_NAMES"], **tables["COMMON"], **tables["OURS"]}
    out: dict[str, sp.Expr] = {}
    for name, value in pairs:
        key = normalize_name(str(name))
        if not key or not key.replace("_", "").replace(".", "").isalnum() or not key[0].isalpha():
            raise ClaimError(f"symbol name {name!r} is not a name like R, d_h or \\Psi")
        if key in functions():
            raise ClaimError(f"symbol name {name!r} is a function of formulas (min(x, y), max(x, y)), not a symbol")
        if isinstance(value, sp.Expr):
            out[key] = value
            continue
        try:
            out[key] = parse_formula(str(value), targets).expr
        except FormulaError as exc:
            raise ClaimError(f"symbol {name}: {exc}; our symbols are {', '.join(tables['OURS'])}") from None
    return out
