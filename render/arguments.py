"""What every command shares: the one error path, ``-o`` files, and the options of ``OPTIONS``.

Argparse for each command, the "does not apply to this mode" rule, ``Options`` from a parsed command
line and the command line that reproduces an ``Options`` are all read from the declaration table
``derivations.option_table``; the commands (``render/commands/*.py``) import this module, never
their dispatcher (``render.cli``).
"""

from __future__ import annotations

import argparse
import copy
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping
from typing import Any

from memderive.derivations.option_table import OPTIONS, Option, options_for, value_text
from memderive.derivations.options import Options, implied_profile
from memderive.derivations.frameworks import FRAMEWORKS, preset_values
from memderive.derivations.sizes import parse_size

__all__ = ["CliError", "Parser", "fail", "emit", "check_output", "one_line", "whole_number", "add_model_options",
           "add_options", "add_output_options", "not_applicable", "option_values",
           "options_from_args", "option_argv", "command_line"]


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


class Parser(argparse.ArgumentParser):
    """Argparse whose errors are one line and exit code 2, with defaults in the help."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2
        sys.stderr.write(f"memderive: error: {one_line(message)}\n")
        raise SystemExit(2)


def add_model_options(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--model", required=required,
                        help="bundled model name (e.g. llama-2-7b) or path to a local config.json")


#: How argparse reads each kind (sizes, dtypes, names and text stay text; ``Options`` checks them).
_TYPES = {"int": whole_number, "float": float}


class _DefaultStr(str):
    """A default argparse filled in (not given): a framework's preset may replace it."""


class _DefaultInt(int):
    """A default argparse filled in (not given): a framework's preset may replace it."""


class _DefaultFloat(float):
    """A default argparse filled in (not given): a framework's preset may replace it."""


_DEFAULTS = ((str, _DefaultStr), (int, _DefaultInt), (float, _DefaultFloat))


def _marked(value: Any) -> Any:
    """``value`` as a default that prints and compares as itself but is known not to be given."""
    if isinstance(value, bool) or value is None:
        return value
    return next((cls(value) for kind, cls in _DEFAULTS if type(value) is kind), value)


def _is_default(value: Any) -> bool:
    return isinstance(value, (_DefaultStr, _DefaultInt, _DefaultFloat))


def _argument(option: Option, required: bool, help: str | None) -> dict[str, Any]:
    if option.kind == "bool":  # None unless given: a framework's preset applies to switches not given
        return {"action": "store_const", "const": True, "default": None, "help": help or option.help or None}
    spec: dict[str, Any] = {"default": _marked(option.argument_default), "help": help or option.help or None}
    if option.kind in _TYPES:
        spec["type"] = _TYPES[option.kind]
    if option.choices:
        spec["choices"] = option.choices
    if required:
        spec["required"] = True
    return spec


def add_options(parser: argparse.ArgumentParser, command: str, required: Iterable[str] = (),
                helps: Mapping[str, str] | None = None, skip: Iterable[str] = ()) -> None:
    """The options of ``OPTIONS`` that ``command`` takes, in their groups (``required``, ``skip``: field names;
    ``helps``: a command's own wording of some)."""
    groups: dict[str, Any] = {}
    for option in options_for(command):
        if option.name in skip:
            continue
        group = groups.get(option.group) or groups.setdefault(option.group, parser.add_argument_group(option.group))
        group.add_argument(option.flag, **_argument(option, option.name in required, (helps or {}).get(option.name)))
        if option.kind == "bool":  # the opposite spelling, to override a framework's preset: --no-sp, --dropout
            group.add_argument(_opposite(option), dest=option.dest, action="store_const", const=False,
                               help=argparse.SUPPRESS)


def _opposite(option: Option) -> str:
    """The flag that turns a switch the other way: ``--no-sp`` for ``--sp``, ``--dropout`` for ``--no-dropout``."""
    return "--" + option.key if option.negated else "--no-" + option.flag[2:]


def add_output_options(parser: argparse.ArgumentParser, what: str = "write the report to this file",
                       required: bool = False) -> None:
    """``-o FILE`` and ``--force``: every command that writes a file refuses to overwrite one without it."""
    parser.add_argument("-o", "--output", required=required, help=what)
    parser.add_argument("--force", action="store_true", help="overwrite the -o file if it exists")


def _given(args: argparse.Namespace, option: Option) -> bool:
    """Whether the command line set ``option`` to something other than its default."""
    value = getattr(args, option.dest, None)
    return value not in (None, False) and value != option.argument_default


