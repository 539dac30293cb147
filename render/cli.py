"""The ``memderive`` command line.

Each subcommand lives in its own ``render/cmd_*.py`` module exposing ``register(subparsers)``;
modules import their heavy dependencies inside the handler so that start-up stays fast.
Bad input of any kind ends in one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import os
import re
import sys
from collections.abc import Sequence

__all__ = ["main", "add_model_options", "add_strategy_options", "add_output_options", "options_from_args", "fail",
           "emit", "check_output", "not_applicable", "command_line", "one_line", "whole_number"]

COMMAND_MODULES = ("memderive.cmd_estimate", "memderive.cmd_derive", "memderive.cmd_fit", "memderive.cmd_plot",
                   "memderive.cmd_notebook", "memderive.cmd_check", "memderive.cmd_compare", "memderive.cmd_sweep",
                   "memderive.cmd_plan", "memderive.cmd_models", "memderive.cmd_gpus")


class CliError(ValueError):
    """Bad input detected by the CLI itself."""


def fail(message: str) -> None:
    raise CliError(message)


def check_output(output: str | None, force: bool) -> None:
    """The one overwrite rule of every ``-o``: an existing file (a dangling symlink too: writing would
    follow it) is refused unless ``--force``; ``-`` is standard output."""
    if output and output != "-" and os.path.lexists(output) and not force:
        raise CliError(f"{output} exists; pass --force to overwrite it")


def emit(text: str, output: str | None, force: bool = False) -> None:
    """Print ``text``, or write it to the file ``output`` (refused if it exists, unless ``force``)."""
    check_output(output, force)
    if output and output != "-":
        with open(output, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)


class _Formatter(argparse.HelpFormatter):
    """Help that shows each option's default (when it has one worth showing)."""

    @staticmethod
    def _shows_default(action: argparse.Action) -> bool:
        return (bool(action.option_strings) and action.default is not None and action.default is not False
                and action.default != argparse.SUPPRESS
                and "default" not in (action.help or ""))

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows_default(action):  # argparse prints no help line without a help text
            action = copy.copy(action)
            action.help = "(default: %(default)s)"
        return super()._format_action(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").strip()
        return f"{text} (default: %(default)s)".strip() if self._shows_default(action) else text


def one_line(message: object, limit: int = 1000) -> str:
    """An error message as one line of at most ``limit`` characters (a 10 MB value is never echoed whole)."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def whole_number(text: str) -> int:
    """An integer option: ASCII digits with an optional sign, at most 30 of them. Python's ``int`` would
    also read ``1_000`` and full-width ``０１``; here they are refused, in one line.

    >>> whole_number("8"), whole_number("-1")
    (8, -1)
    """
    if not re.fullmatch(r"[+-]?[0-9]{1,30}", text):
        raise argparse.ArgumentTypeError(f"expected a whole number in ASCII digits (at most 30), got {one_line(repr(text), 60)}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"memderive: error: {one_line(message)}\n")
        raise SystemExit(2)


def add_model_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--model", required=required,
                        help="bundled model name (e.g. llama-2-7b) or path to a local config.json")


def add_strategy_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by estimate, derive, fit, plot and notebook."""
    g = parser.add_argument_group("step and strategy")
    g.add_argument("--mode", choices=("params", "train", "infer"), default=None)
    g.add_argument("--batch", type=whole_number)
    g.add_argument("--seq", type=whole_number)
    g.add_argument("--new-tokens", type=whole_number, default=None)
    g.add_argument("--dtype", default="bf16", help="training parameter/compute dtype (bf16 = mixed precision)")
    g.add_argument("--optimizer", default="adamw",
                   help="adamw, adam, adam-8bit, paged-adamw, paged-adamw-8bit, sgd-momentum, sgd")
    g.add_argument("--tp", type=whole_number, default=1)
    g.add_argument("--pp", type=whole_number, default=1)
    g.add_argument("--dp", type=whole_number, default=1)
    g.add_argument("--sp", action="store_true", help="sequence parallelism (with --tp)")
    g.add_argument("--ep", type=whole_number, default=1, help="expert parallelism: routed experts over ep of the dp ranks")
    g.add_argument("--capacity-factor", default=None,
                   help="MoE capacity factor c: each expert padded to ceil(c k b s / E) token slots")
    g.add_argument("--zero", type=whole_number, default=0, choices=(0, 1, 2, 3))
    g.add_argument("--offload", action="store_true",
                   help="ZeRO-Offload: gradients and optimizer states (fp32 master weights, moments) in CPU memory; "
                        "the GPU keeps the 16-bit weights")
    g.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    g.add_argument("--attention", choices=("eager", "sdpa", "flash"), default=None,
                   help="attention kernel: eager holds the b*a*s*s scores, sdpa and flash do not (default: sdpa "
                        "in inference, as transformers' generate and serving engines; eager in training, "
                        "Korthikanti et al.'s assumption)")
    g.add_argument("--flash", action="store_true", help="short for --attention flash")
    g.add_argument("--kv-block", type=whole_number, default=None,
                   help="inference: paged KV cache, whole blocks of this many tokens per sequence (vLLM: 16)")
    g.add_argument("--no-dropout", action="store_true")
    g.add_argument("--micro-batches", type=whole_number)
    g.add_argument("--virtual-stages", type=whole_number)
    g.add_argument("--profile", choices=("korthikanti", "exact"), default="korthikanti",
                   help="activation profile: the paper's (norm stats neglected) or every saved tensor")
    g.add_argument("--overhead", default="0", help="allowance for framework overhead, with a unit: 2GiB, 500MB")
    g.add_argument("--weight-dtype", default=None, help="inference weight dtype (fp16, int8, int4, fp8, ...)")
    g.add_argument("--kv-dtype", default=None, help="inference KV-cache dtype")
    g.add_argument("--quant-group", type=whole_number, default=128, help="int4/int8 quantization group size")
    g.add_argument("--implementation", default="megatron",
                   help="whose layers save the activations: megatron (fused kernels, the published formulas; "
                        "default) or hf (transformers' modeling code); hf-eager / hf-sdpa also set the attention")
    g.add_argument("--gpu", help="accelerator for times and memory budget (memderive gpus lists them), e.g. h100-sxm")
    g.add_argument("--efficiency", type=float, help="fraction of dense peak FLOP/s reached (default 0.5: "
                   "Narayanan et al. 2021)")
    ft = parser.add_argument_group("fine-tuning")
    ft.add_argument("--lora-rank", type=whole_number, help="LoRA rank r (with --lora-targets)")
    ft.add_argument("--lora-targets", default="", help="modules as PEFT names them (q_proj,v_proj) or all-linear")
    ft.add_argument("--lora-dropout", type=float, default=0.0, help="adapter dropout (> 0 saves a mask)")
    ft.add_argument("--dora", action="store_true", help="DoRA: a magnitude vector per adapted output feature")
    ft.add_argument("--base-dtype", help="frozen base weights: bf16, fp16, fp32, int8 (LLM.int8()), nf4 (QLoRA)")
    ft.add_argument("--freeze-embeddings", action="store_true", help="no gradients for the embeddings")
    ft.add_argument("--train-only", default="", help="freeze all but these modules (names, embeddings, lm_head, norms)")


def add_output_options(parser: argparse.ArgumentParser, what: str = "write the report to this file",
                       required: bool = False) -> None:
    """``-o FILE`` and ``--force``: every command that writes a file refuses to overwrite one without it."""
    parser.add_argument("-o", "--output", required=required, help=what)
    parser.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")


#: Options of ``add_strategy_options`` by the modes they apply to (the rest apply to train and infer).
_TRAIN_ONLY = ("dtype", "optimizer", "pp", "dp", "sp", "zero", "offload", "recompute", "no_dropout", "micro_batches",
               "virtual_stages", "profile", "implementation", "lora_rank", "lora_targets", "lora_dropout", "dora",
               "base_dtype", "freeze_embeddings", "train_only")
_INFER_ONLY = ("new_tokens", "weight_dtype", "kv_dtype", "quant_group", "kv_block")
_DEFAULTS = {"dtype": "bf16", "optimizer": "adamw", "tp": 1, "pp": 1, "dp": 1, "zero": 0, "recompute": "none",
             "profile": "korthikanti", "overhead": "0", "quant_group": 128, "implementation": "megatron",
             "lora_targets": "", "lora_dropout": 0.0, "train_only": ""}


def not_applicable(args: argparse.Namespace, mode: str) -> list[str]:
    """The options given on the command line that do not apply in ``mode`` (as ``--flag`` names)."""
    def given(name: str) -> bool:
        value = getattr(args, name, None)
        return value not in (None, False) and value != _DEFAULTS.get(name)

    names = {"params": ("batch", "seq", "tp", "attention", "flash", "overhead", *_TRAIN_ONLY, *_INFER_ONLY),
             "train": _INFER_ONLY, "infer": _TRAIN_ONLY}.get(mode, ())
    unused = [name for name in names if given(name)]
    if mode == "train" and getattr(args, "pp", 1) == 1:  # with --gpu, micro-batches also size the timed step
        unused += [name for name in ("micro_batches", "virtual_stages") if given(name)
                   and not (name == "micro_batches" and getattr(args, "gpu", None))]
    return ["--" + name.replace("_", "-") for name in unused]


def _refuse_not_applicable(args: argparse.Namespace, mode: str) -> None:
    unused = not_applicable(args, mode)
    pipeline = [x for x in unused if mode == "train" and x in ("--micro-batches", "--virtual-stages")]
    if pipeline:  # a warning, not an error: a micro-batch count also says how a data-parallel step accumulates
        verb = "applies" if len(pipeline) == 1 else "apply"
        sys.stderr.write(f"memderive: warning: {' and '.join(pipeline)} {verb} to pipeline parallelism (--pp greater "
                         "than 1); without it the per-GPU memory does not depend on it\n")
        unused = [x for x in unused if x not in pipeline]
    if not unused:
        return
    why = {"params": "a parameter count depends on the model only; use --mode train or --mode infer",
           "train": "inference only (--mode infer)",
           "infer": "training only (--mode train); inference takes --weight-dtype, --kv-dtype, --tp"}
    verb = "does" if len(unused) == 1 else "do"
    raise CliError(f"{', '.join(unused)} {verb} not apply to --mode {mode}: {why[mode]}")


def options_from_args(args: argparse.Namespace, mode: str | None = None, strict: bool = True):
    """``Options`` from the command line; with ``strict``, options that do not apply to the mode are refused."""
    from memderive.derivations.options import Options
    from memderive.units import parse_size

    if strict:
        _refuse_not_applicable(args, mode or args.mode or "params")
    return Options(mode=mode or args.mode or "params", batch=args.batch, seq=args.seq,
                   new_tokens=0 if args.new_tokens is None else args.new_tokens,
                   dtype=args.dtype, optimizer=args.optimizer, tp=args.tp, pp=args.pp, dp=args.dp, sp=args.sp,
                   zero=args.zero, offload=args.offload, recompute=args.recompute, flash=args.flash,
                   attention=args.attention, kv_block=args.kv_block, dropout=not args.no_dropout,
                   micro_batches=args.micro_batches,
                   virtual_stages=args.virtual_stages, profile=args.profile,
                   overhead_bytes=parse_size(args.overhead, "--overhead"), weight_dtype=args.weight_dtype,
                   kv_dtype=args.kv_dtype, quant_group=args.quant_group,
                   implementation=getattr(args, "implementation", "megatron"), lora_rank=args.lora_rank,
                   lora_targets=args.lora_targets, lora_dropout=args.lora_dropout, dora=args.dora,
                   base_dtype=args.base_dtype, freeze_embeddings=args.freeze_embeddings, train_only=args.train_only,
                   ep=args.ep, capacity_factor=args.capacity_factor, gpu=getattr(args, "gpu", None),
                   efficiency=getattr(args, "efficiency", None))


def command_line(args: argparse.Namespace) -> str:
    """The command as it was run (``memderive`` and its arguments, shell-quoted)."""
    import shlex

    return "memderive " + shlex.join(getattr(args, "argv", []))


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("memderive")
    except Exception:  # noqa: BLE001 - not installed (PYTHONPATH checkout): the source tree's version
        return "0.1.0 (source tree)"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="memderive", description="Derive the memory of transformer models, symbolically and exactly.")
    parser.add_argument("--version", action="version", version=f"memderive {_version()}")
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
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what was run, for "Generated by" lines
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # e.g. piped into head: not an error of the input
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (CliError, ValueError, KeyError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        sys.stderr.write(f"memderive: error: {one_line(message)}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
