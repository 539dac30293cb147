"""Speed of the numeric path: cold estimate paired with llm-analysis, sweep throughput, plan time.

    python benchmarks/speed.py [RUNS]

1. Cold ``memderive estimate --json`` (a fresh interpreter each run) on a config.json and a layout it has
   never run (random sizes, written to a new folder each time), paired run by run with llm-analysis 0.2.2's
   cold training estimate (``python -m llm_analysis.analysis train``, LLaMA-2 7B, the same layout); CPU time
   of the child (user + sys) and wall time, medians, and the ratio. llm-analysis is not a dependency:
   ``pip install --no-deps llm-analysis==0.2.2 fire==0.5.0 six termcolor``; without it the pairing is skipped.
2. ``derivations.sweep`` over 1,024,000 LLaMA-2 7B training configurations (batch 1..1000 x seq
   128..131072 step 128), after one warm-up call: configurations per second.
3. Cold ``memderive plan`` for LLaMA-2 70B on 1,024 GPUs of 80 GB.
"""

from __future__ import annotations

import importlib.util
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

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _child(cmd: list[str], cwd: str | None = None) -> tuple[float, float]:
    """(CPU seconds of the child, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, env=ENV, cwd=cwd, text=True)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def _fresh_config(folder: Path, rng: random.Random) -> Path:
    """A LLaMA-family config.json with sizes no run has seen."""
    heads = rng.choice([16, 32, 40, 64])
    head_dim = rng.choice([64, 128])
    config = {"model_type": "llama", "hidden_size": heads * head_dim, "num_attention_heads": heads,
              "num_key_value_heads": heads // rng.choice([1, 2]), "num_hidden_layers": rng.randrange(8, 81),
              "intermediate_size": 256 * rng.randrange(25, 125), "vocab_size": rng.randrange(32000, 130000),
              "max_position_embeddings": 8192}
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def cold_estimate(runs: int) -> None:
    rng = random.Random(10)
    have_peer = importlib.util.find_spec("llm_analysis") is not None
    ours, peer = [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            config = _fresh_config(Path(tmp), rng)
            tp = rng.choice([1, 2, 4, 8])
            seq = rng.choice([1024, 2048, 4096])  # llm-analysis: at most the model's 4,096
            ours.append(_child([sys.executable, "-m", "memderive.cli", "estimate", "--model", str(config), "--mode",
                                "train", "--batch", str(rng.randrange(1, 9)), "--seq", str(seq), "--tp", str(tp),
                                *(["--sp"] if tp > 1 else []), "--recompute", "selective", "--json"]))
            if have_peer:
                peer.append(_child([sys.executable, "-m", "llm_analysis.analysis", "train", "--model_name",
                                    "NousResearch_Llama-2-7b-hf", "--gpu_name", "a100-sxm-80gb", "--tp_size",
                                    str(tp), "--batch_size_per_gpu", "1", "--seq_len", str(seq), "--total_num_gpus",
                                    str(tp), "--activation_recomputation", "1"], cwd=tmp))
    cpu, wall = statistics.median(x for x, _ in ours), statistics.median(x for _, x in ours)
    print(f"cold estimate --json (new config and layout each run, {runs} runs): median {cpu:.3f} s CPU, "
          f"{wall:.3f} s wall")
    if not have_peer:
        print("llm-analysis 0.2.2: not installed; pairing skipped")
        return
    pcpu, pwall = statistics.median(x for x, _ in peer), statistics.median(x for _, x in peer)
    print(f"llm-analysis 0.2.2 train (cold, paired): median {pcpu:.3f} s CPU, {pwall:.3f} s wall")
    ratios = [a[0] / b[0] for a, b in zip(ours, peer)]
    print(f"ratio memderive / llm-analysis: {cpu / pcpu:.3f} (CPU medians), {wall / pwall:.3f} (wall medians), "
          f"per-pair CPU ratio median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}")


def sweep_throughput() -> None:
    sys.path.insert(0, str(ROOT))
    from memderive.derivations.search.sweep import sweep

    axes = {"batch": range(1, 1001), "seq": range(128, 131073, 128)}
    count = 1000 * 1024
    sweep("llama-2-7b", mode="train", **axes)  # warm-up: derivation and evaluation plan
    best = None
    for _ in range(5):
        start, cpu = time.perf_counter(), time.process_time()
        sweep("llama-2-7b", mode="train", **axes)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        best = (wall, cpu) if best is None or wall < best[0] else best
    wall, cpu = best
    print(f"sweep: {count:,} llama-2-7b training configurations in {wall:.4f} s wall ({count / wall:,.0f}/s), "
          f"{cpu:.4f} s CPU ({count / max(cpu, 1e-9):,.0f}/s), best of 5 after one warm-up")


def plan_time(runs: int) -> None:
    times = [_child([sys.executable, "-m", "memderive.cli", "plan", "--model", "llama-2-70b", "--gpus", "1024",
                     "--gpu-memory", "80GB", "--seq", "4096", "--global-batch", "1024", "--json"])
             for _ in range(runs)]
    print(f"cold plan llama-2-70b on 1,024 GPUs of 80 GB: median {statistics.median(x for x, _ in times):.3f} s CPU, "
          f"{statistics.median(x for _, x in times):.3f} s wall ({runs} runs)")


def main(runs: int = 5) -> None:
    cold_estimate(runs)
    sweep_throughput()
    plan_time(runs)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
