"""Issue 40, items 9-11: notes checked where they are written (LaTeX articles and beamer slides,
reStructuredText, HTML, notebooks), in a repository's CI (a pre-commit hook, a summary line per file),
and notes without markers scanned for candidate claims.

Every expected verdict is decided before the run, by hand:
- 2Ψ + 2Ψ + 12Ψ = 16Ψ: mixed-precision Adam's bytes per parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1);
- sbh(34 + 5as/h): Korthikanti et al. 2022, Eq. 1, exact; sbh·11 + 5as²b drops the MLP's 19sbh and the norms';
- 2·2·blh(s+n) is the fp16 cache (K and V, 2 bytes); 8blh(s+n) is twice it;
- N ≈ 12lh² is GPT's leading order (4h² attention + 8h² MLP per layer);
- LLaMA-2-7B's layer is 4h² + 3hf + 2h with f = 11,008 (its config.json), so its leading order is
  (4 + 3·11008/4096)h² = 12.0625h² per layer: 12lh² is not it;
- a KV cache per token is 2 (K, V) · 2 bytes (fp16) · l · h; 2·l·h drops the bytes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memderive.commands.cli import main
from tests.test_check_notes import _compile

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).parent.parent
ARTICLE = FIXTURES / "memory_notes.tex"
SLIDES = FIXTURES / "memory_slides.tex"
#: line -> (verdict, holds), decided before the run (module docstring)
ARTICLE_VERDICTS = {11: ("exact", True), 19: ("exact", True), 24: ("different", False), 33: ("different", False),
                    37: ("leading-order", True)}
SLIDES_VERDICTS = {9: ("exact", True), 14: ("different", False), 19: ("exact", True), 23: ("different", False)}


def _verdicts(out: str, name: str) -> dict[int, tuple[str, bool]]:
    return {int(m.group(1)): (m.group(2), m.group(3) == "holds")
            for m in re.finditer(rf"{re.escape(name)}:(\d+): ([\w-]+) \((holds|does not hold)\)", out)}


# --- 9. LaTeX, reStructuredText, HTML and notebooks ------------------------------------------------------------------

@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_9_latex_article_and_beamer_deck(capsys: pytest.CaptureFixture) -> None:
    """Before: "memory_notes.tex: no marked claims" (the % markers were not read) and exit 0."""
    assert main(["check", "--file", str(ARTICLE), str(SLIDES)]) == 1
    out = capsys.readouterr().out
    assert _verdicts(out, "memory_notes.tex") == ARTICLE_VERDICTS
    assert _verdicts(out, "memory_slides.tex") == SLIDES_VERDICTS
    # 10: a summary line per file
    assert f"{ARTICLE}: 5 claims: 3 hold, 2 do not hold" in out.splitlines()
    assert f"{SLIDES}: 4 claims: 2 hold, 2 do not hold" in out.splitlines()
    # the $sbh$ in a comment and the claim in a verbatim block are not read
    assert "verbatim" not in out and len(_verdicts(out, "memory_notes.tex")) == 5


def test_9_latex_markers_and_environments() -> None:
    from memderive.documents.notes_formats import to_markdown
    from memderive.derivations.claims.markers import find_claims

    tex = ("% memderive-defaults: model=llama-2-7b\n"
           "Costs 100\\% of ``the'' budget. % memderive: quantity=params.total\n"
           "\\begin{align*}\n  N &= 12lh^2 \\\\\n    &\\approx 12lh^2. \\nonumber\n\\end{align*}\n"
           "% memderive: quantity=params.total\n\\(N \\approx 12lh^2\\)\n"
           "% memderive: quantity=params.total\n\\[\\begin{aligned} N &\\approx 12lh^2 \\end{aligned}\\]\n"
           "% a comment: $12lh^2$ % memderive: is not a marker here\n")
    found = find_claims(to_markdown(tex, "tex"))
    assert [(m.line, " ".join(m.formula.split())) for m in found] == [(3, "N = 12lh^2 \\approx 12lh^2"),
                                                   (8, "N \\approx 12lh^2"), (10, "N \\approx 12lh^2")]
    assert found[0].claim.model == "llama-2-7b"


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_9_restructuredtext_html_and_notebook(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: each gave "no marked claims" (exit 0) although the 12lh^2 below is GPT-3's leading order only and
    the fp16 KV cache per token is 4lh, not 2lh."""
    rst = tmp_path / "notes.rst"
    rst.write_text("Parameters\n==========\n\n.. memderive: quantity=params.total\n\n.. math::\n   :label: n\n\n"
                   "   N = 12lh^2\n\nThe cache per token\n\n.. memderive: quantity=kv_cache.per_token kv-dtype=fp16\n\n"
                   "It is :math:`2lh` bytes.\n")
    page = tmp_path / "notes.html"
    page.write_text("<html><body><h1>Parameters</h1>\n<!-- memderive: quantity=params.total -->\n"
                    "<p>\\(N \\approx 12lh^2\\)</p>\n<!-- memderive: quantity=kv_cache.per_token kv-dtype=fp16 -->\n"
                    "<p><code>2 &middot; 2 &middot; l &middot; h</code></p>\n</body></html>\n")
    book = tmp_path / "notes.ipynb"
    book.write_text(json.dumps({"cells": [
        {"cell_type": "code", "source": ["# <!-- memderive: quantity=params.total -->\n", "x = 1\n"]},
        {"cell_type": "markdown", "source": ["<!-- memderive: quantity=kv_cache.per_token kv-dtype=fp16 -->\n",
                                             "$2 \\cdot 2 \\cdot l \\cdot h$\n"]}], "nbformat": 4}))
    assert main(["check", "--file", str(rst), str(page), str(book)]) == 1
    out = capsys.readouterr().out
    # N = 12lh^2 written with '=' is GPT-3's leading order only: it does not hold as an equality
    assert _verdicts(out, "notes.rst") == {9: ("leading-order", False), 15: ("different", False)}
    assert _verdicts(out, "notes.html") == {3: ("leading-order", True), 5: ("exact", True)}
    assert _verdicts(out, "notes.ipynb") == {2: ("exact", True)}  # one JSON line: the line in the cells' text
    # as Jupyter writes it (indent 1, keys sorted, one source line per JSON line): the line of the .ipynb file
    book.write_text(json.dumps(json.loads(book.read_text()), indent=1, sort_keys=True) + "\n")
    claim_line = next(i for i, x in enumerate(book.read_text().split("\n"), 1) if "cdot" in x)
    assert main(["check", "--file", str(book)]) == 0
    assert _verdicts(capsys.readouterr().out, "notes.ipynb") == {claim_line: ("exact", True)}
    assert f"{page}: 2 claims: 2 hold, 0 do not hold" in out
    # a reading the checker is unsure of is said in the file's report, even where the claim holds
    label = tmp_path / "labels.md"
    label.write_text("<!-- memderive: quantity=kv_cache.per_token model=llama-2-7b kv-dtype=fp16 -->\n"
                     "$2 (K,V) \\cdot 2 \\cdot 32 \\cdot 4096$\n")
    assert main(["check", "--file", str(label)]) == 0
    assert "    unsure: read (K,V) after 2 as the factor's label, not a product" in capsys.readouterr().out


