"""The README says nothing false: its two commands are the ones CI runs, every command of its question table and
its Python example run as written, and every repository path it names exists."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from memderive.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
FIRST_BLOCK = re.search(r"^```bash\n(.*?)^```$", README, re.M | re.S)
TABLE = re.search(r"^\| your question \| the command \|\n\|---\|---\|\n((?:\|.*\n)+)", README, re.M)
COMMANDS = re.findall(r"`(memderive [^`]+)`", TABLE.group(1)) if TABLE else []


def _run(command: str) -> tuple[int, str, str]:
    """``command`` run in this process, from the repository root (where its relative paths point)."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(ROOT)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(shlex.split(command)[1:])
    except SystemExit as stop:
        code = int(stop.code or 0)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow  # a whole derivation, in seconds
def test_the_two_commands_are_what_ci_runs() -> None:
    assert FIRST_BLOCK, "the README opens its commands with a ```bash block"
    first, second = FIRST_BLOCK.group(1).strip().splitlines()  # exactly two
    assert first.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e . && memderive ")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert second in ci and ci[-1] == second, ".ci/run must end with the README's second command, verbatim"
    code, out, err = _run(first.split(" && ")[-1])
    assert code == 0 and not err and "Training memory per GPU" in out


def test_the_question_table_names_commands() -> None:
    assert len(COMMANDS) >= 15 and len({c.split()[1] for c in COMMANDS}) >= 10  # most subcommands appear


@pytest.mark.slow  # the plan takes seconds
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_in_the_table_runs_as_written(command: str) -> None:
    """Exit 0, or 1 where the README says the answer is "no" (``exit 1`` in the same row); never bad input."""
    code, out, err = _run(command)
    row = next(line for line in TABLE.group(1).splitlines() if f"`{command}`" in line)
    assert code == 0 or (code == 1 and "exit 1" in row), (code, err)
    assert out.strip() and not err


def test_the_python_example_runs() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```$", README, re.M | re.S)
    assert blocks
    for block in blocks:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            exec(compile(block, "README.md", "exec"), {})  # noqa: S102 - our own README, the point of the test
        assert out.getvalue().strip()


def test_every_repository_path_it_names_exists() -> None:
    paths = set(re.findall(r"`((?:symbolic|derivations|render|tests|notebooks|benchmarks|\.ci)/[^`\s]*)`", README))
    paths |= set(re.findall(r"\]\(((?:notebooks|tests|benchmarks)/[^)\s]+)\)", README))  # Markdown links
    named = {p.rstrip("/") for p in paths} | set(re.findall(r"python (benchmarks/[\w/]+\.py)", README))
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert len(named) > 20 and not missing, missing
