"""``memderive estimate``: numbers with their closed forms and breakdown."""

from __future__ import annotations

import argparse
import json
import sys

from memderive.derivations.models.ssm import find_ssm
from memderive.arguments import (add_model_options, add_output_options, add_options, command_line, emit,
                                  options_from_args, whole_number)
from memderive.documents.units import RenderOptions
from memderive.derivations.estimate import estimate
from memderive.derivations.ssm_estimate import ssm_estimate
from memderive.documents.ssm_writeup import ssm_report
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.quantities.traced import traced_config, traced_estimate
from memderive.derivations.quantities.traced_symbolic import formula
from memderive.documents.traced_report import traced_latex, traced_text


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("estimate", help="parameters and memory of a model, with the derivation")
    add_model_options(parser)
    add_options(parser, "estimate")
    parser.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    parser.add_argument("--format", choices=("text", "md", "latex"), default="text")
    parser.add_argument("--convention", default="memderive",
                        help="whose accounting: memderive (default), or megatron, deepspeed, llm-analysis, eleuther, "
                             "accelerate beside memderive's, as `memderive compare` prints them")
    parser.add_argument("--summary", action="store_true", help="one screen: the inputs and each quantity's value")
    add_writeup_options(parser)
    add_output_options(parser)
    parser.set_defaults(func=run)


def add_writeup_options(parser: argparse.ArgumentParser) -> None:
    """Render settings of the Markdown/LaTeX writeups (``render.units.RenderOptions``)."""
    g = parser.add_argument_group("writeup")
    g.add_argument("--decimals", type=whole_number, help="decimals of rounded GB/GiB figures (default 2)")
    g.add_argument("--detail", choices=("symbolic", "substituted", "numeric"),
                   help="formula only; formula = numbers = result (default); formula = result")
    g.add_argument("--units", choices=("both", "SI", "IEC"), help="rounded bytes in GB, GiB or both (default)")


def check_formats(args: argparse.Namespace) -> None:
    """Output switches that contradict each other, or that the chosen output does not use, are refused."""
    if args.json and args.format != "text":
        raise ValueError(f"--json and --format {args.format} are two outputs; give one of them")
    if args.summary and (args.json or args.format != "text"):
        raise ValueError("--summary is a one-screen text report; leave out --json and --format")
    unused = [flag for flag, value in (("--detail", args.detail), ("--units", args.units)) if value is not None]
    if (args.json or args.format == "text") and unused:
        raise ValueError(f"{' and '.join(unused)} shape Markdown and LaTeX writeups; add --format md or --format latex")


def render_options(args: argparse.Namespace, **defaults: object):
    """``RenderOptions``: the built-in defaults, then ``defaults``, then what the user gave."""
    return RenderOptions().merge(**defaults).merge(precision=args.decimals, detail=args.detail, units=args.units)


def run(args: argparse.Namespace) -> int:
    if args.convention != "memderive":
        return _convention(args)
    check_formats(args)
    traced = traced_config(args.model, args.implementation, args.mode)
    if find_ssm(args.model) is not None and not (args.mode == "train" and traced is not None):
        return _state_space(args)  # training of a state space config.json: traced (the hand-written one refuses it)
    if traced is not None:  # a model_type no hand-written family takes: traced from transformers' code
        return _traced(args, *traced)
    est = estimate(args.model, options_from_args(args))
    if args.json:
        out = json.dumps(est.to_json(), indent=2)
    else:
        # lazy: the text, Markdown and LaTeX writeups, ~15% of a cold ``estimate --json``, which prints none of them
        from memderive.documents import text, writeup

        if args.summary:
            out = text.summary_report(est, precision=render_options(args).precision)
        elif args.format == "text":
            out = text.estimate_text(est, precision=render_options(args).precision)
        else:
            out = writeup.estimate_document(est, args.format, render_options(args))
    emit(out, args.output, args.force)
    if est.options.framework == "vllm" and est.options.gpu is not None:
        # lazy: serving and the runtime, imported only with --framework vllm --gpu (tests/test_cold_path.py)
        from memderive.derivations.quantities.device import vllm_refusal

        refusal = vllm_refusal(est)
        if refusal is not None:  # an answer (the engine would not start), not bad input: exit 1, as fit's "does not fit"
            sys.stderr.write(f"memderive: vLLM refuses to start: {refusal}\n")
            return 1
    return 0


def _state_space(args: argparse.Namespace) -> int:
    """Mamba 2 and hybrid models: the hand-written derivation of ``derivations.ssm_estimate`` (``--summary``: its
    text report, already a page: one closed form and value per quantity)."""
    args.ssm_opts = options_from_args(args)
    est = ssm_estimate(find_ssm(args.model), args.ssm_opts)
    emit(ssm_report(est, args), args.output, args.force)
    return 0


def _traced(args: argparse.Namespace, config: dict, name: str) -> int:
    """A traced model's figures (``derivations.quantities.traced``): text, Markdown, LaTeX or JSON; ``--summary``
    the text, already a summary (the figures and their closed forms, no derivation steps to leave out)."""
    est = traced_estimate(config, name, options_from_args(args), formula=formula)
    if args.json:
        text = json.dumps(est.to_json(), indent=2)
    elif args.format == "latex":
        text = traced_latex(est, command_line(args))
    else:
        text = traced_text(est, markdown=args.format == "md")
    emit(text, args.output, args.force)
    return 0


def _convention(args: argparse.Namespace) -> int:
    """Another tool's accounting of this model beside memderive's (the two rows of ``compare``)."""
    # lazy: other tools' conventions and the comparison report, for --convention only (~5% of a cold estimate)
    from memderive.documents.comparison import CONVENTIONS, ConventionError, compare, compare_report

    if args.convention not in CONVENTIONS:
        raise ConventionError(f"--convention must be one of {', '.join(CONVENTIONS)}, got {args.convention!r}")
    if args.json or args.format == "latex":
        raise ValueError("--convention prints a text or Markdown comparison; use memderive compare --json for numbers")
    opts = options_from_args(args)
    if opts.mode not in ("train", "infer"):
        raise ValueError("--convention needs --mode train or --mode infer (with --batch and --seq)")
    model = resolve_model(args.model)
    rows, skipped = compare(model, opts, ("memderive", args.convention))
    emit(compare_report(model.name, rows, skipped, opts, args.format), args.output, args.force)
    return 0
