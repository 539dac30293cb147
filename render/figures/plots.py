"""Plots of per-GPU memory, drawn from the same breakdown rows as the writeup's tables.

The data functions (``breakdown_data``, ``sweep_data``) return a frozen ``PlotData`` of exact integers
built with ``render.steps.breakdown_rows``; ``draw`` only draws one. matplotlib is imported when
``draw`` first runs (``symbolic.lazy``; a bare ``Figure``, saved through Agg: headless), so importing this module
stays cheap.

>>> from memderive.derivations.estimate import estimate
>>> est = estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="selective")
>>> data = breakdown_data(est)
>>> data.labels[:3]
('none', 'TP 8', 'TP 8 + SP')
>>> data.totals[data.labels.index("TP 8 + SP + selective")] == est.number("total_bytes")
True
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from memderive.derivations.estimate import Estimate, estimate
from memderive.derivations.models.resolve import check_layout
from memderive.derivations.options import Options
from memderive.documents.steps import breakdown_rows, headline_key, layout_text, pipeline_stage
from memderive.documents.units import scaled_bytes
from memderive.symbolic import dims
from memderive.symbolic.errors import DerivationError, InvalidLayoutError
from memderive.symbolic.lazy import lazy

mpl_figure = lazy("matplotlib.figure")

__all__ = ["PlotData", "KINDS", "strategy_ladder", "breakdown_data", "sweep_data", "plot_data", "colors", "draw", "save"]

KINDS = ("breakdown", "seq", "batch")
GIB = 2**30
#: Largest ratio of bar totals one linear axis shows readably (past it, ``draw`` adds a panel of shares).
WIDE_RATIO = 10
#: Colours by the first component of a part's path: model states in blues, layer activations in distinct
#: hues, everything else (embedding, output layer, overhead) in greys and teal.
PALETTE = {"model_states": ("#08519c", "#4292c6", "#9ecae1"),
           "layer": ("#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#ffbb78"),
           "": ("#7f7f7f", "#c7c7c7", "#17becf", "#525252", "#9edae5")}


@dataclass(frozen=True, slots=True)
class PlotData:
    """Stacked parts of one quantity at several points (layouts, or values of ``s`` or ``b``).

    ``values[i][j]`` is part ``parts[j]`` at point ``points[i]``, in the quantity's unit (bytes).
    """

    kind: str
    title: str
    xlabel: str
    labels: tuple[str, ...]
    parts: tuple[str, ...]
    values: tuple[tuple[int, ...], ...]
    unit: str
    capacity: int | None = None

    @property
    def totals(self) -> tuple[int, ...]:
        return tuple(sum(row) for row in self.values)

    @property
    def wide(self) -> bool:
        """Bars that differ by more than 10x: ``draw`` adds a panel of each bar's parts as shares of it."""
        totals = [x for x in self.totals if x > 0]
        return self.kind == "breakdown" and len(totals) > 1 and max(totals) > WIDE_RATIO * min(totals)

    def part(self, name: str) -> tuple[int, ...]:
        j = self.parts.index(name)
        return tuple(row[j] for row in self.values)


def _stack(rows_per_point: Sequence[Sequence[Any]]) -> tuple[tuple[str, ...], tuple[tuple[int, ...], ...]]:
    """Align breakdown rows of several points on the union of their paths (first-seen order)."""
    parts: list[str] = []
    for rows in rows_per_point:
        parts += [row.path for row in rows if row.path not in parts]
    values = tuple(tuple(next((r.value for r in rows if r.path == p), 0) for p in parts) for rows in rows_per_point)
    return tuple(parts), values


def _fits(est: Estimate, opts: Options) -> bool:
    try:
        check_layout(est.model, opts)
    except InvalidLayoutError:
        return False
    return True


def strategy_ladder(est: Estimate) -> tuple[tuple[str, Options], ...]:
    """Layouts to compare, from no parallelism up to ZeRO-3, keeping the estimate's step sizes.

    Training: none / TP / TP + SP / + selective / + full recompute / + ZeRO-1, 2, 3. The degrees are
    the estimate's ``tp`` and ``dp`` where above 1, else the largest of 8, 4, 2 that divides the model.
    Other modes: tensor-parallel degrees 1, 2, 4, 8 that divide the model.
    """
    opts = est.options
    base = replace(opts, tp=1, sp=False, dp=1, zero=0, offload=False,
                   recompute="none" if opts.mode == "train" else opts.recompute, recompute_method="uniform",
                   recompute_layers=1)
    degrees = [k for k in (8, 4, 2) if _fits(est, replace(base, tp=k))]
    if opts.mode != "train":
        return tuple((f"TP {k}", replace(base, tp=k)) for k in (1, *reversed(degrees)))
    t = opts.tp if opts.tp > 1 else (degrees[0] if degrees else 1)
    d = opts.dp if opts.dp > 1 else 8
    ladder = [("none" if opts.pp == 1 else f"PP {opts.pp} only", base)]
    if t > 1:
        ladder += [(f"TP {t}", replace(base, tp=t)), (f"TP {t} + SP", replace(base, tp=t, sp=True))]
    top = ladder[-1]
    ladder += [(f"{top[0]} + selective", replace(top[1], recompute="selective")),
               (f"{top[0]} + full recompute", replace(top[1], recompute="full"))]
    selective = ladder[-2]
    ladder += [(f"{selective[0]} + ZeRO-{z}", replace(selective[1], dp=d, zero=z)) for z in (1, 2, 3)]
    return tuple(ladder)


