"""A traced estimate timed with its decoder stack folded (``traced_fold``: a few layers run) and whole.

    PYTHONPATH=. python benchmarks/traced_fold.py                       # DeepSeek-V3.2, inference, b 1, s 4096
    PYTHONPATH=. python benchmarks/traced_fold.py --whole               # and the whole stack, for comparison (slow)
    PYTHONPATH=. python benchmarks/traced_fold.py --config PATH --mode train --seq 2048
    PYTHONPATH=. python benchmarks/traced_fold.py --config tests/fixtures/qwen3-next-80b-a3b/config.json

The default config is DeepSeek-V3.2's config.json (``tests/fixtures/deepseek-v3.2``, as ai-dynamo/aiconfigurator
095f58a keeps it: 61 layers, 3 dense then 58 MoE of 256 experts). Qwen3-Next-80B-A3B's (``tests/fixtures/
qwen3-next-80b-a3b``, aiconfigurator 1b7cfb1's Qwen--Qwen3-Next-80B-A3B-Thinking_config.json: 48 layers, 3 gated
DeltaNet then one full attention, 512 experts) times a model whose code loops over the sequence's chunks. Prints
the folds' runs, the seconds of each route and whether the two estimates are equal (their JSON, the formulas
included).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memderive.derivations.options import Options  # noqa: E402
from memderive.derivations.quantities import traced, traced_fold  # noqa: E402
from memderive.derivations.quantities import traced_symbolic as ts  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "deepseek-v3.2" / "config.json"


def timed(config: dict, options: Options) -> tuple[float, dict]:
    start = time.perf_counter()
    est = traced.traced_estimate(config, "config", options, formula=ts.formula)
    return time.perf_counter() - start, est.to_json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT)
    parser.add_argument("--mode", default="infer", choices=("infer", "train"))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--whole", action="store_true", help="time the whole stack too (minutes on a deep model)")
    args = parser.parse_args()
    config = json.loads(args.config.read_text())
    options = Options(mode=args.mode, batch=args.batch, seq=args.seq)
    model, _ = traced.build(traced.hf_config(config, "config"), "eager")
    plan = traced_fold.fold(model)
    print(f"{args.config}: {args.mode}, b {args.batch}, s {args.seq}")
    print(f"fold: {'none (the whole stack runs)' if plan is None else plan.runs}"
          + ("" if plan is None else f", {plan.layers_run} layers run of {len(plan.parent._modules[plan.attr])}"))
    folded_s, folded = timed(config, options)
    print(f"folded: {folded_s:.1f} s")
    if args.whole:
        fold = traced_fold.fold
        traced_fold.fold = lambda model: None  # every symbolic run and fit over the whole stack, as before the fold
        try:
            whole_s, whole = timed(config, options)
        finally:
            traced_fold.fold = fold
        print(f"whole stack: {whole_s:.1f} s; the estimates {'equal' if whole == folded else 'DIFFER'}")


if __name__ == "__main__":
    main()
