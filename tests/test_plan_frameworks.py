"""``plan --framework X`` (issue 37, item 5): every row's printed re-run line gives the row's bytes and step time,
under every training framework's preset (a row's options name each value that differs from what the preset would
fill in, not from memderive's own defaults), and torchtune and the HF Trainer (whose models run no ring attention)
plan without an error about a --cp never given."""

from __future__ import annotations

import json
import shlex

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import FRAMEWORKS
from memderive.derivations.quantities.timing import time_of

TRAINING = sorted(name for name, f in FRAMEWORKS.items() if f.mode == "train")
#: The issue's command (torchtitan: row 68.4 GB / 2.08 s, its re-run line 55.1 GB / 2.33 s before the fix).
PLAN = ["plan", "--model", "llama-3-8b", "--gpus", "8", "--gpu", "h100-sxm", "--seq", "4096", "--global-batch", "32"]


def _run(capsys, words: list[str]) -> tuple[int, str, str]:
    code = main(words)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("framework", TRAINING)
def test_plan_rows_rerun_as_printed(capsys, framework: str) -> None:
    """The top rows of the JSON and the text's re-run line: ``estimate`` run on the printed words reports the
    row's total_bytes and step_time_s exactly."""
    code, out, err = _run(capsys, [*PLAN, "--top", "3", "--framework", framework, "--json"])
    assert code == 0, err
    rows = json.loads(out)["layouts"]
    assert rows
    for row in rows:  # the JSON's options, through the API
        est = estimate("llama-3-8b", **row["options"])
        assert (est.number("total_bytes"), time_of(est).step_s) == (row["total_bytes"], row["step_time_s"])
    code, text, err = _run(capsys, [*PLAN, "--top", "1", "--framework", framework])
    assert code == 0, err
    line = next(x for x in text.splitlines() if x.startswith("re-run a row: "))
    words = shlex.split(line.removeprefix("re-run a row: "))[1:]
    assert words[0] == "estimate" and "--framework" in words
    code, out, err = _run(capsys, [*words, "--json"])
    assert code == 0, err
    got = json.loads(out)
    assert (got["total_bytes"], got["step_time_s"]) == (rows[0]["total_bytes"], rows[0]["step_time_s"])


def test_serving_plan_rows_rerun_under_vllm(capsys) -> None:
    """The serving plan under vLLM's preset: each row's options re-run through ``estimate`` to its bytes."""
    code, out, err = _run(capsys, ["plan", "--mode", "infer", "--model", "llama-3-8b", "--gpus", "8", "--gpu",
                                   "h100-sxm", "--seq", "4096", "--top", "2", "--framework", "vllm", "--json"])
    assert code == 0, err
    for row in json.loads(out)["layouts"]:
        assert estimate("llama-3-8b", **row["options"]).number("total_bytes") == row["total_bytes"]
