"""One name per quantity: each quantity's public name, the mode it is derived in, its ``Estimate`` key
(the key of ``estimate --json``), its unit and the older spellings users already type (``derive``'s
hyphenated names, the estimate keys, the claims' short forms), accepted as aliases.

``memderive derive NAME``, ``memderive check --quantity NAME`` (and ``quantity=`` in notes markers),
``Estimate.quantity(NAME)``, ``plot --key NAME``, the ``names`` of ``estimate --json`` and the command
lines writeups rebuild all read this table.

>>> quantity_name("activations").name, quantity_name("activations").key
('activations.per_layer', 'activation_bytes_per_layer')
>>> quantity_name("train-total") is quantity_name("train.total")
True
>>> public_name("infer", "total_bytes"), public_name("train", "total_bytes")
('infer.total', 'train.total')
"""

from __future__ import annotations

from dataclasses import dataclass

from memderive.symbolic.errors import DerivationError

__all__ = ["QuantityName", "QUANTITY_NAMES", "SPELLINGS", "spellings", "quantity_name", "public_name", "UnknownName"]


class UnknownName(DerivationError, KeyError):
    """A spelling that names no quantity (a ``KeyError``, as a mapping's lookup is)."""

    def __str__(self) -> str:
        return str(self.args[0])


@dataclass(frozen=True, slots=True)
class QuantityName:
    """A quantity's one public name and what it names.

    ``checkable``: ``check`` has claims about it (the others ``derive`` and ``estimate`` show, and
    ``check`` refuses by name). ``per_position``: the value divided by the cached length ``s + n``.

    A claim may be about a *part* of the key's quantity (``derivations.claims.parts``): the terms of some
    nodes (``select``) or all but some (``exclude``), ``per`` layer or adapted ``matrix``, a ``derived``
    figure (``bits`` per stored weight), our symbols substituted (``substitute``: ``[a_kv=a]``), or a ratio
    of two quantities (``parts``). Such a row is a claim's quantity only: ``derive`` and ``estimate`` show
    the whole key.
    """

    name: str
    mode: str
    key: str
    unit: str
    aliases: tuple[str, ...] = ()
    checkable: bool = True
    per_position: bool = False
    select: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    per: str | None = None
    derived: str | None = None
    substitute: tuple[tuple[str, str], ...] = ()
    parts: tuple[QuantityName, ...] = ()

    @property
    def claim_only(self) -> bool:
        """A part of the key's quantity that only claims name (``derive`` shows the whole key)."""
        return self.per_position or bool(self.select or self.exclude or self.per or self.derived
                                         or self.substitute or self.parts)

    @property
    def counting(self) -> bool:
        """A count (parameters, FLOPs, a ratio, bits): ``21B`` after a number is a billion, not bytes."""
        return self.unit != "bytes"


def _q(name: str, mode: str, key: str, unit: str, *aliases: str, checkable: bool = True,
       per_position: bool = False, **part: object) -> QuantityName:
    return QuantityName(name, mode, key, unit, aliases, checkable, per_position, **part)  # type: ignore[arg-type]


#: The vocabulary and position matrices: what "non-embedding" parameters leave out (kaplan-2020 §2.1's N).
EMBEDDING = ("embed", "head/lm_head")


