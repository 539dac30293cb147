"""What a claim can be about: the checkable quantities (named in ``derivations.quantity_table``) and the
claim error.

>>> quantity_spec("activations").key
'activation_bytes_per_layer'
"""

from __future__ import annotations

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


def quantity_spec(name: str) -> QuantitySpec:
    """The quantity a claim is about: its public name (``activations.per_layer``) or any alias
    ``derivations.quantity_table`` accepts (an Estimate key, a ``derive`` name)."""
    row = SPELLINGS.get(name) if isinstance(name, str) else None
    if row is None or not row.checkable:
        what = "unknown quantity" if row is None else f"check has no claims about {row.name} (derive and estimate show it)"
        raise ClaimError(f"{what} {name!r}; choose one of {', '.join(QUANTITIES)}" if row is None
                         else f"{what}; choose one of {', '.join(QUANTITIES)}")
    return row
