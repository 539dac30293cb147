"""memderive: the memory and compute of transformer models, derived symbolically and exactly.

The installed package maps the repository's folders: render/ is ``memderive`` (the command line,
writeups, plots, notebooks), symbolic/ is ``memderive.symbolic`` (the engine) and derivations/ is
``memderive.derivations`` (models, quantities, claims, search). The names below load on first use,
so ``import memderive`` stays cheap.

>>> import memderive
>>> memderive.estimate("gpt2").number("parameters")
124439808
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["estimate", "check", "sweep", "plan", "plan_infer", "fit", "Result", "Estimate", "CheckResult",
           "Options", "Model", "DerivationError"]

#: Each public name and the module that defines it.
_HOMES = {"estimate": "memderive.api", "Result": "memderive.api",
          "check": "memderive.derivations.claims.check", "CheckResult": "memderive.derivations.claims.check",
          "sweep": "memderive.derivations.search.sweep", "plan": "memderive.derivations.search.plan",
          "plan_infer": "memderive.derivations.search.plan", "fit": "memderive.derivations.search.fit",
          "Estimate": "memderive.derivations.estimate", "Options": "memderive.derivations.options",
          "Model": "memderive.derivations.models.model", "DerivationError": "memderive.symbolic.errors"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'memderive' has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
