"""``memderive fit``: the largest batch (given --seq) or the longest context (given --batch) that fits."""

from __future__ import annotations

import argparse
import json

from render.cli import add_model_options, add_strategy_options, options_from_args


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("fit", help="largest batch or longest context that fits one GPU's memory")
    add_model_options(parser)
    parser.add_argument("--gpu-memory", required=True, help="memory of one GPU, e.g. 80GB (10^9 B) or 80GiB")
    add_strategy_options(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # NOTE(fit): errors are ValueError, not render.cli.fail: under ``python -m render.cli`` the
    # CliError that fail() raises is not the class main() catches (__main__ vs render.cli).
    from derivations.estimate import resolve_model
    from derivations.search.fit import fit
    from render.units import format_bytes, parse_size

    mode = args.mode or "infer"
    if mode not in ("infer", "train"):
        raise ValueError(f"fit solves --mode infer or --mode train, not {mode}")
    if (args.batch is None) == (args.seq is None):
        raise ValueError("give exactly one of --seq (to find the largest batch) or --batch (to find the longest context)")
    solve_for = "batch" if args.batch is None else "seq"
    setattr(args, solve_for, 1)  # placeholder; fit solves for it
    capacity = parse_size(args.gpu_memory)
    model = resolve_model(args.model)
    result = fit(model, options_from_args(args, mode=mode), capacity, solve_for)
    given = ("seq", args.seq) if solve_for == "batch" else ("batch", args.batch)
    if args.json:
        out = {"model": model.name, "mode": mode, given[0]: given[1], **result.to_json(),
               "max_positions": model.max_positions}
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name}, {mode}, {given[0]} {given[1]}, {format_bytes(capacity)} per GPU")
    print(f"largest {solve_for}: {result.value:,} ({result.method})")
    print(f"  {solve_for} {result.value:,} needs {format_bytes(result.bytes_at)}")
    if result.bytes_next is None:
        print(f"  {solve_for} {result.value + 1:,} is past the model's {model.max_positions:,} learned positions")
    else:
        print(f"  {solve_for} {result.value + 1:,} needs {format_bytes(result.bytes_next)}")
    if result.fixed is not None:
        per = f"{int(result.per_unit):,}" if result.per_unit.q == 1 else str(result.per_unit)
        print(f"  total = {result.fixed:,} + {per} * {solve_for} bytes")
    if solve_for == "seq" and model.max_positions is not None and result.value > model.max_positions:
        print(f"  note: the model was trained for {model.max_positions:,} positions")
    return 0
