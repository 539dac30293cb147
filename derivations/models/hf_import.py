"""Importing transformers' modeling code quietly: the warnings its imports log are not about the user's model."""

from __future__ import annotations

import importlib
import logging
from typing import Any

__all__ = ["IMPORT_NOISE", "quiet_import"]

#: Loggers whose import-time warnings are not about the user's model: torchao's (imported by transformers' quantizers
#: when installed; ``torchao/__init__.py`` warns "Failed to load ..." for each compiled extension built for another
#: Python or CUDA) and torch's pytree (``register_constant`` on the Enums torchao registers, deprecated in torch 2.13).
IMPORT_NOISE = ("torchao", "torch.utils._pytree")


def quiet_import(module: str, name: str | None = None) -> Any:
    """``importlib.import_module(module)`` (``name``: its attribute of that name, which a lazy module such as
    transformers imports on first read) with ``IMPORT_NOISE``'s loggers muted while it runs."""
    loggers = [logging.getLogger(name) for name in IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        imported = importlib.import_module(module)
        return imported if name is None else getattr(imported, name)
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
