"""``memderive estimate`` run in the test's own process (``memderive.commands.cli.main``): the same parser, command and
exit codes as ``python -m memderive``, without a fresh interpreter importing torch and transformers for each call (the
traced path's CLI tests spent most of their time there)."""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

from memderive.commands import cli

ROOT = Path(__file__).resolve().parents[1]


def estimate_cli(*args: str) -> subprocess.CompletedProcess:
    """``memderive estimate *args`` from the repository root: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(["estimate", *args])
        except SystemExit as exc:  # argparse's refusals exit 2
            code = exc.code if isinstance(exc.code, int) else 1
    return subprocess.CompletedProcess(["memderive", "estimate", *args], code, out.getvalue(), err.getvalue())
