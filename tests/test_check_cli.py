"""``memderive check``: exit codes, JSON, Markdown files, and untrusted input without side effects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from memderive.commands.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memderive.commands.cli", "check", *args], capture_output=True, text=True,
                          timeout=120)


MALICIOUS = [
    "__import__('os').system('touch {target}')",
    "open('{target}', 'w').write('x')",
    "(lambda: __import__('pathlib').Path('{target}').touch())()",
    "s.__class__.__base__.__subclasses__()",
    r"\input{{{target}}} \write18{{touch {target}}}",
    "s" * 10_000,
    "sbh(34 + 5as/h",
]


@pytest.mark.parametrize("claim", MALICIOUS[:2])
def test_malicious_claims_fail_in_one_line_without_side_effects(tmp_path: Path, claim: str) -> None:
    """A whole process: exit 2, one line on stderr, no traceback, nothing written."""
    target = tmp_path / "pwned"
    result = run("--quantity", "params.total", "--claim", claim.format(target=target))
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not target.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("claim", MALICIOUS)
def test_bad_claims_in_process(tmp_path: Path, capsys: pytest.CaptureFixture, claim: str) -> None:
    target = tmp_path / "pwned"
    text = claim.format(target=target) if "{target}" in claim else claim
    assert main(["check", "--quantity", "activations.per_layer", "--claim", text]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("memderive: error: ")
    assert not target.exists()


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_exit_codes_and_json(capsys: pytest.CaptureFixture) -> None:
    assert main(["check", "--quantity", "activations.per_layer", "--claim", "sbh(34 + 5as/h)", "--attention",
                 "eager"]) == 0  # Korthikanti et al.'s eager attention
    assert capsys.readouterr().out.startswith("exact (holds)")
    assert main(["check", "--quantity", "activations.per_layer", "--claim", "sbh(34 + 5as/h)", "--flash",
                 "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "conditional" and out["holds_under"] == ["without FlashAttention"]
    assert {"verdict", "difference", "counterexample"} <= set(out)
    assert main(["check", "--quantity", "params.total", "--claim", "4*R*N**2*D**2", "--symbols",
                 "R=l,N=a,D=h/a", "--syntax", "python"]) == 1
    assert "layer/mlp" in capsys.readouterr().out
    assert main(["check", "--quantity", "params.total", "--claim", "12lh^2", "--expect", "leading-order"]) == 0


def test_reports_in_markdown_and_latex(capsys: pytest.CaptureFixture) -> None:
    assert main(["check", "--quantity", "params.total", "--claim", "8lh^2", "--format", "md"]) == 1
    md = capsys.readouterr().out
    assert md.startswith("### params.total: different") and "`layer/attn/qkv/weight`" in md
    assert main(["check", "--quantity", "params.total", "--claim", "8lh^2", "--format", "latex"]) == 1
    assert r"\begin{align*}" in capsys.readouterr().out


NOTES = r"""# Memory notes

<!-- memderive-defaults: model=gpt3-175b -->

Activations per layer (Korthikanti et al. 2022, Eq. 1, eager attention):
<!-- memderive: quantity=activations.per_layer attention=eager -->
$$M_\text{layer} = sbh\left(34 + \frac{5as}{h}\right)$$

Parameters, Kaplan et al. 2020 Eq. 2.1: <!-- memderive: quantity=params.total --> $N \approx 12 n_{layer} d_{model}^2$.

With FlashAttention the same formula is still quoted:
<!-- memderive: quantity=activations.per_layer flash -->
`34sbh + 5as^2b`

