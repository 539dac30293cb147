"""``memderive estimate``: numbers with their closed forms and breakdown."""

from __future__ import annotations

import argparse
import json

from render.cli import add_model_options, add_strategy_options, options_from_args


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("estimate", help="parameters and memory of a model, with the derivation")
    add_model_options(parser)
    add_strategy_options(parser)
    parser.add_argument("--json", action="store_true", help="one JSON object with exact integers")
    parser.add_argument("--format", choices=("text", "md", "latex"), default="text")
    parser.add_argument("-o", "--output", help="write the report to this file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from derivations.estimate import estimate

    est = estimate(args.model, options_from_args(args))
    if args.json:
        text = json.dumps(est.to_json(), indent=2)
    elif args.format == "text":
        from render.text import text_report

        text = text_report(est)
    else:
        from render.writeup import estimate_document  # issue 5: Markdown / LaTeX writeups

        text = estimate_document(est, args.format)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0