# --- 10. CI: the pre-commit hook, exit status, --json --------------------------------------------------------------

def test_10_pre_commit_hook_is_declared() -> None:
    """Before: no .pre-commit-hooks.yaml at the repository's root."""
    text = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert re.search(r"^- id: memderive-check$", text, re.M)
    assert re.search(r"^  entry: memderive check --file$", text, re.M)
    files = re.search(r"^  files: (.+)$", text, re.M).group(1)
    for name in ("a.md", "b.tex", "c.rst", "d.html", "e.ipynb"):
        assert re.search(files, name), name
    assert not re.search(files, "setup.py")
    readme = (ROOT / "README.md").read_text()
    assert "memderive check --file $(git ls-files" in readme and ".pre-commit-hooks.yaml" in readme


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_10_json_names_the_file_and_unmarked_files_pass(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    plain = tmp_path / "plain.md"
    plain.write_text("No claims here.\n")
    assert main(["check", "--file", str(plain)]) == 0  # a hook over every file: one without markers passes
    assert capsys.readouterr().out.strip() == f"{plain}: no marked claims (see README, 'Checking formulas')"
    assert main(["check", "--file", str(SLIDES), str(plain), "--json"]) == 1
    rows = json.loads(capsys.readouterr().out)
    assert [(r["file"], r["line"], r["verdict"]) for r in rows] == [(str(SLIDES), line, verdict)
                                                                   for line, (verdict, _) in SLIDES_VERDICTS.items()]


# --- 11. check --scan: candidate claims of unmarked notes --------------------------------------------------------------

SCANNED = """# Serving LLaMA-2-7B

For a batch of 8 at a sequence length of 4096, the KV cache per token is
$2 \\cdot 2 \\cdot l \\cdot h$ bytes, so the whole cache is 16 GB.

The parameters: $N \\approx 12 l h^2$, about 6.7B.

Unrelated: $x^2$ and 3 apples.

<!-- memderive: quantity=params.total -->
$12lh^2$
"""


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_11_scan_lists_candidates_and_never_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Before: "unrecognized arguments: --scan" (exit 2)."""
    notes = tmp_path / "serving.md"
    notes.write_text(SCANNED)
    assert main(["check", "--scan", str(notes)]) == 0
    out = capsys.readouterr().out
    assert (f"{notes}:4: would check kv_cache.per_token (llama-2-7b, batch=8, seq=4,096): 2 \\cdot 2 \\cdot l \\cdot h"
            in out)
    assert "add before it: <!-- memderive: quantity=kv_cache.per_token model=llama-2-7b batch=8 seq=4096 -->" in out
    assert f"{notes}:4: would check kv_cache.total (llama-2-7b, batch=8, seq=4,096): 16 GB" in out
    assert f"{notes}:6: would check params.total (llama-2-7b): 6.7B" in out
    assert "x^2" not in out and "apples" not in out  # no quantity's words near them
    assert ":11:" not in out  # marked already
    assert out.rstrip().endswith("4 candidate claims, 4 readable as written (a scan checks nothing: exit 0)")
    slides = tmp_path / "slides.tex"
    slides.write_text("\\begin{frame}{Activations of GPT-3 175B}\nPer layer: $sbh(34 + 5as/h) + q$\n\\end{frame}\n")
    assert main(["check", "--scan", str(slides), "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["quantity"] == "activations.per_layer" and row["model"] == "gpt3-175b"
    assert row["marker"] == "% memderive: quantity=activations.per_layer model=gpt3-175b"
    assert not row["readable"] and "'q'" in row["reading"]  # a reading the checker is unsure of is said


def test_11_scan_reads_settings_near_a_claim(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The element type, the LoRA rank and targets a sentence names go into the proposed marker; a size ("32K
    tokens") is a size, not a candidate; each candidate is read with the marker proposed (W is Mistral's window)."""
    notes = tmp_path / "mistral.md"
    notes.write_text("# Serving Mistral-7B\n\nIn fp16, for a batch of 8 and 32K tokens, the KV cache is "
                     "$4 b l a_{kv} d_h W$ bytes.\n\nA LoRA of rank 16 on every linear layer trains 0.59% of the "
                     "parameters.\n")
    assert main(["check", "--scan", str(notes)]) == 0
    out = capsys.readouterr().out
    assert "32K" not in out.split("\n")[0].rsplit(":", 1)[-1]
    assert (f"{notes}:3: would check kv_cache.total (mistral-7b, kv-dtype=fp16, batch=8, seq=32,768): "
            "4 b l a_{kv} d_h W") in out
    assert "<!-- memderive: quantity=params.trainable model=mistral-7b lora-rank=16 lora-targets=all-linear -->" in out
    assert out.rstrip().endswith("2 candidate claims, 2 readable as written (a scan checks nothing: exit 0)")


def test_9_the_article_fixture_is_latex(tmp_path: Path) -> None:
    """The article is a document a teacher compiles (pdflatex in CI; locally the test skips without it)."""
    _compile(tmp_path, {"notes.tex": ARTICLE.read_text()})
