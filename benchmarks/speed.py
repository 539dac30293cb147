"""Speed of the numeric path: cold estimate paired with llm-analysis in its own environment, sweep
throughput over every output, plan wall time.

    python benchmarks/speed.py [RUNS]

1. Cold ``memderive estimate --json`` (a fresh interpreter each run) on a config.json and a layout no run has
   seen (random sizes, written to a new folder each time), paired run by run with llm-analysis 0.2.2's cold
   training estimate (``python -m llm_analysis.analysis train``) on the same sizes (its own config-file format)
   and layout. llm-analysis runs in **its own virtual environment** under the cache folder
   (``$MEMDERIVE_BENCH_CACHE``, default ``~/.cache/memderive-bench``), created on the first run with
   ``pip install llm-analysis==0.2.2``: the peer and its declared dependencies only (fire, huggingface-hub,
   transformers 4.x without torch), as a user who installs it gets them, from the package index pip is
   configured with. memderive runs in this interpreter's environment. Both environments are printed (python,
   packages). Each pair alternates which side runs first; the ratio is memderive's CPU time (user + sys of
   the child) over llm-analysis's, per pair: median and range. One untimed run of each side first writes
   bytecode (pip compiled the peer's at install time; memderive's goes to ``PYTHONPYCACHEPREFIX`` in the
   cache folder, as this machine sets ``PYTHONDONTWRITEBYTECODE``), so neither side compiles source while timed.
2. ``derivations.sweep`` over 1,024,000 LLaMA-2 7B training configurations (batch 1..1000 x seq 128..131072
   step 128) with every output, FLOPs included, after one warm-up call: configurations per second (best of 5),
   and how many outputs needed more than int64.
3. Cold ``memderive plan --gpu h100-sxm`` on 1,024 GPUs (LLaMA-2 70B, GPT-3 175B, Mixtral 8x7B): wall and
   CPU time of the child, the layouts it evaluated and the rate it reports.

The machine is shared (other processes run meanwhile): figures are medians of paired runs, not best cases.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memderive.derivations.search.sweep import sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("MEMDERIVE_BENCH_CACHE", Path.home() / ".cache" / "memderive-bench"))
PEER = "llm-analysis==0.2.2"
PEER_ENV = CACHE / "llm-analysis-0.2.2"
PEER_PYTHON = PEER_ENV / "bin" / "python"
_BASE = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
OURS_ENV = {**_BASE, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(CACHE / "pycache")}
PEER_RUN_ENV = dict(_BASE)


def _child(cmd: list[str], env: dict[str, str], cwd: str | None = None) -> tuple[float, float, str]:
    """(CPU seconds of the child, wall seconds, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=cwd, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall, done.stdout


def peer_environment() -> bool:
    """Create llm-analysis's own virtual environment once (the peer and its declared dependencies)."""
    if PEER_PYTHON.exists():
        return True
    print(f"creating {PEER_ENV}: python -m venv, pip install {PEER} (once)", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEER_ENV)], check=True)
        done = subprocess.run([str(PEER_PYTHON), "-m", "pip", "install", "-q", PEER], capture_output=True, text=True)
        if done.returncode:
            raise OSError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"llm-analysis environment could not be created ({exc}); pairing skipped")
        return False
    return True


_DESCRIBE = ("import sys, platform, importlib.metadata as m; "
             "print(platform.python_implementation(), platform.python_version(), sys.executable); "
             "print(', '.join(sorted({f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions() "
             "if d.metadata['Name']})))")


def describe(python: str, env: dict[str, str], label: str) -> None:
    out = subprocess.run([python, "-c", _DESCRIBE], capture_output=True, text=True, env=env, check=True,
                         cwd=CACHE).stdout  # not the checkout: its memderive.egg-info would be listed
    interpreter, packages = out.strip().split("\n", 1)
    names = packages.split(", ")
    print(f"{label}: {interpreter}")
    print(f"  {len(names)} packages: {packages}")


def _fresh_sizes(rng: random.Random) -> dict[str, int]:
    """LLaMA-family sizes no run has seen (the MLP width a multiple of the hidden size: llm-analysis's
    config format asks for that; at most 5,120 wide and 40 layers, tp >= 2 and batch <= 2, so that
    llm-analysis finds the layout fits its 80 GB GPU, which it asserts)."""
    heads = rng.choice([16, 24, 32, 40])
    hidden = heads * rng.choice([64, 128])
    return {"heads": heads, "hidden": hidden, "kv": heads // rng.choice([1, 2, 4]), "layers": rng.randrange(8, 41),
            "ffn": hidden * rng.choice([2, 3, 4]), "vocab": rng.randrange(32000, 130000)}


def _write_configs(folder: Path, z: dict[str, int]) -> tuple[Path, Path]:
    ours = folder / "config.json"
    ours.write_text(json.dumps({
        "model_type": "llama", "hidden_size": z["hidden"], "num_attention_heads": z["heads"],
        "num_key_value_heads": z["kv"], "num_hidden_layers": z["layers"], "intermediate_size": z["ffn"],
        "vocab_size": z["vocab"], "max_position_embeddings": 8192}))
    peer = folder / "peer_model.json"
    peer.write_text(json.dumps({
        "name": f"fresh-{folder.name}", "num_layers": z["layers"], "n_head": z["heads"], "hidden_dim": z["hidden"],
        "vocab_size": z["vocab"], "max_seq_len": 8192, "num_key_value_heads": z["kv"], "ffn_embed_dim": z["ffn"],
        "model_type": "llama"}))
    return ours, peer


