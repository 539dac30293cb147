"""``memderive gpus``: the bundled accelerator table, with each row's datasheet."""

from __future__ import annotations

import argparse
import json

from memderive.arguments import emit
from memderive.derivations.hardware import ARCH_SOURCES, GPUS
from memderive.derivations.references import cite


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("gpus", help="list the bundled GPUs (peak FLOP/s, memory, bandwidths, sources)")
    parser.add_argument("--json", action="store_true", help="one JSON list with exact integers")
    parser.set_defaults(func=run)


def table() -> str:
    """One row per GPU: its architecture, dense 16-bit, FP8 and FP4 peak, memory, memory bandwidth, link; then the
    sources."""
    head = (f"{'name':<11} {'arch':<7} {'bf16 TFLOP/s':>12} {'fp8 TFLOP/s':>11} {'fp4 TFLOP/s':>11} {'memory':>8} "
            f"{'mem GB/s':>9} {'link GB/s':>9}  link")
    rows = [head]
    for x in GPUS.values():
        fp8 = f"{x.fp8_flops / 1e12:,.1f}" if x.fp8_flops else "-"
        fp4 = f"{x.fp4_flops / 1e12:,.1f}" if x.fp4_flops else "-"
        rows.append(f"{x.name:<11} {x.arch:<7} {x.bf16_flops / 1e12:>12,.1f} {fp8:>11} {fp4:>11} "
                    f"{x.memory_bytes // 2**30:>4} GiB "
                    f"{x.memory_bandwidth / 1e9:>9,.0f} {x.link_bandwidth / 1e9:>9,.0f}  {x.link}")
    rows += ["", "dense peaks (datasheets' sparsity figures halved); memory in binary GB as datasheets mean them; "
             "link: intra-node, both directions", "sources:"]
    rows += [f"  {cite(c)}" for c in dict.fromkeys(x.source for x in GPUS.values())]
    rows += [f"  arch: {cite(c)}" for c in ARCH_SOURCES]
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    emit(json.dumps([x.to_json() for x in GPUS.values()], indent=2) if args.json else table(), None)
    return 0
