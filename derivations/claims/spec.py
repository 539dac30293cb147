"""What a claim can be about: the checkable quantities (named in ``derivations.quantity_table``) and the
claim error.

A quantity is a row of the table (an estimate quantity, or a part of one: ``params.non_embedding``
leaves out the embedding nodes, ``flops.attention`` keeps the attention core), written with an optional
node selector in brackets (``params.total[attn]``: the terms of nodes named ``attn``) or substitutions
(``kv_cache.per_token[a_kv=a]``: the same model as if it had a K/V head per query head), or a ratio of
two such quantities (``params.trainable/params.total``: PEFT's trainable share).

>>> quantity_spec("activations").key
'activation_bytes_per_layer'
>>> ratio = quantity_spec("kv_cache.per_token[a_kv=a]/kv_cache.per_token")
>>> [(p.name, p.substitute) for p in ratio.parts], ratio.unit
([('kv_cache.per_token[a_kv=a]', (('a_kv', 'a'),)), ('kv_cache.per_token', ())], 'ratio')
"""

from __future__ import annotations

import re
from dataclasses import replace

from memderive.derivations.quantity_table import QUANTITY_NAMES, SPELLINGS, QuantityName
from memderive.symbolic.errors import DerivationError

__all__ = ["ClaimError", "QuantitySpec", "QUANTITIES", "quantity_spec"]


class ClaimError(DerivationError):
    """A claim that cannot be checked as written (bad quantity, symbols, units or formula)."""


#: A checkable quantity (its claim name, the mode it needs, the Estimate key, its unit): a row of
#: ``derivations.quantity_table``, the one table of quantity names.
QuantitySpec = QuantityName

#: The quantities claims can be about, by public name.
QUANTITIES: dict[str, QuantitySpec] = {q.name: q for q in QUANTITY_NAMES if q.checkable}
_PART = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*(?:\[([^\[\]]*)\])?\s*")


def quantity_spec(name: str) -> QuantitySpec:
    """The quantity a claim is about: its public name (``activations.per_layer``) or any alias
    ``derivations.quantity_table`` accepts (an Estimate key, a ``derive`` name); with a node selector or
    substitutions in brackets, or a ratio ``A/B`` of two of them (see the module docstring)."""
    if not isinstance(name, str):
        raise ClaimError(f"unknown quantity {name!r}; choose one of {', '.join(QUANTITIES)}")
    if "/" in re.sub(r"\[[^\[\]]*\]", "", name):  # a '/' inside brackets is a node path ([attn/proj])
        parts = re.split(r"/(?![^\[]*\])", name)
        if len(parts) != 2 or not all(x.strip() for x in parts):
            raise ClaimError(f"a ratio is two quantities, A/B (params.trainable/params.total), not {name!r}")
        num, den = (_part(x) for x in parts)
        unit = "ratio" if num.unit == den.unit else num.unit
        return QuantityName(name.replace(" ", ""), num.mode, "ratio", unit, parts=(num, den))
    return _part(name)


def _row(name: str) -> QuantitySpec:
    row = SPELLINGS.get(name)
    if row is None or not row.checkable:
        what = "unknown quantity" if row is None else f"check has no claims about {row.name} (derive and estimate show it)"
        raise ClaimError(f"{what} {name!r}; choose one of {', '.join(QUANTITIES)}" if row is None
                         else f"{what}; choose one of {', '.join(QUANTITIES)}")
    return row


def _part(text: str) -> QuantitySpec:
    match = _PART.fullmatch(text)
    if match is None:
        raise ClaimError(f"unknown quantity {text.strip()!r}; choose one of {', '.join(QUANTITIES)}, a node in "
                         "brackets (params.total[attn]) or a ratio A/B")
    spec, inside = _row(match.group(1)), match.group(2)
    if inside is None:
        return spec
    items = [x.strip() for x in inside.split(",") if x.strip()]
    if not items:
        raise ClaimError(f"empty brackets in {text.strip()!r}: give a node (params.total[attn]) or a substitution "
                         "([a_kv=a])")
    subs = tuple((a.strip(), b.strip()) for a, b in (item.split("=", 1) for item in items if "=" in item))
    nodes = tuple(item for item in items if "=" not in item)
    return replace(spec, name=f"{spec.name}[{','.join(items)}]", select=spec.select + nodes, substitute=subs)
