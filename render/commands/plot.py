"""``memderive plot``: per-GPU memory as stacked bars across layouts, or against s or b."""

from __future__ import annotations

import argparse

from memderive.arguments import add_model_options, add_output_options, add_options, check_output, options_from_args
from memderive.derivations.estimate import estimate
from memderive.documents.units import parse_size
from memderive.figures.plots import draw, plot_data, save


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("plot", help="plot per-GPU memory: layouts side by side, or against s or b")
    add_model_options(parser)
    add_options(parser, "plot")
    parser.add_argument("--kind", choices=("breakdown", "seq", "batch"), default="breakdown",
                        help="breakdown: stacked bars across layouts; seq/batch: memory against s or b")
    parser.add_argument("--gpu-memory", default=None, help="draw the capacity line, e.g. 80GB or 80GiB")
    parser.add_argument("--quantity", default=None,
                        help="a quantity to plot instead of the total (a name of derive or an estimate key), "
                             "e.g. flops.hardware_per_gpu")
    add_output_options(parser, "FILE.png, FILE.svg or FILE.pdf", required=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.output.lower().endswith((".png", ".svg", ".pdf")):
        raise ValueError(f"-o must name a .png, .svg or .pdf file, got {args.output!r}")
    check_output(args.output, args.force)
    if args.mode == "params":
        raise ValueError("plots show memory per GPU; use --mode train (default) or --mode infer")
    capacity = parse_size(args.gpu_memory, "--gpu-memory") if args.gpu_memory else None
    est = estimate(args.model, options_from_args(args, mode=args.mode or "train"))

    save(draw(plot_data(est, args.kind, capacity, args.quantity)), args.output)
    return 0