def not_applicable(args: argparse.Namespace, mode: str) -> list[str]:
    """The options given on the command line that do not apply in ``mode`` (as ``--flag`` names)."""
    unused = [o.flag for o in OPTIONS if mode not in o.modes and _given(args, o)]
    if mode == "train" and getattr(args, "pp", 1) == 1:  # with --gpu, micro-batches also size the timed step
        unused += [o.flag for o in OPTIONS if o.name in ("micro_batches", "virtual_stages") and _given(args, o)
                   and not (o.name == "micro_batches" and getattr(args, "gpu", None))]
    return unused


def _refuse_not_applicable(args: argparse.Namespace, mode: str) -> str | None:
    """Refuses the options given that do not apply to ``mode``; returns the warning for pipeline options without
    --pp (written once the options are accepted: a refusal is the one answer, not a warning and then an error)."""
    unused = not_applicable(args, mode)
    pipeline = [x for x in unused if mode == "train" and x in ("--micro-batches", "--virtual-stages")]
    warning = None
    if pipeline:  # a warning, not an error: a micro-batch count also says how a data-parallel step accumulates
        verb = "applies" if len(pipeline) == 1 else "apply"
        warning = (f"memderive: warning: {' and '.join(pipeline)} {verb} to pipeline parallelism (--pp greater "
                   "than 1); without it the per-GPU memory does not depend on it\n")
        unused = [x for x in unused if x not in pipeline]
    if not unused:
        return warning
    why = {"params": "a parameter count depends on the model only; use --mode train or --mode infer",
           "train": "inference only (--mode infer)",
           "infer": "training only (--mode train); inference takes --weight-dtype, --kv-dtype, --tp"}
    verb = "does" if len(unused) == 1 else "do"
    raise CliError(f"{', '.join(unused)} {verb} not apply to --mode {mode}: {why[mode]}")


def _value(option: Option, raw: Any) -> Any:
    """The ``Options`` value of a parsed argument (a size read, a negated switch turned over)."""
    if option.negated:
        return not raw  # --no-dropout: True (dropout off); --dropout: False (on)
    if option.kind == "size":
        return parse_size(raw, option.flag)
    return raw


def option_values(args: argparse.Namespace, skip: Iterable[str] = ("mode",)) -> dict[str, Any]:
    """The ``Options`` fields the command line gives (those its command takes; defaults argparse filled in
    are left out, so that ``Options`` or a framework's preset supplies them)."""
    out = {}
    for option in OPTIONS:
        raw = getattr(args, option.dest, None)
        if option.name not in skip and hasattr(args, option.dest) and raw is not None and not _is_default(raw):
            out[option.name] = _value(option, raw)
    return out


def options_from_args(args: argparse.Namespace, mode: str | None = None, strict: bool = True, **fixed: Any):
    """``Options`` from the command line (``fixed`` fields set by the command, e.g. plan's ``batch=1``); with
    ``strict``, options that do not apply to the mode are refused."""
    mode = mode or args.mode or "params"
    warning = _refuse_not_applicable(args, mode) if strict else None
    options = Options.from_keywords({"mode": mode, **option_values(args), **fixed})
    if warning:
        sys.stderr.write(warning)
    return options


def option_argv(values: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> list[str]:
    """Command-line words that set ``values`` (``Options`` field -> value), in table order; values equal
    to ``defaults`` (the table's, unless given) and unset ones are left out.

    >>> option_argv({"mode": "train", "tp": 8, "dropout": False, "overhead_bytes": 2**31, "lora_targets": ("q", "v")})
    ['--mode', 'train', '--tp', '8', '--no-dropout', '--overhead', '2GiB', '--lora-targets', 'q,v']
    """
    out: list[str] = []
    framework = values.get("framework")
    preset = preset_values(framework, values) if framework in FRAMEWORKS else {}
    base = {**{o.name: o.default for o in OPTIONS}, **(defaults or {}), **preset}
    base.setdefault("profile", None)
    if base["profile"] is None:  # unset: the one the implementation implies (Options resolves it so)
        base["profile"] = implied_profile(values.get("implementation", base.get("implementation")))
    for option in OPTIONS:
        if option.name not in values:
            continue
        value = values[option.name]
        default = base.get(option.name, option.default)
        if value is None or (value == default and option.name != "mode"):
            continue
        if option.kind == "bool":  # set against the default (or the framework's preset), either way
            out.append(option.flag if value != option.negated else _opposite(option))
        else:
            out += [option.flag, value_text(option, value)]
    return out


def command_line(args: argparse.Namespace) -> str:
    """The command as it was run (``memderive`` and its arguments, shell-quoted)."""
    return "memderive " + shlex.join(getattr(args, "argv", []))
