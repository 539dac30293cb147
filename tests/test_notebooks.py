"""The notebooks in notebooks/: regenerated sources match, they execute cleanly, their totals equal --json."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import nbformat
import pytest

from memderive.derivations.estimate import estimate
from memderive.notebooks import BUNDLED, ROOT, bundled_path, execute, notebook
from memderive.writeup import cli_command

MODELS = [model for model, _ in BUNDLED]


def _sources(nb) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
@pytest.mark.parametrize(("model", "kwargs"), BUNDLED, ids=MODELS)
def test_committed_notebook_is_not_stale(model, kwargs) -> None:
    path = bundled_path(model)
    assert path.exists(), f"{path.name} missing; run python -m memderive.notebooks"
    committed = nbformat.read(path, as_version=4)
    fresh = notebook(estimate(model, **kwargs))
    assert _sources(committed) == _sources(fresh), f"{path.name} is stale; run python -m memderive.notebooks {model}"
    assert all(cell.get("outputs") for cell in committed.cells if cell.cell_type == "code"), "not executed"


def _json_of(model: str, kwargs: dict) -> dict:
    argv = shlex.split(cli_command(estimate(model, **kwargs), ["--json"]))[1:]
    run = subprocess.run([sys.executable, "-m", "memderive.cli", *argv], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize(("model", "kwargs"), BUNDLED, ids=MODELS)
def test_notebook_executes_and_prints_the_cli_totals(model, kwargs) -> None:
    nb = execute(nbformat.read(bundled_path(model), as_version=4))
    errors = [out for cell in nb.cells for out in cell.get("outputs", []) if out.output_type == "error"]
    assert not errors, errors[0].get("evalue") if errors else ""
    shown = "".join(out.get("data", {}).get("text/markdown", "") for cell in nb.cells
                    for out in cell.get("outputs", []))
    assert "memderive could not derive this" not in shown
    printed = "".join(out.text for out in nb.cells[-1].outputs if out.output_type == "stream")
    totals = {k: int(v) for k, v in re.findall(r"^(\w+) = (\d+)$", printed, re.M)}
    data = _json_of(model, kwargs)
    assert totals == {k: v for k, v in data.items() if isinstance(v, int)}
    pngs = [out for cell in nb.cells for out in cell.get("outputs", []) if "image/png" in out.get("data", {})]
    assert len(pngs) == 5  # memory across layouts, against s and b; FLOPs across layouts and against s


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.cli", "notebook", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_notebook_writes_and_refuses_to_overwrite(tmp_path) -> None:
    out = tmp_path / "gpt2.ipynb"
    args = ["--model", "gpt2", "--batch", "2", "--seq", "1024", "-o", str(out)]
    first = _cli(*args)
    assert first.returncode == 0, first.stderr
    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    assert "estimate('gpt2', mode='train', batch=2, seq=1024)" in nb.cells[1].source
    again = _cli(*args)
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr.strip().splitlines() == [f"memderive: error: {out} exists; pass --force to overwrite it"]
    assert _cli(*args, "--force").returncode == 0
    bad = _cli("--model", "gpt2", "--batch", "1", "--seq", "8", "-o", str(tmp_path / "x.txt"))
    assert bad.returncode == 2 and "ipynb" in bad.stderr
