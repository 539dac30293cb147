"""The notebooks in notebooks/: regenerated sources match, they execute cleanly, their totals equal --json; the tour
is built from notebooks/tour.md and shows what the code prints today."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import nbformat
import pytest

from memderive.derivations.estimate import estimate
from memderive.notebooks.bundled import BUNDLED, ROOT, bundled_path, execute, notebook, write
from memderive.notebooks.tour import TOUR, tour
from memderive.documents.writeup import cli_command

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
    run = subprocess.run([sys.executable, "-m", "memderive.commands.cli", *argv], capture_output=True, text=True, timeout=120,
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
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "notebook", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_notebook_writes_and_refuses_to_overwrite(tmp_path) -> None:
    out = tmp_path / "gpt2.ipynb"
    args = ["--model", "gpt2", "--mode", "train", "--batch", "2", "--seq", "1024", "-o", str(out)]
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


# -- the tour (notebooks/tour.ipynb from notebooks/tour.md) --------------------------------------------------------

def _texts(nb) -> list[list[str]]:
    """Each code cell's printed text (its streams joined: the kernel splits them where it likes) and displayed
    text (plain text and Markdown; not images)."""
    out = []
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        outputs = cell.get("outputs", [])
        texts = ["".join(o.text for o in outputs if o.output_type == "stream")]
        for o in outputs:
            if o.output_type in ("execute_result", "display_data"):
                texts += [o.data[k] for k in ("text/markdown", "text/plain") if k in o.data]
        out.append(texts)
    return out


def test_tour_is_built_from_its_source() -> None:
    committed = nbformat.read(TOUR, as_version=4)
    assert _sources(committed) == _sources(tour()), "notebooks/tour.ipynb is stale; run python -m memderive.notebooks.tour"


def test_tour_runs_and_shows_what_the_code_prints_today(update_golden: bool) -> None:
    """Every cell runs without an error, every command line exits 0, 1 (an answer) or, where the tour shows bad
    input, 2; and the outputs equal the committed ones (``--update-golden`` rewrites the notebook)."""
    fresh = execute(tour())
    errors = [o.get("evalue") for c in fresh.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    printed = "".join(t for cell in _texts(fresh) for t in cell)
    commands = [line for c in fresh.cells if c.cell_type == "code" for line in c.source.splitlines()
                if line.startswith("%memderive ")]
    assert len(commands) > 40 and printed.count("$ memderive ") == len(commands)
    # exit code 2 only in the section on bad input, each with its one-line error
    assert printed.count("[exit code 2]") == printed.count("memderive: error:") == 3
    if update_golden:
        write(fresh, TOUR, force=True)
    committed = nbformat.read(TOUR, as_version=4)
    assert _texts(committed) == _texts(fresh), "notebooks/tour.ipynb outputs are stale; run python -m memderive.notebooks.tour"
