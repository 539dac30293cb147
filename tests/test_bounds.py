"""Hangs, blow-ups and misuse become one line, fast (issue 20, items 4-8).

``plan`` past the 10^15 bound, or at it on 8 GPUs; ``sweep`` grids too large to hold (the range parser, the
layout loop, the CSV); ``check --file`` with 40,000 copies of a claim or 3 MB of backticks; ``sweep`` called
like ``estimate`` with a positional mode; a warning about ``--micro-batches`` that a ``--pp`` range makes
wrong. Each runs the command line in-process and times it: a refusal is one stderr line, exit code 2, in
well under a second (the bound: 1 s plus what a loaded 2-core machine adds, ``SLACK``).
"""

from __future__ import annotations

import time

import pytest

from memderive.commands.cli import main

SLACK = 2.0  # seconds a loaded machine may add to the second a refusal takes
TRAIN = ("--mode", "train", "--batch", "1", "--seq", "128")


def _timed(capsys, *args: str) -> tuple[int, str, str, float]:
    start = time.perf_counter()
    code = main(list(args))
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    return code, out, err, elapsed


def _refused(capsys, *args: str) -> str:
    code, out, err, elapsed = _timed(capsys, *args)
    lines = err.strip().splitlines()
    assert (code, out, len(lines)) == (2, "", 1), (code, out[:500], err[:2000])
    assert elapsed < 1 + SLACK, f"{elapsed:.1f} s: {args}"
    return lines[0]


# -- 4. plan ---------------------------------------------------------------------------------------------------------

def test_plan_past_the_bound_is_refused(capsys) -> None:
    line = _refused(capsys, "plan", "--model", "gpt2", "--seq", "128", "--gpu-memory", "80GB",
                    "--global-batch", "10000000000000000")
    assert "--global-batch" in line and "10^15" in line


@pytest.mark.slow  # seconds on a loaded machine: a plan, a 3 MB file
def test_plan_at_the_bound_answers(capsys) -> None:
    # 10^15 = 2^15 5^15 has 256 divisors: the micro-batch sizes of each layout of 8 GPUs
    code, out, err, elapsed = _timed(capsys, "plan", "--model", "gpt2", "--seq", "128", "--gpus", "8",
                                     "--gpu-memory", "80GB", "--global-batch", "1000000000000000")
    assert code in (0, 1) and "Traceback" not in err and elapsed < 5 + SLACK, (code, err[-2000:], elapsed)


@pytest.mark.slow  # seconds on a loaded machine: a plan, a 3 MB file
def test_plan_with_too_many_layouts_says_so(capsys) -> None:
    # 963,761,198,400 has 6,720 divisors: every data-parallel degree and micro-batch size of them
    line = _refused(capsys, "plan", "--model", "gpt2", "--seq", "128", "--gpu-memory", "80GB",
                    "--global-batch", "963761198400")
    assert "layouts" in line and "limit" in line and "--gpus" in line


# -- 5. sweep grids --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("--batch", "1:10000000000"),
    ("--seq", "1:10000000000"),
    ("--tp", "1:1000000:1"),
    ("--batch", "1:1000000:1", "--seq", "64,128,256"),
    ("--new-tokens", "1:1000000:1"),
])
def test_a_grid_past_the_limit_is_refused_before_it_is_built(capsys, args) -> None:
    mode = ("--mode", "infer", "--batch", "1", "--seq", "8") if "--new-tokens" in args else TRAIN
    line = _refused(capsys, "sweep", "--model", "gpt2", *mode, *args)
    assert "limit" in line and any(word in line for word in ("points", "layouts", "rows")), line


def test_the_csv_limit_is_said(capsys, tmp_path) -> None:
    out = tmp_path / "out.csv"
    line = _refused(capsys, "sweep", "--model", "gpt2", "--mode", "infer", "--batch", "1", "--seq", "8",
                    "--new-tokens", "1:200000", "-o", str(out))
    assert "200,000" in line and "limit" in line and not out.exists()


def test_the_api_bounds_the_grid() -> None:
    from memderive.derivations.search.sweep import MAX_POINTS, SweepError, sweep

    start = time.perf_counter()
    with pytest.raises(SweepError, match=r"999,999,999,999 .*limit") as info:
        sweep("gpt2", mode="train", batch=1, seq=128, pp=range(1, 10**12))
    assert f"{MAX_POINTS:,}" in str(info.value) and time.perf_counter() - start < 1 + SLACK


# -- 6. check --file -------------------------------------------------------------------------------------------------

CLAIM = "<!-- memderive: quantity=params.total model=gpt2 -->\n$N = 12lh^2$\n\n"


@pytest.mark.slow  # seconds on a loaded machine: a plan, a 3 MB file
def test_forty_thousand_claims_are_refused_at_once(capsys, tmp_path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text(CLAIM * 40_000)  # 2.7 MB, under the 4 MB file limit
    line = _refused(capsys, "check", "--file", str(notes))
    assert "40,000" in line and "limit" in line


@pytest.mark.slow  # seconds on a loaded machine: a plan, a 3 MB file
def test_a_marker_before_three_megabytes_of_backticks(capsys, tmp_path) -> None:
    notes = tmp_path / "ticks.md"
    notes.write_text("<!-- memderive: quantity=params.total model=gpt2 -->\n" + "`" * 3_000_000)
    code, out, err, elapsed = _timed(capsys, "check", "--file", str(notes))
    assert code == 2 and "without a formula" in out and elapsed < 1 + SLACK, (code, out[:300], err, elapsed)


@pytest.mark.slow  # seconds on a loaded machine: a plan, a 3 MB file
def test_repeated_claims_are_checked_once(capsys, tmp_path, monkeypatch) -> None:
    import importlib

    # the command binds check_claim at its top (commands/check.py): patched there
    command = importlib.import_module("memderive.commands.check")
    calls = []
    real = command.check_claim
    monkeypatch.setattr(command, "check_claim", lambda claim: calls.append(claim) or real(claim))
    notes = tmp_path / "notes.md"
    notes.write_text(CLAIM * 50)
    code, out, _, _ = _timed(capsys, "check", "--file", str(notes))
    assert code in (0, 1) and out.count("params.total") >= 50 and len(calls) == 1


# -- 7, 8. misuse and warnings -------------------------------------------------------------------------------------

def test_sweep_called_like_estimate_says_how_to_call_it() -> None:
    from memderive.derivations import sweep
    from memderive.derivations.options import ArgumentError

    with pytest.raises(ArgumentError, match=r"^options must be an Options, got 'train' \(str\)"):
        sweep("gpt2", "train")


def test_no_micro_batch_warning_when_the_pp_range_has_pipelines(capsys) -> None:
    line = _refused(capsys, "sweep", "--model", "gpt2", *TRAIN, "--pp", "1:1000000:1", "--micro-batches", "1")
    assert "--pp" in line and "limit" in line
    code, _, err, _ = _timed(capsys, "sweep", "--model", "gpt2", *TRAIN, "--pp", "1,2", "--micro-batches", "2")
    assert (code, err) == (0, "")
