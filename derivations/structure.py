"""What a derivation depends on (``structure_key``): the model and the options, with the values that enter the
closed forms as symbols reduced to the switches they flip. ``estimate`` memoizes one derivation per key; the
planner (``search.columns``) and the time model group layouts by it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from memderive.derivations.models.model import Model
from memderive.derivations.option_table import shared_names
from memderive.derivations.options import Options, te_transposes

__all__ = ["VALUE_FIELDS", "FIXED_FIELDS", "SWITCHES", "structure_key"]

#: Options whose values enter the closed forms as symbols (b, s, n, t, p, d, cp, ep, m, v, r) or only the times (gpu,
#: efficiency): graphs differ only by the flags in ``structure_key``, so a derivation is shared by every value
#: with the same flags (``shared`` in ``derivations.option_table``).
VALUE_FIELDS = shared_names()


#: The ``Options`` fields a derivation reads by value (every field but ``VALUE_FIELDS``), in field order.
FIXED_FIELDS = tuple(f.name for f in fields(Options) if f.name not in VALUE_FIELDS)


def structure_key(model: Model, options: Options) -> tuple:
    """What a derivation depends on: the model (architecture, sizes, window) and the options, with the
    degrees and step sizes reduced to the switches they flip (t > 1, t > a_kv, p > 1, d > 1, cp > 1, ep > 1, m given,
    v > 1, etp other than t)."""
    fixed = tuple((name, getattr(options, name)) for name in FIXED_FIELDS)
    # bool(): the flags of columns of layouts of one structure (``search.columns``) are one value each
    flags = tuple(map(bool, (options.tp > 1, options.tp > model.sizes["a_kv"], options.pp > 1, options.dp > 1,
                             options.cp > 1, options.micro_batches is None, options.virtual_stages in (None, 1),
                             options.lora_rank is None, options.ep > 1, options.folded)))
    if options.uneven_stages:
        flags += (options.pp,)
    if options.pipeline_layout is not None:  # each rank's chunks and in-flight counts are numbers
        flags += (options.pp, options.micro_batches)
    if options.fp8 in ("te-delayed", "te-current"):
        flags += (te_transposes(options.fp8, options.gpu),)  # the fp8 weight workspace's transpose (by --gpu)
    if options.compile:
        flags += ((options.batch, options.seq),)  # the partition is cut at the sizes
    return _model_key(model), fixed, flags


#: Value fields ``structure_key`` reads only through a switch, each with it (b only under ``compile``): layouts that
#: differ only in these values, with equal switches, share a structure (``search.columns`` groups rows by them).
SWITCHES: dict[str, Any] = {"batch": lambda v: None, "micro_batches": lambda v: v is None,
                            "dp": lambda v: v > 1, "cp": lambda v: v > 1, "ep": lambda v: v > 1}


def _model_key(model: Model) -> str:
    """``repr(model)`` (models are frozen values), once per model object."""
    held = _MODEL_KEYS.get(id(model))
    if held is None or held[0] is not model:
        if len(_MODEL_KEYS) > 256:
            _MODEL_KEYS.clear()
        held = _MODEL_KEYS[id(model)] = (model, repr(model))  # the model held: its id stays its own
    return held[1]


_MODEL_KEYS: dict[int, tuple[Model, str]] = {}
