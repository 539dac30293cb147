"""``memderive sweep``: every quantity over a grid of sizes and layouts, exactly, as CSV.

``--batch 1:100 --seq 128:8192:128`` sweeps inclusive ranges ``start:stop[:step]`` (or lists ``1,2,4``); any
of ``--batch --seq --new-tokens --tp --pp --dp --micro-batches`` may be one. One CSV row per point: the
swept options, then each quantity in whole units (bytes or elements), as ``estimate --json`` gives them.
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import sys

from memderive.arguments import add_model_options, add_options, fail, options_from_args
from memderive.derivations.search.sweep import MAX_POINTS, check_grid_size, sweep
from memderive.symbolic.lazy import lazy

np = lazy("numpy")

#: CLI flags that take ranges, and the Options fields they set (in derivations.search.sweep.SWEEPABLE).
RANGES = {"batch": "--batch", "seq": "--seq", "new_tokens": "--new-tokens", "tp": "--tp", "pp": "--pp",
          "dp": "--dp", "micro_batches": "--micro-batches"}

def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("sweep", help="every quantity over ranges of batch, seq, tp, pp, ... (exact, CSV)")
    add_model_options(parser)
    add_options(parser, "sweep")
    for action in parser._actions:  # these take ranges start:stop[:step] or lists a,b,c
        if action.dest in RANGES:
            action.type = str
            action.help = "a value, an inclusive range start:stop[:step] or a list a,b,c"
    parser.add_argument("-o", "--output", help="write the CSV to this file (default: standard output)")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    parser.set_defaults(func=run)

#: The most rows the command line writes: a CSV of more takes seconds (memderive.sweep returns arrays up to
#: derivations.search.sweep.MAX_POINTS points).
MAX_CSV_ROWS = 2**17

def parse_range(flag: str, text: str) -> list[int] | range:
    """``"1:4"`` -> range(1, 5); ``"128:512:128"`` -> 128, 256, 384, 512; ``"1,2,8"`` -> [1, 2, 8]. A range
    is not built (``1:10000000000`` costs nothing until the grid's size is checked).

    >>> list(parse_range("--seq", "128:600:128"))
    [128, 256, 384, 512]
    """
    text = str(text)
    try:
        parts = [int(x) for x in text.split("," if "," in text else ":")]
    except ValueError:
        parts = []
    if not parts or (":" in text and ("," in text or len(parts) > 3)):
        fail(f"{flag} {text!r} is not a whole number, an inclusive range start:stop[:step] or a list a,b,c")
    if "," in text or len(parts) == 1:
        return parts
    start, stop, step = (*parts, 1) if len(parts) == 2 else parts
    if step <= 0:
        fail(f"{flag} {text}: the step must be positive")
    if stop < start:
        fail(f"{flag} {text}: the stop is below the start; write start:stop[:step] with start <= stop")
    return range(start, stop + 1, step)

def run(args: argparse.Namespace) -> int:
    if args.output and os.path.exists(args.output) and not args.force:
        fail(f"{args.output} exists; give --force to overwrite it or choose another --output")
    grids = {dest: parse_range(flag, getattr(args, dest)) for dest, flag in RANGES.items()
             if getattr(args, dest) is not None}
    swept = {k: v for k, v in grids.items() if len(v) > 1}
    _check_size(swept)
    first = copy.copy(args)
    for dest, values in grids.items():  # the largest pp: a range with pipelines makes --micro-batches apply
        setattr(first, dest, max(values) if dest == "pp" else values[0])
    base = options_from_args(first)  # checks every other option once
    fixed = {k: v[0] for k, v in grids.items() if len(v) == 1}
    result = sweep(args.model, base, **fixed, **swept)
    stream = open(args.output, "w") if args.output else sys.stdout
    try:
        write_csv(stream, swept, result)
    finally:
        if args.output:
            stream.close()
    return 0

def _check_size(swept: dict[str, list[int] | range]) -> None:
    """The grid's size against the sweep's limits, then the CSV's, before a value is built."""
    check_grid_size({k: len(v) for k, v in swept.items()})
    rows = math.prod(len(v) for v in swept.values())
    if rows > MAX_CSV_ROWS:
        asked = " x ".join(f"{RANGES[k]} {len(v):,} values" for k, v in swept.items())
        fail(f"the sweep writes {rows:,} CSV rows ({asked}); the limit of the command line is {MAX_CSV_ROWS:,} "
             f"rows: sweep coarser steps, or call memderive.sweep in Python (arrays up to {MAX_POINTS:,} points)")

def _column(values, shape: tuple[int, ...]):
    """One output as a flat column: int64, or Python ints for values past int64 (a ``WideArray``)."""
    if hasattr(values, "broadcast_to"):  # WideArray: two limbs per cell
        return values.broadcast_to(shape).ravel().astype(object)
    return np.broadcast_to(values, shape).ravel()

def write_csv(stream, swept: dict[str, list[int]], result: dict) -> None:
    """Header, then one row per grid point in C order (the last swept option varies fastest)."""
    keys = list(result)
    stream.write(",".join([*swept, *keys]) + "\n")
    shape = tuple(len(v) for v in swept.values())
    axes = np.meshgrid(*(np.asarray(v, dtype=np.int64) for v in swept.values()), indexing="ij") if swept else []
    columns = [a.ravel() for a in axes] + [_column(result[k], shape) for k in keys]
    if all(c.dtype != object for c in columns):
        np.savetxt(stream, np.column_stack(columns) if columns else np.empty((1, 0)), fmt="%d", delimiter=",")
        return
    for row in zip(*(c.tolist() for c in columns)):
        stream.write(",".join(map(str, row)) + "\n")
