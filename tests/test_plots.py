"""Plots at the data level (the writeup's breakdown rows, exact integers), plus files written."""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.figures.plots import breakdown_data, colors, draw, plot_data, save, strategy_ladder, sweep_data
from memderive.documents.steps import breakdown_rows
from memderive.symbolic.dims import b, s


@pytest.fixture(scope="module")
def est():
    return estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="selective")


def test_ladder_layouts(est) -> None:
    ladder = dict(strategy_ladder(est))
    assert list(ladder)[:4] == ["none", "TP 8", "TP 8 + SP", "TP 8 + SP + selective"]
    assert ladder["none"].tp == 1 and not ladder["none"].sp and ladder["none"].recompute == "none"
    assert ladder["TP 8 + SP + full recompute"].recompute == "full"
    assert [ladder[f"TP 8 + SP + selective + ZeRO-{z}"].zero for z in (1, 2, 3)] == [1, 2, 3]


def test_model_without_a_tp_of_8_gets_the_largest_degree_that_divides() -> None:
    ladder = dict(strategy_ladder(estimate("gpt2", mode="train", batch=1, seq=1024)))
    assert "TP 4" in ladder  # 12 heads: 8 does not divide, 4 does


def test_bars_are_the_tables_rows(est) -> None:
    data = breakdown_data(est, capacity=80 * 2**30)
    for (label, opts), row, total in zip(strategy_ladder(est), data.values, data.totals):
        layout = estimate(est.model, opts)
        assert total == layout.number("total_bytes"), label
        assert dict(zip(data.parts, row)) == {r.path: r.value for r in breakdown_rows(layout, "total_bytes")} | {
            p: 0 for p in data.parts if p not in {r.path for r in breakdown_rows(layout, "total_bytes")}}
    totals = dict(zip(data.labels, data.totals))
    # FlashAttention (the default) saves no scores: selective recompute (Megatron-Core's core_attn checkpoint of the
    # kernel) drops only its fp32 logsumexp, 4 a b s / t per layer, and its rerun in backward writes the output again,
    # 2 b s h / t, beside that layer's logsumexp (llama-2-7b, b 1, s 4096, t 8):
    #   (2 * 4096 * 4096 + 4 * 32 * 4096) / 8 - 32 * 4 * 32 * 4096 / 8 = 4,259,840 - 2,097,152 = 2,162,688 B more
    assert totals["none"] > totals["TP 8"] > totals["TP 8 + SP"]
    assert totals["TP 8 + SP + selective"] - totals["TP 8 + SP"] == 2_162_688
    assert totals["TP 8 + SP + selective"] > totals["TP 8 + SP + full recompute"]
    assert totals["TP 8 + SP + selective + ZeRO-3"] < totals["TP 8 + SP + selective + ZeRO-1"]
    assert data.capacity == 80 * 2**30


@pytest.mark.parametrize(("dim", "symbol"), [("s", s), ("b", b)])
def test_sweeps_evaluate_the_same_formulas(est, dim, symbol) -> None:
    data = sweep_data(est, dim)
    xs = [int(x) for x in data.labels]
    assert xs == sorted(xs) and len(xs) >= 5
    for x, total in zip(xs, data.totals):
        assert total == sum(r.value for r in breakdown_rows(est, "total_bytes", {symbol: x}))
    if est.values[symbol] in xs:
        assert data.totals[xs.index(est.values[symbol])] == est.number("total_bytes")
    assert all(later >= earlier for earlier, later in zip(data.totals, data.totals[1:]))


def test_sequence_sweep_stops_at_the_models_context() -> None:
    gpt3 = estimate("gpt3-175b", mode="train", batch=1, seq=2048, tp=8, pp=8, sp=True)
    assert max(int(x) for x in sweep_data(gpt3, "s").labels) == 2048


def test_bad_kinds_are_refused(est) -> None:
    with pytest.raises(ValueError, match="kind"):
        plot_data(est, "pie")
    with pytest.raises(ValueError, match="sweep"):
        sweep_data(est, "h")


def test_colours_group_model_states_and_layers() -> None:
    palette = colors(["model_states/weights", "model_states/gradients", "layer/attn", "head"])
    assert len(set(palette)) == 4 and palette[0].startswith("#08")


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
@pytest.mark.parametrize(("suffix", "magic"), [("png", b"\x89PNG"), ("svg", b"<"), ("pdf", b"%PDF")])
def test_files_are_written(est, tmp_path, suffix, magic) -> None:
    path = save(draw(sweep_data(est, "b", points=[1, 2, 4], capacity=80 * 10**9)), tmp_path / f"plot.{suffix}")
    assert path.read_bytes().startswith(magic)
    with pytest.raises(ValueError, match=".png, .svg or .pdf"):
        save(draw(sweep_data(est, "b", points=[1, 2])), tmp_path / "plot.jpg")


def test_cli_plot(tmp_path) -> None:
    out = tmp_path / "bars.png"
    args = [sys.executable, "-m", "memderive.commands.cli", "plot", "--model", "mistral-7b", "--batch", "1", "--seq", "4096",
            "--tp", "8", "--sp", "--kind", "breakdown", "--gpu-memory", "80GB"]
    run = subprocess.run([*args, "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert out.read_bytes().startswith(b"\x89PNG")
    bad = subprocess.run([*args, "-o", str(tmp_path / "bars.jpg")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and ".png, .svg or .pdf" in bad.stderr
