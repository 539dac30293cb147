"""The cold path of a number: ``memderive estimate --json`` in a fresh interpreter imports none of SymPy,
NumPy or matplotlib (sys.modules read at exit), reads no installed metadata for the version, and builds only
the command it runs; nor does ``--summary`` (numbers only). (The text writeup still simplifies its formulas with
SymPy.) ``python benchmarks/speed.py`` times it against llm-analysis."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs the CLI's main as ``python -m memderive.commands.cli ...`` does, then prints the top-level modules loaded.
_PROBE = """
import json, sys
from memderive.commands.cli import main
sys.argv = ["memderive", *{args!r}]
code = main()
sys.stdout.flush()
loaded = sorted({{name.split(".")[0] for name in sys.modules}} | {{name for name in sys.modules if name.startswith(("importlib.metadata", "memderive."))}})
print("\\nMODULES " + json.dumps(loaded), file=sys.stderr)
raise SystemExit(code)
"""


def _loaded(*args: str, model: str = "llama-2-7b") -> tuple[str, set[str]]:
    done = subprocess.run([sys.executable, "-c", _PROBE.format(args=["estimate", "--model", model, *args])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return done.stdout, set(json.loads(line.removeprefix("MODULES ")))


def test_cold_estimate_imports_no_sympy_numpy_matplotlib(tmp_path: Path) -> None:
    # a dense config.json and a MoE preset, training with a layout and inference: the number's path only
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16,
                                  "num_key_value_heads": 4, "num_hidden_layers": 6, "intermediate_size": 2816,
                                  "vocab_size": 32000, "max_position_embeddings": 4096}))
    runs = [_loaded("--mode", "train", "--batch", "2", "--seq", "1024", "--tp", "2", "--sp", "--recompute",
                    "selective", "--json", model=str(config)),
            _loaded("--mode", "infer", "--batch", "1", "--seq", "512", "--new-tokens", "64", "--json",
                    model="mixtral-8x7b")]
    for stdout, loaded in runs:
        assert stdout.strip(), "the estimate printed nothing"
        assert not loaded & {"sympy", "numpy", "matplotlib", "mpmath", "torch", "transformers"}, loaded
        assert "importlib.metadata" not in loaded
        # only the command that runs is imported and built
        assert {m for m in loaded if m.startswith("memderive.commands.")} == {"memderive.commands.cli",
                                                                              "memderive.commands.estimate"}


#: Modules a plain estimate (no --gpu, Megatron's kernels, no fine-tuning table asked for) does not import: the
#: time model, the runtime and vLLM's start-up (each empty without --gpu), transformers' code and torchao's Float8.
_ON_ASK = {"memderive.derivations.quantities.timing", "memderive.derivations.quantities.runtime",
           "memderive.derivations.quantities.serving", "memderive.derivations.quantities.efficiency",
           "memderive.symbolic.huggingface", "memderive.symbolic.hf_code", "memderive.symbolic.hf_experts",
           "memderive.symbolic.hf_attention", "memderive.symbolic.hf_programs", "memderive.symbolic.float8",
           "memderive.symbolic.lora", "memderive.derivations.quantities.peft_modules",
           "memderive.symbolic.op_checkpoint"}


def test_plain_estimate_imports_only_its_path(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 16,
                                  "num_key_value_heads": 4, "num_hidden_layers": 6, "intermediate_size": 2816,
                                  "vocab_size": 32000, "max_position_embeddings": 4096}))
    for args, model in [(("--mode", "train", "--batch", "1", "--seq", "4096", "--tp", "2", "--sp", "--recompute",
                          "selective", "--json"), str(config)),
                        (("--mode", "infer", "--batch", "1", "--seq", "512", "--json"), "mixtral-8x7b")]:
        stdout, loaded = _loaded(*args, model=model)
        assert json.loads(stdout)["model"]
        assert not loaded & _ON_ASK, sorted(loaded & _ON_ASK)
        assert "difflib" not in loaded  # references' did-you-mean hint, on an unknown key only
    # the probe sees them where they are needed: a --gpu imports the time model and the runtime; --implementation
    # hf with --fp8 imports transformers' code and torchao's Float8
    _, loaded = _loaded("--mode", "train", "--batch", "1", "--seq", "4096", "--gpu", "h100-sxm", "--json")
    assert {"memderive.derivations.quantities.timing", "memderive.derivations.quantities.runtime"} <= loaded
    _, loaded = _loaded("--mode", "train", "--batch", "1", "--seq", "4096", "--implementation", "hf-eager", "--fp8",
                        "rowwise", "--json")
    assert {"memderive.symbolic.huggingface", "memderive.symbolic.hf_code", "memderive.symbolic.float8"} <= loaded
    # LoRA imports PEFT's module table and the adapters; --recompute selective-op its checkpoint transform
    _, loaded = _loaded("--mode", "train", "--batch", "1", "--seq", "1024", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj", "--recompute",
                        "selective-op", "--json")
    assert {"memderive.symbolic.lora", "memderive.derivations.quantities.peft_modules",
            "memderive.symbolic.op_checkpoint"} <= loaded


def test_summary_imports_no_sympy_numpy_matplotlib() -> None:
    # --summary prints numbers only (the breakdown, times, the runtime on a --gpu, vLLM's blocks): no formula, so
    # none of SymPy, NumPy or matplotlib; the full text writeup (no --summary) simplifies its formulas with SymPy
    runs = [_loaded("--mode", "train", "--batch", "1", "--seq", "4096", "--tp", "8", "--sp", "--recompute",
                    "selective", "--dp", "16", "--zero", "1", "--micro-batches", "16", "--gpu", "h100-sxm",
                    "--summary"),
            _loaded("--mode", "infer", "--batch", "1", "--seq", "4096", "--framework", "vllm", "--gpu", "h100-sxm",
                    "--summary", model="llama-3-8b")]
    for stdout, loaded in runs:
        assert "summary:" in stdout, stdout[:500]
        assert not loaded & {"sympy", "numpy", "matplotlib", "mpmath", "torch", "transformers"}, loaded


#: Imports the claim checker (every module of derivations/claims), then registers every command as ``memderive
#: --help`` does (which imports the checker through commands/check.py's top); prints whether SymPy was loaded after
#: each, then after reading one of the checker's tables (which builds SymPy symbols: the probe sees an import).
_CHECKER_PROBE = """
import importlib, pkgutil, sys
import memderive.derivations.claims as claims
for info in pkgutil.iter_modules(claims.__path__):
    importlib.import_module("memderive.derivations.claims." + info.name)
