"""The cited works as data: every citation anywhere names an entry of ``derivations.references``, every entry is
cited somewhere, entries are well-formed, ``memderive references`` prints them and writeups list what they cite."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.references import REFERENCES, UnknownReference, cite, cited, reference
from memderive.symbolic.formula import Citation
from memderive.documents.writeup import estimate_document

ROOT = Path(__file__).resolve().parents[1]
PY_FILES = sorted(p for folder in ("symbolic", "derivations", "render", "tests", "benchmarks")
                  for p in (ROOT / folder).rglob("*.py"))
TABLE = ROOT / "derivations" / "references.py"


@functools.lru_cache(maxsize=1)
def _literal_keys() -> dict[str, list[str]]:
    """Each string-literal key of a ``Citation(...)`` call in the tree, with where it is written."""
    found: dict[str, list[str]] = {}
    for path in PY_FILES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(name, "id", getattr(name, "attr", None)) == "Citation" \
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.setdefault(node.args[0].value, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _citations_in(value: object, depth: int = 0) -> list[Citation]:
    """Citations held by a module-level value: itself, or inside containers and dataclasses (a few levels)."""
    if isinstance(value, Citation):
        return [value]
    if depth > 3 or isinstance(value, (str, bytes, int, float, type)):
        return []
    if isinstance(value, dict):
        items: list[object] = list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        items = list(value)
    elif dataclasses.is_dataclass(value):
        items = [getattr(value, f.name) for f in dataclasses.fields(value)]
    else:
        return []
    return [c for item in items for c in _citations_in(item, depth + 1)]


def _module_citations() -> list[Citation]:
    out = []
    for package in ("memderive", "memderive.symbolic", "memderive.derivations"):
        module = importlib.import_module(package)
        names = [package] + [i.name for i in pkgutil.walk_packages(module.__path__, package + ".")]
        for name in names:
            out += [c for v in vars(importlib.import_module(name)).values() for c in _citations_in(v)]
    return out


#: Estimates whose quantities carry every kind of citation: training (ZeRO, offload, LoRA, QLoRA, int8 base),
#: inference (group-wise quantization), mixture of experts, FLOPs.
ESTIMATES = [
    ("gpt2", {}), ("llama-2-7b", {"mode": "train", "batch": 1, "seq": 1024, "dp": 8, "zero": 3, "offload": True}),
    ("llama-2-7b", {"mode": "train", "batch": 1, "seq": 1024, "lora_rank": 8, "lora_targets": "q_proj,v_proj",
                    "base_dtype": "nf4"}),
    ("llama-2-7b", {"mode": "train", "batch": 1, "seq": 1024, "lora_rank": 8, "lora_targets": "all-linear",
                    "base_dtype": "int8"}),
    ("llama-2-7b", {"mode": "infer", "batch": 1, "seq": 1024, "weight_dtype": "int4"}),
    ("mixtral-8x7b", {}),
]


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_every_literal_citation_key_is_a_reference() -> None:
    keys = _literal_keys()
    unknown = {k: v for k, v in keys.items() if k not in REFERENCES}
    assert not unknown, f"Citation keys with no entry in derivations/references.py: {unknown}"
    assert len(keys) >= 40


def test_every_citation_held_at_run_time_resolves() -> None:
    """Module-level citations (formulas, GPUs, presets, conventions), the quantities of estimates of every kind
    and the other tools' figures all write out through the table (``cite`` raises on an unknown key)."""
    from memderive.derivations.conventions import CONVENTIONS, compare
    from memderive.derivations.estimate import resolve_model
    from memderive.derivations.options import Options

    held = _module_citations()
    for name, options in ESTIMATES:
        held += [q.citation for q in estimate(name, **options).quantities if q.citation is not None]
    rows, _ = compare(resolve_model("llama-2-7b"), Options(mode="train", batch=1, seq=1024), tuple(CONVENTIONS))
    held += [r.source for r in rows]
    assert len(held) > 60 and all(cite(c) for c in held)
    assert {"korthikanti-2022", "rajbhandari-2020", "ren-2021", "hu-2021", "dettmers-2023", "dettmers-2022",
            "frantar-2022", "lepikhin-2020", "megatron-theoretical-memory", "memderive"} <= {
        k for c in held for k in c.keys()}


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_every_reference_is_cited_somewhere() -> None:
    """An entry is cited by a ``Citation`` or named by its key in a source or test file (a comment that says
    where an expected number comes from); the table itself does not count."""
    text = "\n".join(p.read_text() for p in PY_FILES if p != TABLE)
    literal = _literal_keys()  # once, not once per key (that parsed the tree 62 times: 68 s)
    unused = [k for k in REFERENCES if k not in literal and not re.search(rf"(?<![\w-]){re.escape(k)}(?![\w-])", text)]
    assert not unused, f"entries nothing cites: {unused}"


