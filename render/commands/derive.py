"""``memderive derive QUANTITY``: the simplified closed form of one quantity."""

from __future__ import annotations

import argparse

from memderive.arguments import add_model_options, add_output_options, add_options, emit, options_from_args
from memderive.commands.estimate import add_writeup_options, render_options
from memderive.derivations.quantity_table import QUANTITY_NAMES, UnknownName, public_name, quantity_name
from memderive.derivations.estimate import estimate
from memderive.documents.text import plain
from memderive.documents.writeup import quantity_document

#: spellings that print several quantities in text (``derive flops``: forward, model and hardware FLOPs)
GROUPS = {"flops": ("forward_flops", "model_flops", "hardware_flops")}
#: symbolic placeholders for a derivation without a concrete step size
_DEFAULT_MODEL = "gpt3-175b"  # GPT family; 96 heads divide by the usual t
#: ``--strategy`` names -> option changes; degrees are placeholders (closed forms keep t, p, d)
STRATEGIES = {
    "none": {}, "tp": {"tp": 8}, "sp": {"tp": 8, "sp": True}, "pp": {"pp": 8},
    "selective": {"recompute": "selective"}, "full": {"recompute": "full"}, "flash": {"flash": True},
    "zero1": {"dp": 64, "zero": 1}, "zero2": {"dp": 64, "zero": 2}, "zero3": {"dp": 64, "zero": 3},
    "offload": {"offload": True},
}


def apply_strategy(args: argparse.Namespace, spec: str | None) -> None:
    """``--strategy tp+sp+selective`` sets the options it names (a degree the user gave is kept)."""
    if not spec:
        return
    for name in spec.replace(",", "+").split("+"):
        if name.strip() not in STRATEGIES:
            raise ValueError(f"unknown strategy {name.strip()!r} in --strategy; choose from {', '.join(STRATEGIES)}")
        for key, value in STRATEGIES[name.strip()].items():
            if key in ("tp", "pp", "dp") and getattr(args, key) != 1:
                continue
            setattr(args, key, value)


def _spelling(text: str) -> str:
    """A quantity's public name or alias (``derivations.quantity_table``), kept as typed."""
    try:
        row = quantity_name(text)
    except UnknownName as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if row.per_position:
        raise argparse.ArgumentTypeError(f"{row.name} is a check quantity (the KV cache over s + n); derive "
                                         "kv_cache.total or kv_cache.per_token")
    if row.claim_only:
        whole = public_name(row.mode, row.key)
        raise argparse.ArgumentTypeError(f"{row.name} is a check quantity (a part of {whole}); derive {whole}")
    return text


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("derive", help="print the closed form of a quantity")
    parser.add_argument("quantity", type=_spelling, metavar="QUANTITY",
                        help="one of " + ", ".join(q.name for q in QUANTITY_NAMES if not q.claim_only)
                        + " (older spellings such as params-per-layer, kv-cache, flops are accepted)")
    add_model_options(parser, required=False)
    add_options(parser, "derive")
    parser.add_argument("--strategy", help="shorthand, e.g. tp+sp+selective, flash, pp+zero1 (" + ", ".join(STRATEGIES) + ")")
    parser.add_argument("--format", choices=("text", "md", "latex"), default="text")
    add_writeup_options(parser)
    add_output_options(parser, "write the closed form or document to this file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    row = quantity_name(args.quantity)
    mode, key = row.mode, row.key
    apply_strategy(args, args.strategy)
    sized = mode == "params" or (args.batch is not None and args.seq is not None)
    if args.batch is None:
        args.batch = 1
    if args.seq is None:
        args.seq = 1
    est = estimate(args.model or _DEFAULT_MODEL, options_from_args(args, mode=mode, strict=False))
    est.quantity(key)  # a clear error for a quantity the mode lacks
    if args.format == "text":
        keys = GROUPS.get(args.quantity, (key,))
        text = "\n".join(f"{q.title} ({q.unit}) = {plain(q.closed_form())}" for q in map(est.quantity, keys))
    else:
        # Without --batch and --seq the placeholders b = s = 1 are not worth substituting.
        options = render_options(args) if sized else render_options(args, detail="symbolic")
        text = quantity_document(est, key, args.format, options)
    emit(text, args.output, args.force)
    return 0
