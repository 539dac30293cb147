"""Markdown and LaTeX writeups: golden documents, numbers that equal --json, a PDF that compiles."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memderive.derivations.estimate import estimate
from memderive.documents.units import RenderOptions
from memderive.documents.writeup import estimate_document, quantity_document
from tests.pdflatex import require_pdflatex

GOLDEN = Path(__file__).parent / "golden"
SSM_DOCUMENTS = ("mamba2-2.7b", "bamba-9b-like")
TRAIN = ["--model", "llama-2-7b", "--mode", "train", "--batch", "1", "--seq", "4096", "--tp", "8", "--sp",
         "--recompute", "selective"]


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", *args], capture_output=True, text=True, timeout=120)


def train_7b():
    return estimate("llama-2-7b", mode="train", batch=1, seq=4096, tp=8, sp=True, recompute="selective")


DOCUMENTS = {
    "estimate-llama-2-7b-train.md": lambda: estimate_document(train_7b(), "md"),
    "estimate-llama-2-7b-train.tex": lambda: estimate_document(train_7b(), "latex"),
    "estimate-gpt2-params.md": lambda: estimate_document(estimate("gpt2"), "md"),
    "derive-activations-gpt3-175b.md": lambda: quantity_document(
        estimate("gpt3-175b", mode="train", batch=1, seq=1, tp=8, sp=True), "activation_bytes_per_layer", "md",
        RenderOptions(detail="symbolic")),
    "derive-model-states-llama-2-70b.tex": lambda: quantity_document(
        estimate("llama-2-70b", mode="train", batch=1, seq=4096, tp=8, pp=4, dp=8, zero=1), "model_state_bytes",
        "latex", RenderOptions(precision=3, units="IEC")),
}


@pytest.mark.parametrize("name", list(DOCUMENTS))
def test_golden_document(name, update_golden) -> None:
    text = DOCUMENTS[name]()
    path = GOLDEN / name
    if update_golden:
        path.write_text(text)
    assert path.exists(), f"no golden file {path.name}; run pytest --update-golden and review the diff"
    assert text == path.read_text(), f"{path.name} changed; if intended, run pytest --update-golden"


@pytest.fixture(scope="module")
def train_markdown_and_json() -> tuple[str, dict]:
    md, js = cli("estimate", *TRAIN, "--format", "md"), cli("estimate", *TRAIN, "--json")
    assert md.returncode == 0 and js.returncode == 0, md.stderr + js.stderr
    return md.stdout, json.loads(js.stdout)


def _int(text: str) -> int:
    return int(text.replace("{,}", "").replace(",", ""))


def test_every_number_in_the_markdown_equals_json(train_markdown_and_json) -> None:
    md, data = train_markdown_and_json
    keys = [k for k in data if isinstance(data[k], int)]
    summary = dict(re.findall(r"^\| [^|]+ \| `(\w+)` \| ([\d,]+)(?: B)? \|", md, re.M))
    assert sorted(summary) == sorted(keys)
    sections = re.split(r"^## ", md, flags=re.M)
    for key in keys:
        assert _int(summary[key]) == data[key], key
        section = next(s for s in sections if re.match(rf"[^\n]*\(`{key}`, ", s))
        stated = re.search(r"^\*\*[^*]+ = ([\d,]+)(?: B)?\*\*", section, re.M)
        assert _int(stated.group(1)) == data[key], key
        results = re.findall(r"^&= ([\d{},]+)(?:\\ \\text\{B\})?(?: \\approx[^\n]*)?$", section, re.M)
        assert not results or _int(results[-1]) == data[key], key  # the last step shown is the quantity
    breakdown = next(s for s in sections if s.startswith("Breakdown of "))
    rows = re.findall(r"^\| `[\w/]+` \| \$[^$]*\$ \| ([\d,]+) \|", breakdown, re.M)
    total = re.search(r"^\| \*\*total\*\* \| \| \*\*([\d,]+) B\*\*", breakdown, re.M)
    assert sum(_int(r) for r in rows) == _int(total.group(1)) == data["total_bytes"]


def test_numbers_of_each_step_add_up(train_markdown_and_json) -> None:
    md, _ = train_markdown_and_json
    table = re.search(r"Terms of one layer[^\n]*\n\n((?:\|[^\n]*\n)+)", md).group(1)
    values = [_int(v) for v in re.findall(r"\| ([\d,]+) \|$", table, re.M)]
    one_layer = re.search(r"\*\*Step \d+\. One layer\.\*\*.*?&= ([\d{},]+) \\approx", md, re.S).group(1)
    assert sum(values) == _int(one_layer)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    require_pdflatex()
    work = tmp_path_factory.mktemp("latex")
    (work / "train.tex").write_text(estimate_document(train_7b(), "latex"))
    infer = estimate("llama-2-70b", mode="infer", batch=2, seq=4096, new_tokens=256, tp=8)
    (work / "infer.tex").write_text(estimate_document(infer, "latex"))
    for name in SSM_DOCUMENTS:  # the state space and hybrid writeups (tests/test_ssm.py keeps them golden)
        (work / f"{name}.tex").write_text((GOLDEN / f"estimate-{name}-infer.tex").read_text())
    for name in ("train.tex", "infer.tex", *(f"{x}.tex" for x in SSM_DOCUMENTS)):
        run = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", name], cwd=work,
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stdout[-3000:]
    return work


def test_training_document_compiles_with_pdflatex(compiled) -> None:
    pdf = compiled / "train.pdf"
    assert pdf.stat().st_size > 10_000 and pdf.read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize("name", ["train", "infer", *SSM_DOCUMENTS])
def test_documents_fit_the_page(compiled, name) -> None:
    log = (compiled / f"{name}.log").read_text(errors="replace")
    widths = [float(x) for x in re.findall(r"Overfull \\hbox \(([\d.]+)pt too wide\)", log)]
    assert all(w < 10 for w in widths), widths
    assert "mktexpk" not in log  # no bitmap fonts generated: only the standard Type 1 fonts


@pytest.mark.parametrize("fmt", ["md", "latex"])
def test_inference_quantities_render_through_the_same_path(fmt) -> None:
    est = estimate("llama-2-70b", mode="infer", batch=2, seq=4096, new_tokens=256, tp=8)
    doc = estimate_document(est, fmt)
    for q in est.quantities:
        assert f"{est.number(q.key):,}" in doc


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_detail_modes_and_precision() -> None:
    est = train_7b()
    symbolic = estimate_document(est, "md", RenderOptions(detail="symbolic"))
    numeric = estimate_document(est, "md", RenderOptions(detail="numeric", precision=4))
    assert "16{,}0" not in symbolic and "## Results" not in symbolic
    assert r"\cdot 4{,}096" not in numeric and " GiB" in numeric
    assert re.search(r"\d+\.\d{4} GiB", numeric)


def test_unknown_format_and_quantity() -> None:
    with pytest.raises(ValueError, match="format"):
        estimate_document(train_7b(), "html")
    with pytest.raises(KeyError, match="no quantity"):
        quantity_document(train_7b(), "nope", "md")


def test_cli_derive_writes_markdown_and_latex(tmp_path) -> None:
    out = tmp_path / "act.tex"
    run = cli("derive", "activations", "--model", "llama-2-7b", "--batch", "1", "--seq", "4096", "--tp", "8",
              "--sp", "--format", "latex", "-o", str(out))
    assert run.returncode == 0, run.stderr
    text = out.read_text()
    assert text.startswith(r"\documentclass") and text.rstrip().endswith(r"\end{document}")
    md = cli("derive", "params", "--model", "gpt2", "--format", "md", "--decimals", "1")
    assert md.returncode == 0 and "124,439,808" in md.stdout and "(124.4 million)" in md.stdout


def test_text_and_json_paths_do_not_import_jinja_or_matplotlib() -> None:
    code = ("import sys, io, contextlib; from memderive.commands.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main({['estimate', *TRAIN, '--json']!r}); main({['estimate', *TRAIN]!r})\n"
            "print(sorted(m for m in ('jinja2', 'matplotlib', 'nbformat') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
