"""``memderive plan``: training layouts that fit, fastest first (``derivations.search.plan``).

``--gpus N`` plans N GPUs; without it, the answer is how many GPUs are needed (the fewest with a layout
that fits). ``--json`` rows carry ``estimate``'s option names: each re-runs through ``estimate`` to the
same bytes.
"""

from __future__ import annotations

import argparse
import json

from render.cli import add_model_options, add_output_options, emit, fail, whole_number

PROXY = ("step time: a proxy until the compute model lands: hardware FLOPs per GPU (6N per token + "
         "attention, recompute added) at peak, times the pipeline bubble 1 + (p-1)/(m v); communication not "
         "modelled, so times are lower bounds and MFU an upper bound")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plan", help="training layouts (tp, pp, dp, ZeRO, recompute, micro-batches) that fit")
    add_model_options(parser)
    parser.add_argument("--mode", choices=("train", "infer"), default="train")
    parser.add_argument("--gpus", type=whole_number, help="GPU count (default: the fewest that fit)")
    parser.add_argument("--gpu-memory", help="memory of one GPU, e.g. 80GB (10^9 B) or 80GiB")
    parser.add_argument("--gpu", help="a GPU by name (from the compute model's GPU table, once it lands)")
    parser.add_argument("--peak-tflops", type=float, help="one GPU's dense peak in TFLOP/s, for step times")
    parser.add_argument("--seq", type=whole_number, required=True, help="tokens per sequence")
    parser.add_argument("--global-batch", type=whole_number, help="sequences per optimizer step (training)")
    parser.add_argument("--new-tokens", type=whole_number, default=0, help="tokens generated per sequence (inference)")
    parser.add_argument("--no-flash", action="store_true", help="plan without FlashAttention")
    parser.add_argument("--dtype", default="bf16", help="training precision (bf16 = mixed precision)")
    parser.add_argument("--optimizer", default="adamw")
    parser.add_argument("--top", type=whole_number, default=5, help="how many layouts to show (default 5)")
    parser.add_argument("--json", action="store_true", help='{"layouts": [{"options": ..., "total_bytes": ...}]}')
    add_output_options(parser)
    parser.set_defaults(func=run)


def _capacity(args: argparse.Namespace) -> tuple[int, float | None]:
    from render.units import parse_size

    peak = args.peak_tflops * 1e12 if args.peak_tflops else None
    if args.gpu:
        fail(f"--gpu {args.gpu}: no GPU table yet (it comes with the compute model); give --gpu-memory SIZE "
             "and, for step times, --peak-tflops")
    if not args.gpu_memory:
        fail("give --gpu-memory SIZE (e.g. 80GB), the memory of one GPU")
    return parse_size(args.gpu_memory), peak


def run(args: argparse.Namespace) -> int:
    from derivations.options import Options
    from derivations.search.plan import plan

    if args.mode == "infer":
        return _infer(args)
    if args.global_batch is None:
        fail("plan --mode train needs --global-batch (sequences per optimizer step)")
    for name in ("gpus", "seq", "global_batch", "top"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            fail(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    capacity, peak = _capacity(args)
    base = Options(mode="train", batch=1, seq=args.seq, dtype=args.dtype, optimizer=args.optimizer)
    layouts = plan(args.model, capacity, args.global_batch, args.seq, args.gpus, options=base, peak_flops=peak,
                   flash=not args.no_flash, top=args.top)
    if args.json:
        text = json.dumps({"model": args.model, "capacity_bytes": capacity, "step_time_model": PROXY,
                           "layouts": [x.to_json() for x in layouts]}, indent=2)
    else:
        text = _table(args, capacity, layouts)
    emit(text, args.output, args.force)
    return 0


INFER_PROXY = ("ranked by decode throughput under a memory-bound proxy: tokens/s ~ batch x replicas / (weights + "
               "KV cache per GPU), what one decode step reads; no bandwidth assumed, so no seconds")


def _infer(args: argparse.Namespace) -> int:
    from derivations.search.plan import plan_infer
    from render.units import format_bytes

    for name in ("gpus", "seq", "top"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            fail(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    capacity, _ = _capacity(args)
    layouts = plan_infer(args.model, capacity, args.seq, args.gpus, new_tokens=args.new_tokens, top=args.top)
    if args.json:
        text = json.dumps({"model": args.model, "capacity_bytes": capacity, "throughput_model": INFER_PROXY,
                           "layouts": [x.to_json() for x in layouts]}, indent=2)
    else:
        lines = [f"{args.model}: {layouts[0].gpus} GPUs of {format_bytes(capacity)}; prompt {args.seq} + "
                 f"{args.new_tokens} new tokens", f"NOTE: {INFER_PROXY}", "",
                 "rank  tp  batch  sequences/step  memory/GPU (GiB)  read/step (GiB)"]
        for i, x in enumerate(layouts, 1):
            lines.append(f"{i:4d} {x.options.get('tp', 1):3d} {x.options['batch']:6d} {x.tokens_per_step:15d} "
                         f"{x.total_bytes / 2**30:17.2f} {x.bytes_read_per_step / 2**30:16.2f}")
        text = "\n".join(lines)
    emit(text, args.output)
    return 0


def _table(args: argparse.Namespace, capacity: int, layouts: list) -> str:
    from render.units import format_bytes

    gpus = layouts[0].gpus
    head = (f"{args.model}: {gpus} GPUs of {format_bytes(capacity)}" +
            ("" if args.gpus else " (the fewest with a layout that fits)") +
            f"; global batch {args.global_batch} x {args.seq} tokens")
    lines = [head, f"NOTE: {PROXY}", "",
             "rank  tp pp  v   dp zero recompute  mb    m  memory/GPU (GiB)  step time  MFU<=  bubble"]
    for i, x in enumerate(layouts, 1):
        o = x.options
        time = f"{x.step_time_s:9.3f}s" if x.step_time_s is not None else "        -"
        lines.append(f"{i:4d} {o.get('tp', 1):3d} {o.get('pp', 1):2d} {o.get('virtual_stages') or 1:2d} "
                     f"{o.get('dp', 1):4d} {o.get('zero', 0):4d} {o.get('recompute', 'none'):9s} {o['batch']:3d} "
                     f"{o.get('micro_batches', 1):4d}  {x.total_bytes / 2**30:16.2f} {time}  {x.mfu:5.2f}  "
                     f"{x.bubble:6.3f}")
    lines += ["", "re-run a row: memderive estimate --model " + args.model + " --mode train " +
              _flags(layouts[0].options)]
    return "\n".join(lines)


def _flags(options: dict) -> str:
    parts = []
    for key, value in options.items():
        if key == "mode":
            continue
        flag = "--" + key.replace("_", "-")
        if value is True:
            parts.append(flag)
        elif value is not False and value is not None:
            parts.append(f"{flag} {value}")
    return " ".join(parts)
