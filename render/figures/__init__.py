"""Figures: the plots of an estimate (``plots.py``, matplotlib loaded when a figure is drawn)."""
