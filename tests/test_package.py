"""The installed package answers to its name and puts no generic top-level names in site-packages."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _outside(code: str) -> subprocess.CompletedProcess:
    """``python -c code`` from a folder outside the checkout, so only what is installed can be imported."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", timeout=120)


def test_import_memderive_gives_the_api() -> None:
    run = _outside("import memderive; r = memderive.estimate('llama-2-7b'); "
                   "print(r.number('parameters'), sorted(memderive.__all__))")
    assert run.returncode == 0, run.stderr
    # LLaMA-2 7B: 6,738,415,616 parameters (Touvron et al. 2023; transformers' meta count, tests/test_params_*).
    assert run.stdout.split()[0] == "6738415616"
    for name in ("estimate", "check", "sweep", "plan", "Result", "Estimate"):
        assert f"'{name}'" in run.stdout


def test_generic_names_are_not_installed() -> None:
    for name in ("render", "symbolic", "derivations"):
        run = _outside(f"import {name}")
        assert run.returncode != 0 and "ModuleNotFoundError" in run.stderr, name


def test_every_installed_package_is_under_memderive() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "memderive" or p.startswith("memderive.") for p in config["packages"])
    # every folder with an __init__.py is installed (a new wing cannot be forgotten)
    folders = {str(p.parent.relative_to(ROOT)) for top in ("render", "symbolic", "derivations")
               for p in (ROOT / top).glob("**/__init__.py")}  # not */**: that walked .venv too (4 s)
    mapped = {"memderive": "render", "memderive.symbolic": "symbolic", "memderive.derivations": "derivations"}

    def folder(package: str) -> str:
        head = max((k for k in mapped if package == k or package.startswith(k + ".")), key=len)
        return "/".join([mapped[head], *package[len(head) + 1:].split(".")]).rstrip("/")

    assert {folder(p) for p in config["packages"]} == folders
