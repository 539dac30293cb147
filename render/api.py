"""A thin notebook API: an estimate that displays itself, and views that display their parts.

>>> r = estimate("gpt2")
>>> r.number("parameters")
124439808
>>> r._repr_markdown_().splitlines()[0]
'**gpt2**, params: Parameters = 124,439,808 (124.44 million)'
>>> estimate("llama-2-7b", mode="train", batch=1, seq=8, tp=7)
Traceback (most recent call last):
...
memderive.symbolic.errors.InvalidLayoutError: llama-2-7b: 32 attention heads are not divisible by tensor-parallel degree 7; choose a degree that divides it

Bad input raises at the call (a ``DerivationError``, a ``ValueError``) with the message the command
line prints; every ``_repr_*_`` here catches a ``DerivationError`` raised while rendering and shows its
message instead of a traceback.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memderive.derivations.estimate import Estimate, UnknownQuantity
from memderive.derivations.estimate import estimate as derive_estimate
from memderive.documents.latex import latex
from memderive.documents.steps import Step, breakdown_rows, derivation, headline_key, single_device
from memderive.documents.units import RenderOptions, parse_size, scaled_bytes, scaled_count
from memderive.documents.text import summary_report
from memderive.derivations.options import ArgumentError
from memderive.symbolic.errors import DerivationError, shown
from memderive.figures.plots import breakdown_data, draw, plot_data, save
from memderive.documents.writeup import fragment_markdown, table_markdown, value_math

__all__ = ["estimate", "Result", "View", "PlotView"]


def _error_markdown(exc: Exception) -> str:
    return f"**memderive could not derive this:** {exc}"


def _shown(render: Callable[[], str], wrap: Callable[[str], str] = str) -> str:
    try:
        return wrap(render())
    except DerivationError as exc:
        return _error_markdown(exc)


@dataclass(frozen=True)
class View:
    """Data with its Markdown (and optionally LaTeX) rendering, shown by Jupyter."""

    data: Any
    markdown: str
    latex: str | None = None

    def _repr_markdown_(self) -> str:
        return self.markdown

    def _repr_latex_(self) -> str | None:
        return self.latex

    def __str__(self) -> str:
        return self.markdown

    def __repr__(self) -> str:
        return f"<View of {type(self.data).__name__}: {len(self.markdown.splitlines())} lines of Markdown>"


@dataclass(frozen=True)
class PlotView:
    """A plot's data (``render.plots.PlotData``) and its figure, shown as a PNG."""

    data: Any
    figure: Any = field(repr=False)

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", metadata={"Software": None})
        return buffer.getvalue()

    def __repr__(self) -> str:
        return f"<PlotView {self.data.kind}: {self.data.title}>"

    def save(self, path: str) -> None:
        save(self.figure, path)