print("claims", "sympy" in sys.modules)
from memderive.commands.cli import main
sys.argv = ["memderive", "--help"]
try:
    main()
except SystemExit:
    pass
print("help", "sympy" in sys.modules, "memderive.commands.check" in sys.modules)
from memderive.derivations.claims.analysis import WIDTH
print("table", "sympy" in sys.modules, len(WIDTH))
"""


def test_importing_the_checker_imports_no_sympy() -> None:
    # issue 36 item 1: the checker's symbol tables (claims/: WIDTH, OURS, PUBLISHED, ...) are built on first read,
    # so importing it, and ``memderive --help`` (which imports commands/check.py and so the checker), load no SymPy
    done = subprocess.run([sys.executable, "-c", _CHECKER_PROBE], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [x for x in done.stdout.splitlines() if x.startswith(("claims ", "help ", "table "))]
    # WIDTH: h, a, a_kv, f, l, l_w, f_e, f_s, l_d (analysis.py: the sizes that grow with the model)
    assert lines == ["claims False", "help False True", "table True 9"], done.stdout[-2000:]


def test_probe_sees_an_import() -> None:
    # the probe itself: a run that does import NumPy (sweep evaluates over NumPy arrays) is seen doing so
    done = subprocess.run([sys.executable, "-c", _PROBE.format(args=["sweep", "--model", "gpt2", "--mode", "train", "--batch", "1:3",
                                                                     "--seq", "128"])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    assert "numpy" in json.loads(line.removeprefix("MODULES "))


def test_version_is_pyproject_version() -> None:
    from memderive.version import __version__

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == declared
    done = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "--version"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.stdout.strip() == f"memderive {declared}"
