"""The checker: is a formula from a paper, a blog or lecture notes right? (reader, context, verdicts)."""

from memderive.derivations.claims.check import CheckResult, Claim, check, check_claim
from memderive.derivations.claims.spec import QUANTITIES, ClaimError, QuantitySpec, quantity_spec

__all__ = ["CheckResult", "Claim", "ClaimError", "QUANTITIES", "QuantitySpec", "check", "check_claim",
           "quantity_spec"]