```markdown
<!-- memderive: quantity=params.total -->
$this is an example in a code block, not a claim$
```
"""


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_file_mode(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    notes = tmp_path / "NOTES.md"
    notes.write_text(NOTES)
    assert main(["check", "--file", str(notes)]) == 1
    *lines, summary = [x for x in capsys.readouterr().out.splitlines() if not x.startswith(" ")]
    assert [x.split(": ", 1)[1].split(" ")[0] for x in lines] == ["exact", "leading-order", "conditional"]
    assert summary == f"{notes}: 3 claims: 2 hold, 1 does not hold"  # issue 40, item 10: a summary line per file
    assert lines[0].startswith(f"{notes}:7:") and lines[1].startswith(f"{notes}:9:")
    assert main(["check", "--file", str(notes), "--json"]) == 1
    assert [x["line"] for x in json.loads(capsys.readouterr().out)] == [7, 9, 13]


def test_file_mode_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    notes = tmp_path / "bad.md"
    notes.write_text("<!-- memderive: quantity=params.total -->\n$12 R h^2$\n\n"
                     "<!-- memderive: quantity=params.total fash -->\n$12lh^2$\n")
    assert main(["check", "--file", str(notes)]) == 2
    out = capsys.readouterr().out
    assert "bad.md:2: error: unknown symbol 'R'" in out and "bad.md:4: error: marker: 'fash' needs a value" in out
    assert main(["check", "--file", str(tmp_path / "missing.md")]) == 2
    assert main(["check"]) == 2


def test_python_power_is_not_split_like_latex() -> None:
    """16*Psi + 2**30: 2**30 = 1,073,741,824 bytes on top of 16 bytes per parameter, so not ours (16*Psi);
    the LaTeX one-character rule read 2**30 as 2**3 * 0 = 0 and called it exact."""
    result = run("--quantity", "model_states.total", "--model", "gpt2", "--claim", "16*Psi + 2**30", "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["verdict"] == "different"


@pytest.mark.slow  # seconds in process (measured; tests/conftest.py FAST_BUDGET)
def test_overhead_counts_in_totals(capsys: pytest.CaptureFixture) -> None:
    """--overhead 2GiB adds 2 * 2**30 = 2,147,483,648 bytes to ours for train.total (it used to be dropped
    silently), so the same claim differs from ours by 2**31 bytes more than without it."""
    import sympy as sp

    base = ["check", "--quantity", "train.total", "--model", "gpt2", "--batch", "1", "--seq", "1024", "--json",
            "--claim", "16*Psi"]
    runs = []
    for extra in ([], ["--overhead", "2GiB"]):
        main([*base, *extra])
        runs.append(json.loads(capsys.readouterr().out))
    ours = [sp.sympify(r["ours"]) for r in runs]
    assert sp.expand(ours[1] - ours[0]) == 2 * 2**30
    assert sp.expand(sp.sympify(runs[1]["difference"]) - sp.sympify(runs[0]["difference"])) in (2**31, -2**31)


def test_check_passes_every_option_field() -> None:
    """check reads every Options field but mode (the quantity decides it) from the command line."""
    from dataclasses import fields

    from memderive.derivations.options import Options
    from memderive.commands.cli import build_parser
    from memderive.commands.check import _options

    # --new-tokens passes when given (0 included: it pins n = 0), and only then
    args = build_parser().parse_args(["check", "--batch", "2", "--seq", "8", "--micro-batches", "2", "--new-tokens",
                                      "0", "--virtual-stages", "2", "--weight-dtype", "int8", "--kv-dtype", "fp8",
                                      "--attention", "eager", "--kv-block", "16", "--capacity-factor", "1.25",
                                      "--lora-rank", "8", "--lora-targets", "q_proj", "--base-dtype", "nf4",
                                      "--gpu", "h100-sxm", "--efficiency", "0.4", "--framework", "vllm",
                                      "--gpu-memory-utilization", "0.8", "--max-num-batched-tokens", "64",
                                      "--max-num-seqs", "4", "--intra-node-link", "pcie", "--mla-decode", "expanded",
                                          "--first-stage-layers", "2", "--last-stage-layers", "2", "--profile", "exact",
                                      "--images", "0", "--pipeline-layout", "Et|tL", "--etp", "1"])
    assert set(_options(args)) == {f.name for f in fields(Options)} - {"mode"}
