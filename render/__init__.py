"""Rendering: numbers and units, text/Markdown/LaTeX writeups, plots, notebooks and the CLI."""

__all__: list[str] = []
