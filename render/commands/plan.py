"""``memderive plan``: training layouts that fit, fastest first (``derivations.search.plan``).

``--gpus N`` plans N GPUs; without it, the answer is how many GPUs are needed (the fewest with a layout
that fits). ``--gpu NAME`` (``memderive gpus``) sets the memory budget (unless ``--gpu-memory`` is
given) and ranks by the compute model's step time (``derivations.quantities.timing``); without it, a
stated FLOPs proxy ranks. ``--json`` rows carry ``estimate``'s option names: each re-runs through
``estimate`` to the same bytes (and, with ``--gpu``, the same ``step_time_s``).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from memderive.arguments import add_model_options, add_options, add_output_options, emit, fail, option_argv, options_from_args, whole_number
from memderive.derivations.hardware import gpu
from memderive.documents.units import format_bytes, parse_size
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.timing import ZERO3_CHECKED_RANKS, time_of, zero3_caution
from memderive.derivations.search.plan import LAYOUT_REFUSED, NothingFits, plan, plan_infer
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import OptionsError, peak_flops_option
from memderive.derivations.search.fit import memory_budget

PROXY = ("no --gpu: step time is a proxy: hardware FLOPs per GPU (6N per token + "
         "attention, recompute added) at peak, times the pipeline bubble 1 + (p-1)/(m v); communication not "
         "modelled, so times are lower bounds and MFU an upper bound; --gpu NAME times the step with the compute "
         "model")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plan", help="training layouts (tp, pp, dp, ZeRO, recompute, micro-batches) that fit")
    add_model_options(parser)
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument("--gpus", type=whole_number, help="GPU count (default: the fewest that fit)")
    parser.add_argument("--gpu-memory", help="memory of one GPU, e.g. 80GB (10^9 B) or 80GiB (default: --gpu's)")
    parser.add_argument("--peak-tflops", type=float, help="without --gpu: one GPU's dense peak in TFLOP/s, for the "
                        "proxy's step times")
    parser.add_argument("--global-batch", type=whole_number, help="sequences per optimizer step (training)")
    parser.add_argument("--no-flash", action="store_true", help="plan without FlashAttention")
    add_options(parser, "plan", required=("seq",))
    parser.add_argument("--top", type=whole_number, default=5, help="how many layouts to show (default 5)")
    parser.add_argument("--json", action="store_true", help='{"layouts": [{"options": ..., "total_bytes": ...}]}')
    add_output_options(parser)
    parser.set_defaults(func=run)


def _capacity(args: argparse.Namespace) -> tuple[int, float | None]:
    """Bytes of one GPU (--gpu-memory, else --gpu's) and the proxy's peak FLOP/s (--peak-tflops)."""
    if args.gpu is not None and args.peak_tflops is not None:
        fail("--peak-tflops is for the proxy without --gpu; --gpu already gives the peak (use --efficiency to "
             "scale it)")
    if args.gpu is None and args.efficiency is not None:
        fail("--efficiency scales --gpu's peak; give --gpu NAME (memderive gpus lists them)")
    try:
        peak_flops_option(args.peak_tflops, "--peak-tflops", "TFLOP/s")
    except OptionsError as exc:
        fail(str(exc))
    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if args.gpu_memory:
        return parse_size(args.gpu_memory), peak
    if args.gpu is None:
        fail("give --gpu NAME (e.g. h100-sxm; memderive gpus lists them) or --gpu-memory SIZE (e.g. 80GB)")
    return gpu(args.gpu).memory_bytes, peak


#: A parenthetical that is a source (a repository, a paper, a table): plan's NOTE lines leave it out (issue 37, item 17).
_SOURCE = re.compile(r"github\.com|arXiv|et al\.|https?:|\.md\b|\.py\b|Table \d|App\. |§|#\d")
NOTE_WIDTH = 160  # a NOTE line's longest length: one line of a wide terminal


def short_note(text: str, width: int = NOTE_WIDTH) -> str:
    """``text`` as one short line: its parentheticals that cite a source left out, then cut at a clause boundary
    (``; ``, else ``, ``) to at most ``width`` characters, ``...`` marking the cut (the full line: ``--json``'s
    step_time_model, or the re-run line's estimate)."""
    out, depth, group = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        if depth:
            group.append(char)
        else:
            out.append(char)
        if char == ")" and depth:
            depth -= 1
            if not depth:
                inner = "".join(group)
                if not _SOURCE.search(inner):
                    out.append(inner)
                group = []
    line = re.sub(r"\s+([,;:)])", r"\1", re.sub(r" {2,}", " ", "".join(out) + "".join(group))).strip()
    if len(line) <= width:
        return line
    level, cut, space = 0, 0, (0, 0)  # the last clause boundary outside parentheses; the last space, and its depth
    for i, char in enumerate(line[:width - 5]):
        level += (char == "(") - (char == ")")
        if level == 0 and line.startswith(("; ", ", "), i):
            cut = i
        if char == " ":
            space = (i, level)
    if cut < width // 2:  # no boundary late enough: the last space, its open parentheses closed
        return line[:space[0]].rstrip(",;:") + " ..." + ")" * space[1]
    return line[:cut] + " ..."


def _notes(model: list[str]) -> list[str]:
    """The time model's lines as short NOTE lines (a caution, the proxy's or ZeRO-3's, whole), and where the full
    lines are when one was shortened."""
    notes = [x if x == PROXY or x.startswith("ZeRO-3 over") else short_note(x) for x in model]
    more = ["in full, with sources: --json (step_time_model) or the re-run line with --summary"] if notes != model else []
    return [f"NOTE: {x}" for x in notes + more]


def _time_model(model: str, layout: Any) -> list[str]:
    """How the times were modelled: the compute model's own lines, for the top row's estimate."""
    timing = time_of(estimate(model, **layout.options))
    return list(timing.model()) if timing is not None else []


def run(args: argparse.Namespace) -> int:
    if args.mode == "infer":
        return _infer(args)
    if args.global_batch is None:
        fail("plan --mode train needs --global-batch (sequences per optimizer step)")
    for name in ("gpus", "seq", "global_batch", "top"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            fail(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    if args.pipeline_layout is not None:
        fail(LAYOUT_REFUSED)
    capacity, peak = _capacity(args)
    # plan picks dp (a multiple of ep); a given cp is every row's, on FlashAttention (plan's kernel; without it
    # plan refuses the cp)
    # --recompute-modules: the base options run selective recompute (each row sets its own; plan.py)
    base = options_from_args(args, "train", batch=1, dp=args.ep, **({"flash": True} if args.cp > 1 else {}),
                             **({"recompute": "selective"} if args.recompute_modules else {}))
    try:
        layouts = plan(args.model, capacity, args.global_batch, args.seq, args.gpus, options=base, peak_flops=peak,
                       flash=not args.no_flash, top=args.top)
    except NothingFits as exc:
        return _nothing_fits(args, capacity, exc)
    model = _time_model(args.model, layouts[0]) if args.gpu else [PROXY]
    if args.json:
        text = json.dumps({"model": args.model, "capacity_bytes": capacity, "gpu": args.gpu,
                           "step_time_model": model, "layouts": [x.to_json() for x in layouts],
                           **_limits_json(layouts), **_evaluated_json(layouts)}, indent=2)
    else:
        text = _table(args, capacity, layouts, model)
    emit(text, args.output, args.force)
    return 0


def _limits_json(layouts: Any) -> dict[str, Any]:
    """What the framework does not run, each limit with its source (none without --framework)."""
    limits = layouts.space.limits
    return {"framework_limits": [{"limit": x.words, "source": x.source} for x in limits]} if limits else {}


def _limits_line(args: argparse.Namespace, layouts: Any) -> list[str]:
    """One NOTE line: what ``--framework`` kept out of the search (its sources: --json's framework_limits)."""
    words = layouts.space.words()
    return [f"NOTE: --framework {args.framework} plans what it runs: {words} (sources: --json framework_limits)"] \
        if words else []


def _evaluated_json(layouts: Any) -> dict[str, Any]:
    """How many layouts the plan evaluated (memory of every candidate), how many fit (each timed), its seconds
    and the rate (layouts evaluated per second; wall time of ``plan``, so it differs run to run)."""
    return {"layouts_evaluated": layouts.evaluated, "layouts_fit": layouts.fit, "plan_seconds": layouts.seconds,
            "layouts_per_s": layouts.rate}


def _evaluated_line(layouts: Any) -> str:
    return (f"evaluated {layouts.evaluated:,} layouts ({layouts.fit:,} fit, each timed) in {layouts.seconds:.2f} s: "
            f"{layouts.rate:,.0f} layouts/s")


def _nothing_fits(args: argparse.Namespace, capacity: int, exc: Any) -> int:
    """No layout fits: an answer (exit 1, as ``fit``), with what would fit."""
    if args.json:
        print(json.dumps({"model": args.model, "fits": False, "capacity_bytes": capacity, "needed_bytes": exc.needed,
                          "would_fit": [{"change": c, "total_bytes": n} for c, n in exc.would_fit]}, indent=2))
        return 1
    print(f"does not fit: {exc}")
    if exc.would_fit:
        print("would fit with:")
        width = max(len(change) for change, _ in exc.would_fit)
        for change, total in exc.would_fit:
            print(f"  {change:<{width}}  {format_bytes(total)}")
    else:
        print("no single change tried fits; use GPUs with more memory")
    return 1


INFER_PROXY = ("ranked by decode throughput under a memory-bound proxy: tokens/s ~ batch x replicas / (weights + "
               "KV cache per GPU), what one decode step reads; no bandwidth assumed, so no seconds")


def _infer(args: argparse.Namespace) -> int:
    for name in ("gpus", "seq", "top"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            fail(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    capacity, _ = _capacity(args)
    # --weight-dtype and --kv-dtype take comma lists here: each pair is compared
    weights, kv = _dtype_list(args.weight_dtype), _dtype_list(args.kv_dtype)
    base = options_from_args(args, "infer", batch=1, weight_dtype=weights[0], kv_dtype=kv[0])
    try:
        layouts = plan_infer(args.model, capacity, args.seq, args.gpus, new_tokens=base.new_tokens, options=base,
                             top=args.top, weight_dtypes=weights, kv_dtypes=kv)
    except NothingFits as exc:
        return _nothing_fits(args, capacity, exc)
    model = list(layouts[0].timing.model()) if layouts[0].timing is not None else [INFER_PROXY]
    if args.json:
        text = json.dumps({"model": args.model, "capacity_bytes": capacity, "gpu": args.gpu,
                           "throughput_model": model, "layouts": [x.to_json() for x in layouts]}, indent=2)
    else:
        text = _infer_table(args, capacity, layouts, model)
    emit(text, args.output)
    return 0


def _dtype_list(value: str | None) -> tuple[str | None, ...]:
    """``bf16,fp8`` -> ('bf16', 'fp8'); unset -> (None,) (the default dtype)."""
    if value is None:
        return (None,)
    items = tuple(dict.fromkeys(x.strip() for x in value.split(",")))
    if not all(items):
        fail(f"a dtype list is comma-separated names (e.g. bf16,fp8), got {value!r}")
    return items


def _infer_table(args: argparse.Namespace, capacity: int, layouts: list, model: list[str]) -> str:
    timed = layouts[0].timing is not None
    budget, rule = memory_budget(options_from_args(args, "infer", batch=1, weight_dtype=None, kv_dtype=None), capacity)
    searched = "," in (args.weight_dtype or "") + (args.kv_dtype or "")  # dtype columns when dtypes are compared
    lines = [f"{args.model}: {layouts[0].gpus} GPUs of {format_bytes(capacity)}; prompt {args.seq} + "
             f"{args.new_tokens or 0} new tokens", "",
             "rank  tp" + ("  weights      kv" if searched else "") + "  batch  sequences/step  memory/GPU (GiB)  "
             "read/step (GiB)" + ("  prefill (s)  decode step (s)  decode tok/s" if timed else "")
             + ("  end-to-end tok/s" if timed and args.new_tokens else "")]
    engine = getattr(args, "framework", None) == "vllm" and args.gpu
    notes = [*_notes(model)] + ([
             "NOTE: memory budget: vLLM's engine model, as estimate --framework vllm prints it: gpu_memory_utilization "
             "x the memory CUDA reports, less the weights, the profiled activation peak, CUDA graphs and NCCL, in KV "
             "blocks (the whole GPU without --framework vllm)"] if engine else [
             f"NOTE: memory budget {format_bytes(budget)}: {rule} (fit's rule: vLLM's gpu_memory_utilization under "
             "--framework vllm only)" + ("; device bytes (CUDA context, cuBLAS workspace, NCCL, allocator reserve "
                                          "modelled)" if args.gpu else "")])
    for i, x in enumerate(layouts, 1):
        dtypes = (f" {x.options.get('weight_dtype') or 'bf16':>8s} {x.options.get('kv_dtype') or 'bf16':>7s}"
                  if searched else "")
        row = (f"{i:4d} {x.options.get('tp', 1):3d}{dtypes} {x.options['batch']:6d} {x.tokens_per_step:15d} "
               f"{x.total_bytes / 2**30:17.2f} {x.bytes_read_per_step / 2**30:16.2f}")
        if timed:
            row += f" {x.timing.prefill_s:12.3f} {x.timing.decode_step_s:16.4f} {x.tokens_per_s:13,.0f}"
            row += f" {x.end_to_end_tokens_per_s:17,.0f}" if args.new_tokens else ""  # no decode: no end-to-end rate
        lines.append(row)
    return "\n".join([*lines, "", *notes])  # the cautions after the table, one line each


def _table(args: argparse.Namespace, capacity: int, layouts: list, model: list[str]) -> str:
    gpus = layouts[0].gpus
    head = (f"{args.model}: {gpus} GPUs of {format_bytes(capacity)}" +
            ("" if args.gpus else " (the fewest with a layout that fits)") +
            f"; global batch {args.global_batch} x {args.seq} tokens")
    bound = "" if args.gpu else "<="  # the proxy's MFU is an upper bound
    experts = "E" in resolve_model(args.model).sizes  # an ep column for a model with routed experts
    context = any(x.options.get("cp", 1) > 1 for x in layouts)  # a cp column when a row splits the sequence
    uneven = any(x.options.get("first_stage_layers") is not None for x in layouts)
    lines = [head, "",
             f"rank  tp{'  cp' if context else ''} pp  v   dp{'  ep' if experts else ''} zero recompute  mb    m  "
             f"memory/GPU (GiB)  step time   tokens/s  MFU{bound:2s}  bubble{'  first/last layers' if uneven else ''}"]
    for i, x in enumerate(layouts, 1):
        o = x.options
        time = f"{x.step_time_s:9.3f}s" if x.step_time_s is not None else "        -"
        rate = f"{x.tokens_per_s:10,.0f}" if x.tokens_per_s is not None else "         -"
        ep = f" {o.get('ep', 1):3d}" if experts else ""
        cp = f" {o.get('cp', 1):3d}" if context else ""
        stages = ("" if o.get("first_stage_layers") is None else
                  f"  {o['first_stage_layers']}/{o['last_stage_layers']}")
        lines.append(f"{i:4d} {o.get('tp', 1):3d}{cp} {o.get('pp', 1):2d} {o.get('virtual_stages') or 1:2d} "
                     f"{o.get('dp', 1):4d}{ep} {o.get('zero', 0):4d} {o.get('recompute', 'none'):9s} {o['batch']:3d} "
                     f"{o.get('micro_batches', 1):4d}  {x.total_bytes / 2**30:16.2f} {time} {rate}  {x.mfu:5.2f}  "
                     f"{x.bubble:6.3f}{stages}")
    lines += ["", *_notes(model), *_limits_line(args, layouts)]  # the cautions after the table, one short line each
    lines += _zero3_cautions(layouts) if args.gpu else []
    lines += ["", "re-run a row: memderive estimate --model " + args.model + " " + " ".join(option_argv(layouts[0].options)),
              _evaluated_line(layouts)]
    return "\n".join(lines)


def _zero3_cautions(layouts: list) -> list[str]:
    """A caution line for the rows below the first that shard ZeRO-3 past the ranks the time model is checked on
    (the first row's is among the NOTE lines, from its estimate)."""
    ranks = {i: x.options.get("dp", 1) * x.options.get("cp", 1) for i, x in enumerate(layouts, 1)
             if i > 1 and x.options.get("zero", 0) == 3}
    rows = [i for i, n in ranks.items() if n > ZERO3_CHECKED_RANKS]
    if not rows:
        return []
    return ["", f"caution (row{'s' if len(rows) > 1 else ''} {', '.join(map(str, rows))}): "
            f"{zero3_caution(max(ranks[i] for i in rows))}"]