#: Every quantity, in the order ``derive --help`` lists them. Aliases: the older spellings (``derive``'s
#: names such as ``params-per-layer``, the estimate keys, the claims' short forms), never removed.
QUANTITY_NAMES: tuple[QuantityName, ...] = (
    _q("params.total", "params", "parameters", "elements", "params", "parameters"),
    _q("params.per_layer", "params", "parameters_per_layer", "elements", "params-per-layer", "parameters_per_layer"),
    _q("params.per_dense_layer", "params", "parameters_per_dense_layer", "elements", "parameters_per_dense_layer"),
    _q("params.per_gpu", "train", "parameters_per_gpu", "elements", "parameters_per_gpu"),
    _q("params.trainable", "params", "trainable_parameters", "elements", "trainable", "params-trainable",
       "trainable_parameters"),
    _q("params.active", "params", "active_parameters", "elements", "params-active", "active_parameters"),
    # parts of a count, for claims: every parameter but the vocabulary and position matrices (model cards'
    # "non-embedding"), those matrices alone, and one adapted matrix of one layer
    _q("params.non_embedding", "params", "parameters", "elements", "non_embedding", exclude=EMBEDDING),
    _q("params.embedding", "params", "parameters", "elements", select=EMBEDDING),
    _q("params.lora_per_matrix", "params", "trainable_parameters", "elements", per="matrix"),
    _q("activations.per_layer", "train", "activation_bytes_per_layer", "bytes", "activations",
       "activation_bytes_per_layer"),
    _q("activations.total", "train", "activation_bytes", "bytes", "activations-total", "activation_bytes"),
    _q("activations.offloaded", "train", "offloaded_activation_bytes", "bytes", "offloaded_activation_bytes",
       checkable=False),
    _q("model_states.total", "train", "model_state_bytes", "bytes", "model-states", "model_states",
       "model_state_bytes"),
    _q("model_states.offloaded", "train", "offloaded_bytes", "bytes", "offloaded_bytes", checkable=False),
    _q("train.total", "train", "total_bytes", "bytes", "train-total"),
    _q("train.peak", "train", "peak_bytes", "bytes", "train-peak", "peak_bytes"),
    _q("kv_cache.total", "infer", "kv_cache_bytes", "bytes", "kv-cache", "kv_cache", "kv_cache_bytes"),
    _q("kv_cache.per_token", "infer", "kv_cache_bytes_per_token", "bytes", "kv_cache_bytes_per_token"),
    _q("kv_cache.per_position", "infer", "kv_cache_bytes", "bytes", per_position=True),
    _q("weights.total", "infer", "weight_bytes", "bytes", "weights", "weight_bytes"),
    _q("weights.bits_per_parameter", "infer", "weight_bytes", "bits", "bits_per_parameter", derived="bits"),
    _q("activations.transient", "infer", "activation_bytes", "bytes", checkable=False),
    _q("infer.prefill", "infer", "prefill_bytes", "bytes", "prefill_bytes", checkable=False),
    _q("infer.decode", "infer", "decode_bytes", "bytes", "decode_bytes", checkable=False),
    _q("infer.total", "infer", "total_bytes", "bytes", "infer-total"),
    _q("flops.forward", "train", "forward_flops", "FLOPs", "flops-forward", "forward_flops"),
    # the score and value products of attention (QK^T and AV), forward, as kernel benchmarks count them
    _q("flops.attention", "train", "forward_flops", "FLOPs", select=("attn/core",)),
    _q("flops.attention_per_layer", "train", "forward_flops", "FLOPs", select=("attn/core",), per="layer"),
    _q("flops.step", "train", "model_flops", "FLOPs", "flops", "model_flops"),
    _q("flops.hardware", "train", "hardware_flops", "FLOPs", "flops-hardware", "hardware_flops"),
    _q("flops.per_token", "train", "model_flops_per_token", "FLOPs", "flops-per-token", "model_flops_per_token"),
    _q("flops.elementwise", "train", "elementwise_flops", "FLOPs", "elementwise_flops", checkable=False),
    _q("flops.forward_per_gpu", "train", "forward_flops_per_gpu", "FLOPs", "forward_flops_per_gpu",
       checkable=False),
    _q("flops.step_per_gpu", "train", "model_flops_per_gpu", "FLOPs", "model_flops_per_gpu", checkable=False),
    _q("flops.hardware_per_gpu", "train", "hardware_flops_per_gpu", "FLOPs", "flops-per-gpu",
       "hardware_flops_per_gpu", checkable=False),
    _q("flops.prefill", "infer", "prefill_flops", "FLOPs", "prefill-flops", "prefill_flops"),
    _q("flops.prefill_per_gpu", "infer", "prefill_flops_per_gpu", "FLOPs", "prefill_flops_per_gpu",
       checkable=False),
    _q("flops.decode_per_token", "infer", "decode_flops_per_token", "FLOPs", "decode-flops",
       "decode_flops_per_token"),
    _q("flops.decode_per_token_per_gpu", "infer", "decode_flops_per_token_per_gpu", "FLOPs",
       "decode_flops_per_token_per_gpu", checkable=False),
)

def spellings(rows: tuple[QuantityName, ...]) -> dict[str, QuantityName]:
    """Every accepted spelling (public names and aliases) -> its row; a spelling declared twice is an error.

    >>> spellings((_q("a.b", "params", "k", "bytes", "ab"), _q("c.d", "params", "j", "bytes", "ab")))
    Traceback (most recent call last):
    ...
    ValueError: quantity spelling 'ab' is declared twice (c.d, a.b)
    """
    out: dict[str, QuantityName] = {}
    for row in rows:
        for spelling in (row.name, *row.aliases):
            if spelling in out:
                raise ValueError(f"quantity spelling {spelling!r} is declared twice ({row.name}, {out[spelling].name})")
            out[spelling] = row
    return out


#: Every accepted spelling (public names and aliases) -> its quantity.
SPELLINGS: dict[str, QuantityName] = spellings(QUANTITY_NAMES)


def quantity_name(spelling: str) -> QuantityName:
    """The quantity a public name or an alias names; ``UnknownName`` lists the public names."""
    row = SPELLINGS.get(spelling) if isinstance(spelling, str) else None
    if row is None:
        raise UnknownName(f"unknown quantity {spelling!r}; choose one of "
                          f"{', '.join(q.name for q in QUANTITY_NAMES)}")
    return row


def public_name(mode: str, key: str) -> str | None:
    """The public name of estimate key ``key`` in ``mode`` (a key of another mode's row where this mode
    has none, e.g. training's ``weight_bytes`` is ``weights.total``); None for a key no row names."""
    rows = sorted((q for q in QUANTITY_NAMES if q.key == key and not q.claim_only), key=lambda q: q.mode != mode)
    return rows[0].name if rows else None
