"""``memderive fit``: the largest batch (given --seq) or the longest context (given --batch) that fits."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from fractions import Fraction

from memderive.arguments import add_model_options, add_options, options_from_args
from memderive.derivations.hardware import gpu
from memderive.documents.units import format_bytes, parse_size
from memderive.derivations.models.resolve import context_notes, resolve_model
from memderive.derivations.search.fit import DoesNotFit, fit, memory_budget, smallest_changes
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.runtime import budget_bytes
from memderive.documents.text import attention_line, fits_lines


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("fit", help="largest batch or longest context that fits one GPU's memory (exit code 0: "
                                        "fits, 1: does not fit even 1, with the changes that would; 2: bad input)")
    add_model_options(parser)
    parser.add_argument("--gpu-memory", help="memory of one GPU, e.g. 80GB (10^9 B) or 80GiB (default: --gpu's)")
    add_options(parser, "fit")
    parser.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    parser.set_defaults(func=run)


#: Why ``fit``'s --mode defaults to infer where ``estimate``'s is params (its only default that differs, issue 37):
MODE_DEFAULT = ("mode: infer (fit's default; estimate's, params, has no batch or context to solve for; "
                "--mode train for a training step)")


def _capacity(args: argparse.Namespace) -> int:
    """--gpu-memory, else the memory of --gpu (derivations.hardware)."""
    if args.gpu_memory is not None:
        return parse_size(args.gpu_memory, "--gpu-memory")
    if args.gpu is None:
        raise ValueError("give --gpu-memory (e.g. 80GB) or --gpu (e.g. h100-sxm; memderive gpus lists them)")
    return gpu(args.gpu).memory_bytes


def run(args: argparse.Namespace) -> int:
    mode = args.mode or "infer"  # MODE_DEFAULT: why fit's default is not estimate's params
    if mode not in ("infer", "train"):
        raise ValueError(f"fit solves --mode infer or --mode train, not {mode}")
    if args.batch is None and args.seq is None:
        raise ValueError("give --seq (to find the largest batch), --batch (to find the longest context), or both "
                         "(does that batch at that context fit?)")
    if args.batch is not None and args.seq is not None:
        return _does_it_fit(args, mode)
    solve_for = "batch" if args.batch is None else "seq"
    setattr(args, solve_for, 1)  # placeholder; fit solves for it
    capacity = _capacity(args)
    model = resolve_model(args.model)
    options = options_from_args(args, mode=mode)
    given = ("seq", args.seq) if solve_for == "batch" else ("batch", args.batch)
    try:
        result = fit(model, options, capacity, solve_for)
    except DoesNotFit as exc:
        return _does_not_fit(args, model, options, capacity, solve_for, given, exc)
    notes = context_notes(model, replace(options, **{solve_for: result.value}))
    if args.json:
        out = {"model": model.name, "mode": mode, "fits": True, given[0]: given[1], **result.to_json(),
               "max_positions": model.max_positions, "notes": notes}
        if mode == "train":
            out["fits_decided_by"], out["fits_decided_why"] = estimate(model, replace(options, **{
                solve_for: result.value})).deciding()
        print(json.dumps(out, indent=2))
        return 0
    print(f"{model.name}, {mode}, {given[0]} {given[1]}, {format_bytes(capacity)} per GPU")
    if args.mode is None:
        print(MODE_DEFAULT)
    print(attention_line(options))
    if result.budget == "vllm_bytes":
        print(f"budget: {format_bytes(result.capacity)} per GPU (vLLM's gpu_memory_utilization of the memory CUDA "
              "reports, as estimate --framework vllm; the whole GPU without --framework vllm)")
    else:
        print(f"budget: {format_bytes(result.capacity)} per GPU ({memory_budget(options, capacity)[1]}; "
              "vLLM's gpu_memory_utilization under --framework vllm only)")
    print(f"largest {solve_for}: {result.value:,} ({result.method})")
    what = {"device_bytes": " of device memory (device_bytes: the runtime included)",
            "peak_bytes": " at the step's peak (peak_bytes)", "total_bytes": " (total_bytes)",
            "vllm_bytes": " of vLLM's budget (weights, profiled activation peak, CUDA graphs, NCCL, KV blocks)"}[
        result.budget]
    print(f"  {solve_for} {result.value:,} needs {format_bytes(result.bytes_at)}{what}")
    if result.bytes_next is None and "max_num_seqs" in result.method:
        print(f"  {solve_for} {result.value + 1:,} is past vLLM's max_num_seqs")
    elif result.bytes_next is None:
        print(f"  {solve_for} {result.value + 1:,} is past the model's {model.max_positions:,} learned positions")
    else:
        print(f"  {solve_for} {result.value + 1:,} needs {format_bytes(result.bytes_next)}")
    if result.fixed is not None and result.per_unit is not None:
        per = f"{int(result.per_unit):,}" if Fraction(result.per_unit).denominator == 1 else str(result.per_unit)
        print(f"  {result.budget} = {result.fixed:,} + {per} * {solve_for} bytes")
    for line in fits_lines(estimate(model, replace(options, **{solve_for: result.value}))):
        print(f"  {line}")
    for note in notes:
        print(f"  note: {note}")
    return 0


def _does_it_fit(args: argparse.Namespace, mode: str) -> int:
    """Both --batch and --seq: whether that step fits, under the budget rule and the figure that decide it (exit 0
    fits, 1 does not), with the largest batch at that context."""
    capacity = _capacity(args)
    model = resolve_model(args.model)
    options = options_from_args(args, mode=mode)
    budget, rule = memory_budget(options, capacity)
    needed, key = budget_bytes(estimate(model, options))
    try:
        largest: int | None = fit(model, options, capacity, "batch").value
    except DoesNotFit:
        largest = 0
    fits = needed <= budget
    if args.json:
        print(json.dumps({"model": model.name, "mode": mode, "batch": options.batch, "seq": options.seq, "fits": fits,
                          "capacity_bytes": budget, key: needed, "budget": key, "largest_batch": largest}, indent=2))
        return 0 if fits else 1
    print(f"{model.name}, {mode}, batch {options.batch} at seq {options.seq}, {format_bytes(capacity)} per GPU")
    if args.mode is None:
        print(MODE_DEFAULT)
    print(attention_line(options))
    print(f"budget: {format_bytes(budget)} per GPU ({rule})")
    print(f"{'fits' if fits else 'does not fit'}: batch {options.batch:,} needs {format_bytes(needed)} ({key})")
    print(f"  largest batch at seq {options.seq:,}: {largest:,}")
    for line in fits_lines(estimate(model, replace(options))):
        print(f"  {line}")
    return 0 if fits else 1


def _does_not_fit(args: argparse.Namespace, model, options, capacity: int, solve_for: str,  # type: ignore[no-untyped-def]
                  given: tuple[str, int], exc: Exception) -> int:
    """Not even 1 fits: say so (an answer: exit 1) and the smallest changes that would fit."""
    needed = getattr(exc, "needed", None)
    changes = smallest_changes(model, options, capacity, solve_for)
    budget = budget_bytes(estimate(model, options))[1]  # device_bytes with a GPU named, else the deciding figure
    if args.json:
        print(json.dumps({"model": model.name, "mode": options.mode, "fits": False, given[0]: given[1],
                          solve_for: 0, "capacity_bytes": capacity, "needed_bytes": needed,
                          "would_fit": [{"change": c, budget: n} for c, n in changes]}, indent=2))
        return 1
    print(f"{model.name}, {options.mode}, {given[0]} {given[1]}, {format_bytes(capacity)} per GPU")
    print(f"does not fit: {solve_for} 1 needs {format_bytes(needed) if needed is not None else 'more'}")
    if changes:
        print("would fit with:")
        width = max(len(change) for change, _ in changes)
        for change, total in changes:
            print(f"  {change:<{width}}  {format_bytes(total)}")
    else:
        print("no single change tried (tensor parallelism, ZeRO-3, recompute, 8-bit optimizer, lower-precision "
              "weights or KV cache, a shorter context) fits; combine them or use more GPUs")
    return 1
