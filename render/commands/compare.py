"""``memderive compare``: one model, six calculators' accounting side by side, every gap explained (the report:
``documents.comparison``)."""

from __future__ import annotations

import argparse
import json

from memderive.arguments import add_model_options, add_output_options, add_options, emit, options_from_args
from memderive.documents.comparison import compare_report
from memderive.derivations.conventions import CONVENTIONS, compare
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.references import cite

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("compare", help="memderive beside Megatron, DeepSpeed, llm-analysis, EleutherAI and "
                                            "accelerate, each in its own accounting, every gap over 1%% explained")
    add_model_options(parser)
    add_options(parser, "compare")
    parser.add_argument("--convention", action="append", default=None,
                        help="only these conventions (repeat): memderive, megatron, deepspeed, llm-analysis, "
                             "eleuther, accelerate")
    parser.add_argument("--format", choices=("text", "md"), default="text")
    parser.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    add_output_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    opts = options_from_args(args)
    if opts.mode not in ("train", "infer"):
        raise ValueError("compare needs --mode train or --mode infer (with --batch and --seq)")
    names = tuple(args.convention or CONVENTIONS)
    if "memderive" not in names:
        names = ("memderive", *names)
    model = resolve_model(args.model)
    rows, skipped = compare(model, opts, names)
    if args.json:
        text = json.dumps({"model": model.name, "mode": opts.mode, "conventions": [
            {"convention": r.convention, "parameters": r.parameters, "model_states": r.model_states,
             "activations": r.activations, "kv_cache": r.kv_cache, "total": r.total, "printed": r.printed,
             "source": cite(r.source), "why": r.why} for r in rows],
            "not_modelled": dict(skipped)}, indent=2)
    else:
        text = compare_report(model.name, rows, skipped, opts, args.format)
    emit(text, args.output, args.force)
    return 0