@pytest.mark.parametrize("key", list(REFERENCES))
def test_entry_is_well_formed(key: str) -> None:
    ref = REFERENCES[key]
    assert ref.key == key and ref.label and ref.authors and ref.title
    if ref.kind == "paper":
        # arXiv ids are YYMM.NNNNN; a paper's year is the id's year or the next (ZeRO: 1910.02054, SC20)
        match = re.fullmatch(r"arXiv:(\d\d)(\d\d)\.\d{4,5}", ref.where)
        assert match and 1 <= int(match.group(2)) <= 12 and ref.year in (2000 + int(match.group(1)),
                                                                         2001 + int(match.group(1)))
        assert ref.url == f"https://arxiv.org/abs/{ref.where[6:]}"
    elif ref.url:
        assert re.fullmatch(r"https://[a-z0-9.-]+\.[a-z]{2,}/\S*", ref.url), ref.url
    else:  # a file of this repository
        assert (ROOT / ref.where).is_file()


def test_citation_names_a_key_and_the_table_refuses_others() -> None:
    old_form = ("Korthikanti et al. 2022", "arXiv:2205.05198")  # (authors, where): no longer a citation
    with pytest.raises(ValueError, match="reference key"):
        Citation(*old_form)
    wrong_year = "korthikanti-2021"  # (variables, so that the scan of literal keys above skips these two)
    with pytest.raises(UnknownReference, match="did you mean korthikanti-2022"):
        cite(Citation(wrong_year, "Eq. 1"))
    both = Citation("shazeer-2019", "one K/V head", also=(Citation("ainslie-2023", "G K/V heads"),))
    assert cite(both) == ("Shazeer 2019 (MQA), arXiv:1911.02150, one K/V head; "
                          "Ainslie et al. 2023 (GQA), arXiv:2305.13245, G K/V heads")
    assert [r.key for r in cited([both, None, Citation("shazeer-2019")])] == ["shazeer-2019", "ainslie-2023"]


def test_references_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["references"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line and not line.startswith(" ")]
    assert set(REFERENCES) <= set(listed)
    assert main(["references", "--json"]) == 0
    assert [e["key"] for e in json.loads(capsys.readouterr().out)] == list(REFERENCES)
    assert main(["references", "korthikanti-2022"]) == 0
    out = capsys.readouterr().out
    assert "Reducing Activation Recomputation in Large Transformer Models" in out and "arXiv:2205.05198" in out
    assert main(["references", "dao-2022", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == reference("dao-2022").to_json()
    assert main(["references", "flash"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no reference 'flash'" in err


@pytest.mark.slow  # a whole writeup, about a second
@pytest.mark.parametrize("fmt", ["md", "latex"])
def test_writeup_lists_exactly_the_works_it_cites(fmt: str) -> None:
    doc = estimate_document(estimate("llama-2-7b", mode="train", batch=1, seq=1024, tp=8, sp=True, dp=2, zero=1), fmt)
    head = "## References" if fmt == "md" else r"\section*{References}"
    body, refs = doc.split(head)
    in_body = dict.fromkeys(k for k in re.findall(r"\[([a-z][a-z0-9.-]*)\]", body) if k in REFERENCES)
    item = r"^- \[([^\]]+)\] " if fmt == "md" else r"^\\item\[\{\[([^\]]+)\]\}\] "
    assert re.findall(item, refs, re.M) == list(in_body)
    assert {"korthikanti-2022", "rajbhandari-2020", "narayanan-2021"} <= set(in_body)
    if fmt == "md":  # each key in the text is a Markdown link to the work (reference-style definitions)
        assert re.findall(r"^\[([^\]]+)\]: https://\S+$", refs, re.M) == list(in_body)