class Result:
    """An ``Estimate`` (``.estimate``) for notebooks, or the ``DerivationError`` that prevented it."""

    def __init__(self, est: Estimate | None, error: DerivationError | None = None,
                 options: RenderOptions | None = None) -> None:
        self._est, self._error, self.options = est, error, options or RenderOptions()
        self._base: Estimate | None = None  # the single-device estimate, derived once when first needed

    @property
    def estimate(self) -> Estimate:
        if self._error is not None:
            raise self._error
        assert self._est is not None  # set whenever there is no error
        return self._est

    def number(self, key: str) -> int | float:
        """A quantity's exact value (``total_bytes``), or, with a GPU named, a figure of ``estimate --json`` that
        is not a quantity (``step_time_s``, ``mfu``, ``device_bytes``): every number the CLI prints, by its key."""
        try:
            return self.estimate.number(key)
        except UnknownQuantity:
            value = self.estimate.to_json().get(key) if isinstance(key, str) else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                return value
            raise

    def numbers(self) -> dict[str, int]:
        """Every quantity's exact value, as ``memderive estimate --json`` prints them."""
        return {q.key: self.estimate.number(q.key) for q in self.estimate.reported_quantities()}

    def steps(self, key: str | None = None) -> tuple[Step, ...]:
        est = self.estimate
        return derivation(est, key or headline_key(est), self.options, self._single_device())

    def _single_device(self) -> Estimate:
        if self._base is None:
            self._base = single_device(self.estimate)
        return self._base

    def _view(self, make: Callable[[Estimate], View]) -> View:
        try:
            return make(self.estimate)
        except DerivationError as exc:
            return View(exc, _error_markdown(exc))

    def derivation(self, key: str | None = None, terms_as: str | None = None) -> View:
        """The steps of quantity ``key`` (default: the headline, e.g. ``total_bytes``), shown in Markdown.

        ``terms_as``: the title of an earlier quantity with the same per-op terms; their table is not repeated.
        """
        return self._view(lambda est: View(self.steps(key), fragment_markdown(
            est, "section", key, self.options, self._single_device(), terms_as)))

    def symbols(self) -> View:
        return self._view(lambda est: View(est.values, fragment_markdown(est, "symbols", None, self.options)))

    def breakdown(self, key: str | None = None) -> View:
        """Rows by graph path (the same rows the plots stack), shown as a table."""
        return self._view(lambda est: View(breakdown_rows(est, key or headline_key(est)),
                                           fragment_markdown(est, "breakdown", key, self.options)))

    def strategies(self, gpu_memory: str | int | None = None) -> View:
        """Per-GPU totals under each layout of ``render.plots.strategy_ladder`` (the bars of the plot)."""
        def make(est: Estimate) -> View:
            data = breakdown_data(est, _capacity(gpu_memory))
            rows = [[label, f"{total:,}", " / ".join(scaled_bytes(total, self.options.precision))]
                    for label, total in zip(data.labels, data.totals)]
            headers = ["layout", "bytes per GPU", "rounded"]
            if data.capacity:
                headers.append(f"fits in {scaled_bytes(data.capacity)[1]}")
                rows = [row + ["yes" if total <= data.capacity else "no"] for row, total in zip(rows, data.totals)]
            return View(data, table_markdown(headers, rows, "lrrl"[:len(headers)]))

        return self._view(make)

    def plot(self, kind: str = "breakdown", gpu_memory: str | int | None = None, key: str | None = None) -> PlotView | View:
        """``breakdown`` (stacked bars across layouts), ``seq`` or ``batch`` (memory, or quantity ``key``
        such as ``hardware_flops_per_gpu``, against s or b)."""
        try:
            data = plot_data(self.estimate, kind, _capacity(gpu_memory), key)
        except DerivationError as exc:
            return View(exc, _error_markdown(exc))
        return PlotView(data, draw(data))

    def _repr_markdown_(self) -> str:
        def render() -> str:
            est = self.estimate
            q = est.quantity(headline_key(est))
            value = est.number(q.key)
            rounded = (f"{value:,} B ({self.options.bytes_text(value)})" if q.unit == "bytes"
                       else f"{value:,} ({scaled_count(value, self.options.precision, words=True)})")
            layout = "; ".join(est.graph.strategies) or "no parallelism"
            lines = [f"**{est.model.name}**, {est.options.mode}: {q.title} = {rounded}", "",
                     f"$${latex(q.closed_form())}$$", "", f"Layout: {layout}."]
            return "\n".join(lines)

        return _shown(render)

    def _repr_latex_(self) -> str:
        def render() -> str:
            est = self.estimate
            q = est.quantity(headline_key(est))
            return f"$${latex(q.closed_form())} = {value_math(est.number(q.key), q.unit, self.options)}$$"

        return _shown(render, str)

    def __str__(self) -> str:
        """``print(result)``: the summary ``memderive estimate --summary`` prints."""
        if self._error is not None:
            return f"error: {self._error!s}"
        return summary_report(self.estimate)

    def __repr__(self) -> str:
        if self._error is not None:
            return f"Result(error={self._error!s})"
        return f"Result({self.estimate.model.name}, {self.estimate.options.mode})"


def _capacity(value: str | int | None) -> int | None:
    if value is None or isinstance(value, str):
        return None if value is None else parse_size(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 10**30:
        raise ArgumentError(f"gpu_memory must be a size such as \"80GB\" or bytes up to 10^30, got {shown(value)}")
    return value


def estimate(model: Any, render: RenderOptions | None = None, **kwargs: Any) -> Result:
    """``memderive.estimate``: the pipeline's ``derivations.estimate.estimate`` (which returns the bare
    ``Estimate``) wrapped for notebooks: the same arguments, a displayable ``Result`` (``.estimate`` is the
    ``Estimate``).

    Args:
        model: bundled name, ``config.json`` path, config dict or transformers config.
        render: render options of the displayed writeups (precision, detail, units).
        **kwargs: ``options=Options(...)`` or its fields (``mode``, ``batch``, ``seq``, ``tp``, ...),
            as ``derivations.estimate.estimate`` takes them.
    """
    if render is not None and not isinstance(render, RenderOptions):
        raise ArgumentError(f"render must be a RenderOptions, got {shown(render)} ({type(render).__name__})")
    return Result(derive_estimate(model, **kwargs), options=render)  # bad input raises here, as the CLI refuses it