def _ours_cmd(config: Path, tp: int, batch: int, seq: int) -> list[str]:
    return [sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", str(config), "--mode", "train", "--batch",
            str(batch), "--seq", str(seq), "--tp", str(tp), *(["--sp"] if tp > 1 else []), "--recompute",
            "selective", "--json"]


def _peer_cmd(config: Path, tp: int, batch: int, seq: int) -> list[str]:
    return [str(PEER_PYTHON), "-m", "llm_analysis.analysis", "train", "--model_name", str(config), "--gpu_name",
            "a100-sxm-80gb", "--tp_size", str(tp), "--batch_size_per_gpu", str(batch), "--seq_len", str(seq),
            "--total_num_gpus", str(tp), "--activation_recomputation", "1"]


def _range(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f}, range {min(xs):.3f}-{max(xs):.3f}"


def cold_estimate(runs: int) -> None:
    have_peer = peer_environment()
    describe(sys.executable, OURS_ENV, "memderive environment")
    if have_peer:
        describe(str(PEER_PYTHON), PEER_RUN_ENV, "llm-analysis environment")
    rng = random.Random(time.time_ns())  # sizes never run before, in this run or an earlier one
    ours: list[tuple[float, float]] = []
    peer: list[tuple[float, float]] = []
    for i in range(runs + 1):
        with tempfile.TemporaryDirectory() as tmp:
            sizes = _fresh_sizes(rng)
            mine, theirs = _write_configs(Path(tmp), sizes)
            tp = rng.choice([t for t in (2, 4, 8) if sizes["kv"] % t == 0])
            batch, seq = rng.randrange(1, 3), rng.choice([1024, 2048, 4096])
            sides = [("ours", _ours_cmd(mine, tp, batch, seq), OURS_ENV)]
            if have_peer:
                sides.append(("peer", _peer_cmd(theirs, tp, batch, seq), PEER_RUN_ENV))
            if i % 2:
                sides.reverse()
            for name, cmd, env in sides:
                cpu, wall, _ = _child(cmd, env, cwd=tmp)
                if i:  # run 0 writes bytecode and warms the file cache on both sides
                    (ours if name == "ours" else peer).append((cpu, wall))
    print(f"cold estimate --json (new config and layout each run, {runs} runs): CPU {_range([c for c, _ in ours])} "
          f"s; wall {_range([w for _, w in ours])} s")
    if not have_peer:
        return
    print(f"llm-analysis 0.2.2 train (cold, own environment, paired): CPU {_range([c for c, _ in peer])} s; "
          f"wall {_range([w for _, w in peer])} s")
    print(f"ratio memderive / llm-analysis per pair ({runs} pairs, order alternating): CPU "
          f"{_range([a[0] / b[0] for a, b in zip(ours, peer)])}; wall {_range([a[1] / b[1] for a, b in zip(ours, peer)])}")


def sweep_throughput() -> None:
    axes = {"batch": range(1, 1001), "seq": range(128, 131073, 128)}
    count = 1000 * 1024
    out = sweep("llama-2-7b", mode="train", **axes)  # warm-up: derivation and evaluation plan
    wide = sorted(k for k, v in out.items() if v.dtype == object)
    limbs = sorted(k for k, v in out.items() if v.dtype == "int128")
    best = None
    for _ in range(5):
        start, cpu = time.perf_counter(), time.process_time()
        sweep("llama-2-7b", mode="train", **axes)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        best = (wall, cpu) if best is None or wall < best[0] else best
    wall, cpu = best
    print(f"sweep: {count:,} llama-2-7b training configurations x {len(out)} outputs (every output, FLOPs "
          f"included) in {wall:.4f} s wall ({count / wall:,.0f}/s), {cpu:.4f} s CPU ({count / max(cpu, 1e-9):,.0f}"
          f"/s), best of 5 after one warm-up; outputs past int64 in two limbs (WideArray): {len(limbs)}"
          + (f" ({', '.join(limbs)})" if limbs else "") + f"; Python-int object arrays: {len(wide)}"
          + (f" ({', '.join(wide)})" if wide else ""))


PLANS = {"llama-2-70b": ["--seq", "4096", "--global-batch", "1024"],
         "gpt3-175b": ["--seq", "2048", "--global-batch", "1536"],
         "mixtral-8x7b": ["--seq", "4096", "--global-batch", "1024"]}


def plan_time(runs: int) -> None:
    for model, extra in PLANS.items():
        times = []
        for _ in range(runs):
            cpu, wall, stdout = _child([sys.executable, "-m", "memderive.commands.cli", "plan", "--model", model, "--gpus",
                                        "1024", "--gpu", "h100-sxm", *extra, "--json"], OURS_ENV)
            times.append((cpu, wall))
        data = json.loads(stdout)
        evaluated, fit = data["layouts_evaluated"], data["layouts_fit"]
        walls = [w for _, w in times]
        print(f"cold plan --gpu h100-sxm {model} on 1,024 GPUs ({' '.join(extra)}): wall "
              f"{_range(walls)} s, CPU {_range([c for c, _ in times])} s ({runs} runs); {evaluated:,} layouts "
              f"evaluated ({fit:,} fit, each timed): {evaluated / statistics.median(walls):,.0f} layouts/s of cold wall "
              f"(median), {data['layouts_per_s']:,.0f} layouts/s inside plan (the last run)")


def main(runs: int = 5) -> None:
    cold_estimate(runs)
    sweep_throughput()
    plan_time(max(1, runs // 2))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
