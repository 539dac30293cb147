"""The ``memderive`` command line.

Each subcommand lives in its own ``render/cmd_*.py`` module exposing ``register(subparsers)``;
modules import their heavy dependencies inside the handler so that start-up stays fast.
Bad input of any kind ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["main", "add_model_options", "add_strategy_options", "options_from_args", "fail", "emit"]

COMMAND_MODULES = ("render.cmd_estimate", "render.cmd_derive", "render.cmd_fit", "render.cmd_plot",
                   "render.cmd_notebook", "render.cmd_check", "render.cmd_compare", "render.cmd_sweep",
                   "render.cmd_plan")


class CliError(ValueError):
    """Bad input detected by the CLI itself."""


def fail(message: str) -> None:
    raise CliError(message)


def emit(text: str, output: str | None) -> None:
    """Print ``text``, or write it to the file ``output``."""
    if output:
        with open(output, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"memderive: error: {message}\n")
        raise SystemExit(2)


def add_model_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--model", required=required,
                        help="bundled model name (e.g. llama-2-7b) or path to a local config.json")


def add_strategy_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by estimate, derive, fit, plot and notebook."""
    g = parser.add_argument_group("step and strategy")
    g.add_argument("--mode", choices=("params", "train", "infer"), default=None)
    g.add_argument("--batch", type=int)
    g.add_argument("--seq", type=int)
    g.add_argument("--new-tokens", type=int, default=None)
    g.add_argument("--dtype", default="bf16", help="training parameter/compute dtype (bf16 = mixed precision)")
    g.add_argument("--optimizer", default="adamw",
                   help="adamw, adam, adam-8bit, paged-adamw, paged-adamw-8bit, sgd-momentum, sgd")
    g.add_argument("--tp", type=int, default=1)
    g.add_argument("--pp", type=int, default=1)
    g.add_argument("--dp", type=int, default=1)
    g.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    g.add_argument("--ep", type=int, default=1, help="expert parallelism: routed experts over ep of the dp ranks")
    g.add_argument("--capacity-factor", default=None,
                   help="MoE capacity factor c: each expert padded to ceil(c k b s / E) token slots")
    g.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3))
    g.add_argument("--offload", action="store_true", help="optimizer states in CPU memory")
    g.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    g.add_argument("--attention", choices=("eager", "sdpa", "flash"), default=None,
                   help="attention kernel: eager holds the b*a*s*s scores, sdpa and flash do not (default: sdpa "
                        "in inference, as transformers' generate and serving engines; eager in training, "
                        "Korthikanti et al.'s assumption)")
    g.add_argument("--flash", action="store_true", help="short for --attention flash")
    g.add_argument("--kv-block", type=int, default=None,
                   help="inference: paged KV cache, whole blocks of this many tokens per sequence (vLLM: 16)")
    g.add_argument("--no-dropout", action="store_true")
    g.add_argument("--micro-batches", type=int)
    g.add_argument("--virtual-stages", type=int)
    g.add_argument("--profile", choices=("korthikanti", "exact"), default="korthikanti",
                   help="activation profile: the paper's (norm stats neglected) or every saved tensor")
    g.add_argument("--overhead", default="0", help="allowance for framework overhead, e.g. 2GiB")
    g.add_argument("--weight-dtype", default=None, help="inference weight dtype (fp16, int8, int4, fp8, ...)")
    g.add_argument("--kv-dtype", default=None, help="inference KV-cache dtype")
    g.add_argument("--quant-group", type=int, default=128, help="int4/int8 quantization group size")
    g.add_argument("--implementation", default="megatron",
                   help="whose layers save the activations: megatron (fused kernels, the published formulas; "
                        "default) or hf (transformers' modeling code); hf-eager / hf-sdpa also set the attention")
    ft = parser.add_argument_group("fine-tuning")
    ft.add_argument("--lora-rank", type=int, help="LoRA rank r (with --lora-targets)")
    ft.add_argument("--lora-targets", default="", help="modules as PEFT names them (q_proj,v_proj) or all-linear")
    ft.add_argument("--lora-dropout", type=float, default=0.0, help="adapter dropout (> 0 saves a mask)")
    ft.add_argument("--dora", action="store_true", help="DoRA: a magnitude vector per adapted output feature")
    ft.add_argument("--base-dtype", help="frozen base weights: bf16, fp16, fp32, int8 (LLM.int8()), nf4 (QLoRA)")
    ft.add_argument("--freeze-embeddings", action="store_true", help="no gradients for the embeddings")
    ft.add_argument("--train-only", default="", help="freeze all but these modules (names, embeddings, lm_head, norms)")


def options_from_args(args: argparse.Namespace, mode: str | None = None):
    from derivations.options import Options
    from render.units import parse_size

    return Options(mode=mode or args.mode or "params", batch=args.batch, seq=args.seq,
                   new_tokens=0 if args.new_tokens is None else args.new_tokens,
                   dtype=args.dtype, optimizer=args.optimizer, tp=args.tp, pp=args.pp, dp=args.dp, sp=args.sp,
                   zero=args.zero, offload=args.offload, recompute=args.recompute, flash=args.flash,
                   attention=args.attention, kv_block=args.kv_block, dropout=not args.no_dropout, micro_batches=args.micro_batches,
                   virtual_stages=args.virtual_stages, profile=args.profile,
                   overhead_bytes=parse_size(args.overhead), weight_dtype=args.weight_dtype,
                   kv_dtype=args.kv_dtype, quant_group=args.quant_group,
                   implementation=getattr(args, "implementation", "megatron"), lora_rank=args.lora_rank,
                   lora_targets=args.lora_targets, lora_dropout=args.lora_dropout, dora=args.dora,
                   base_dtype=args.base_dtype, freeze_embeddings=args.freeze_embeddings, train_only=args.train_only,
                   ep=args.ep, capacity_factor=args.capacity_factor)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memderive", description="Derive the memory of transformer models, symbolically and exactly.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. piped into head: not an error of the input
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CliError, ValueError, KeyError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        sys.stderr.write(f"memderive: error: {message}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