def breakdown_data(est: Estimate, capacity: int | None = None, key: str | None = None) -> PlotData:
    """Per-GPU breakdown of the headline quantity (or ``key``, e.g. ``hardware_flops_per_gpu``) under each
    layout of ``strategy_ladder``."""
    ladder = strategy_ladder(est)
    key = key or headline_key(est)
    rows = [breakdown_rows(estimate(est.model, opts), key) for _, opts in ladder]
    parts, values = _stack(rows)
    q = est.quantity(key)
    opts = est.options
    title = f"{est.model.name}: {q.title} (b = {opts.batch}, s = {opts.seq})"
    notes = [f"pipeline parallel p = {opts.pp}, {pipeline_stage(est.graph)} stage"] if opts.pp > 1 else []
    zero = next((o for _, o in ladder if o.zero), None)
    notes += [f"ZeRO over data parallel d = {zero.dp}"] if zero else []
    xlabel = "layout" + (f" ({'; '.join(notes)})" if notes else "")
    return PlotData("breakdown", title, xlabel, tuple(label for label, _ in ladder), parts, values, q.unit,
                    capacity)


def _default_points(dim: str, centre: int, longest: int | None = None) -> tuple[int, ...]:
    """Sequence lengths: up to eight doublings around ``centre``, not past ``longest`` (the model's context,
    where it is larger than ``centre``); batch sizes: 1 to about 2*centre, evenly."""
    if dim == "s":
        start = max(128, centre >> 4)
        top = max(longest, centre) if longest else None
        return tuple(x for x in (start << i for i in range(8)) if top is None or x <= top)
    top = max(16, 2 * centre)
    step = max(1, top // 16)
    return tuple(sorted({1, *range(step, top + 1, step)}))


def sweep_data(est: Estimate, dim: str, points: Sequence[int] | None = None, capacity: int | None = None,
               key: str | None = None) -> PlotData:
    """The headline quantity's breakdown at several values of ``dim`` (``"s"`` or ``"b"``), other sizes fixed.

    The estimate's formulas are evaluated at each point (no new derivation), so the parts are exactly
    the writeup's rows at that size. Default points: doublings around the estimate's value.
    """
    if dim not in ("s", "b"):
        raise ValueError(f"sweep over s (sequence length) or b (micro-batch size), not {dim!r}")
    symbol = dims.sym(dim)
    if symbol not in est.values:
        raise ValueError(f"this estimate has no {dim}; give --batch and --seq")
    centre = est.values[symbol]
    xs = tuple(points) if points is not None else _default_points(dim, centre, est.model.max_positions)
    key = key or headline_key(est)
    parts, values = _stack([breakdown_rows(est, key, {symbol: x}) for x in xs])
    q = est.quantity(key)
    opts = est.options
    fixed = f"b = {opts.batch}" if dim == "s" else f"s = {opts.seq}"
    recompute = f"; {opts.recompute} recompute" if opts.recompute != "none" else ""
    title = f"{est.model.name}: {q.title} ({fixed})\n{layout_text(opts, pipeline_stage(est.graph))}{recompute}"
    xlabel = "sequence length s (tokens)" if dim == "s" else "micro-batch size b (sequences)"
    return PlotData("seq" if dim == "s" else "batch", title, xlabel, tuple(str(x) for x in xs), parts, values,
                    q.unit, capacity)


def plot_data(est: Estimate, kind: str, capacity: int | None = None, key: str | None = None) -> PlotData:
    """``breakdown`` (layouts), ``seq`` or ``batch`` (sweeps) of the headline quantity or ``key``."""
    if key is not None:
        est.quantity(key)  # a clear error for a key this estimate lacks
    if kind == "breakdown":
        return breakdown_data(est, capacity, key)
    if kind in ("seq", "batch"):
        return sweep_data(est, "s" if kind == "seq" else "b", capacity=capacity, key=key)
    raise ValueError(f"plot kind must be one of {', '.join(KINDS)}, got {kind!r}")


def colors(parts: Sequence[str]) -> tuple[str, ...]:
    """A colour per part: shades within its path group (``PALETTE``), stable for a given part order."""
    used: dict[str, int] = {}
    out = []
    for part in parts:
        group = part.split("/")[0] if part.split("/")[0] in PALETTE else ""
        shades = PALETTE[group]
        out.append(shades[used.get(group, 0) % len(shades)])
        used[group] = used.get(group, 0) + 1
    return tuple(out)


#: The largest value drawn, in bytes (or elements): floats past ~1.8e308 overflow; 10^300 leaves room.
MAX_DRAWN = 10**300


def draw(data: PlotData) -> Any:
    """A matplotlib ``Figure`` of ``data``: stacked bars for layouts, stacked areas for sweeps. Axes are linear
    (a stacked segment on a log axis would not show its share); when bars differ by more than 10x, a second
    panel shows each bar's parts as shares of it, so the small layouts stay readable."""
    if max([*data.totals, data.capacity or 0], default=0) > MAX_DRAWN:
        raise DerivationError("values past 10^300 cannot be drawn (a float overflows); use estimate --json "
                                 "for the exact integers")
    # A bare Figure renders through Agg when saved and never touches pyplot's global backend (headless,
    # and harmless inside a notebook whose user has chosen another backend).
    fig = mpl_figure.Figure(figsize=(9, 8.4 if data.wide else 5.2), dpi=100, layout="constrained")
    axes = fig.subplots(2, 1, sharex=True) if data.wide else (fig.add_subplot(),)
    ax = axes[0]
    scale, unit = {"bytes": (GIB, "GiB"), "FLOPs": (10**12, "TFLOPs")}.get(data.unit, (10**9, "billion"))
    palette = colors(data.parts)
    if data.kind == "breakdown":
        _bars(ax, data, [[row[j] / scale for row in data.values] for j in range(len(data.parts))], palette)
        for i, total in enumerate(data.totals):
            ax.annotate(f"{total / scale:.1f}", (i, total / scale), ha="center", va="bottom", fontsize=8,
                        xytext=(0, 2), textcoords="offset points")
        if data.wide:
            shares = [[100 * row[j] / (sum(row) or 1) for row in data.values] for j in range(len(data.parts))]
            _bars(axes[1], data, shares, palette, legend=False)
            axes[1].set_ylabel("share of each bar (%): the bars differ by more than 10x")
            axes[1].set_ylim(0, 100)
        axes[-1].set_xticks(range(len(data.labels)), data.labels, rotation=25, ha="right", fontsize=8)
    else:
        _areas(ax, data, scale, palette)
    if data.capacity and data.unit == "bytes":
        ax.axhline(data.capacity / scale, color="crimson", linestyle="--", linewidth=1.2,
                   label=f"GPU memory {scaled_bytes(data.capacity)[1]}")
    axes[-1].set_xlabel(data.xlabel)
    ax.set_ylabel(f"per GPU ({unit})")
    ax.set_title(data.title, fontsize=10)
    handles, names = ax.get_legend_handles_labels()  # top of the stack first, as drawn
    ax.legend(handles[::-1], names[::-1], fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return fig


def _bars(ax: Any, data: PlotData, series: list[list[float]], palette: Sequence[str], legend: bool = True) -> None:
    """Stacked bars, one segment per part, each as tall as its value (a linear axis)."""
    bottom = [0.0] * len(data.labels)
    for j, part in enumerate(data.parts):
        ax.bar(range(len(data.labels)), series[j], bottom=bottom, label=part if legend else None, color=palette[j],
               width=0.7)
        bottom = [b + v for b, v in zip(bottom, series[j])]
    ax.grid(axis="y", alpha=0.3)


def _areas(ax: Any, data: PlotData, scale: int, palette: Sequence[str]) -> None:
    """Stacked areas over a swept size, with the total as a line."""
    x = [int(label) for label in data.labels]
    ax.stackplot(x, *[[row[j] / scale for row in data.values] for j in range(len(data.parts))], labels=data.parts,
                 colors=palette)
    ax.plot(x, [t / scale for t in data.totals], color="black", linewidth=1, marker=".", label="total")
    if data.kind == "seq":
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, data.labels)
    ax.set_xlim(x[0], x[-1])
    ax.grid(axis="y", alpha=0.3)


def save(fig: Any, path: str | Path) -> Path:
    """Write ``fig`` as PNG, SVG or PDF (by suffix), without timestamps so reruns give the same file."""
    path = Path(path)
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in ("png", "svg", "pdf"):
        raise ValueError(f"plot file must end in .png, .svg or .pdf, got {path.name!r}")
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[suffix]
    fig.savefig(path, format=suffix, metadata=metadata)
    return path
