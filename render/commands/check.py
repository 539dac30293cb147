"""``memderive check``: is a formula from teaching material right?

One claim::

    memderive check --quantity activations.per_layer --claim 'sbh(34 + 5as/h)' [--flash] [--json]

or every marked claim of a Markdown file (syntax in ``derivations.claims.markers``)::

    memderive check --file NOTES.md

Exit code 0 when every claim holds, 1 when some do not, 2 on bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from memderive.arguments import add_model_options, add_options, add_output_options, check_output, emit, fail, option_values
from memderive.derivations.quantity_table import QUANTITY_NAMES
from memderive.derivations.frameworks import apply_framework
from memderive.derivations.option_table import options_for
from memderive.documents.check_report import (check_text, file_lines, latex_document, latex_report, markdown_report,
                                              md_text)
from memderive.derivations.options import Options
from memderive.documents.latex import tex_escape

#: kept here (not imported) so that registering the command stays cheap
VERDICTS = ("exact", "rounded", "conditional", "leading-order", "different")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check", help="check a published or teaching formula against the derivation")
    parser.add_argument("--quantity", help="one of " + ", ".join(q.name for q in QUANTITY_NAMES if q.checkable)
                        + " (or an alias derive takes, e.g. activations, kv-cache)")
    parser.add_argument("--claim", help="the formula, Python (4*R*N**2) or LaTeX (sbh(34 + 5as/h), 16\\Psi)")
    parser.add_argument("--file", help="a Markdown file whose marked formulas are all checked")
    parser.add_argument("--symbols", default="", help="the author's symbols onto ours, e.g. R=l,N=a,D=h/a")
    parser.add_argument("--units", choices=("bytes", "elements", "FLOPs", "flops"), help="unit of the claim (default: the quantity's)")
    parser.add_argument("--syntax", choices=("auto", "python", "latex"), default="auto")
    parser.add_argument("--expect", choices=VERDICTS, help="the verdict the author claims (e.g. leading-order)")
    add_model_options(parser, required=False)
    add_options(parser, "check")
    parser.add_argument("--json", action="store_true", help="JSON: verdict, difference, counterexample, ...")
    parser.add_argument("--format", choices=("text", "md", "latex"), default="text")
    add_output_options(parser, "write the report to this file (text, JSON, Markdown or LaTeX, as asked)")
    parser.set_defaults(func=run)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The strategy options given on the command line (the quantity decides the mode): every
    ``Options`` field but ``mode`` that is set (a test holds this to ``Options``); not
    ``options_from_args``, which builds and checks an ``Options`` in one mode while a claim's
    quantity decides its own (a parameter count ignores ``--zero``). A ``--framework``'s preset fills the
    options not given; the others not given take the table's defaults (those without one stay unset)."""
    defaults = {o.name: o.default for o in options_for("check") if o.name != "mode" and o.argument_default is not None}
    return {**defaults, **apply_framework(option_values(args))}


def _claims() -> tuple[Any, Any, Any]:
    """``Claim``, ``check_claim`` and the notes' markers (``derivations.claims``), imported when a claim is checked."""
    # lazy: the checker's modules build SymPy's symbols as they are imported (~0.4 s); registering this command,
    # as ``memderive --help`` does for every command, stays without them
    from memderive.derivations.claims import Claim, check_claim, markers

    return Claim, check_claim, markers


def _render(result: Any, fmt: str) -> str:
    return {"text": check_text, "md": markdown_report, "latex": latex_report}[fmt](result)


def run(args: argparse.Namespace) -> int:
    check_output(args.output, args.force)  # refused before any work, as every -o is
    if args.file:
        if args.claim or args.quantity:
            fail("give either --file or --quantity with --claim, not both")
        return _run_file(args)
    if not (args.quantity and args.claim):
        fail("give --quantity and --claim (or --file NOTES.md)")

    Claim, check_claim, _ = _claims()
    result = check_claim(Claim(args.quantity, args.claim, args.symbols, args.model, _options(args), args.units,
                               args.syntax, args.expect))
    if args.json:
        text = json.dumps(result.to_json(), indent=2)
    elif args.format == "latex":
        text = latex_document([("", result, "")], f"{result.spec.name}: {args.claim}").rstrip("\n")
    else:
        text = _render(result, args.format)
    emit(text, args.output, args.force)
    return 0 if result.holds else 1


def _defaults(args: argparse.Namespace) -> dict[str, Any]:
    """Command-line keys that apply to every marker of a file (a marker's own keys win): the
    claim keys given and the options that differ from ``Options``' defaults."""
    from dataclasses import fields

    keys = {"symbols": args.symbols or None, "model": args.model, "units": args.units, "expect": args.expect}
    defaults = {f.name: f.default for f in fields(Options)}
    # an explicit --new-tokens 0 pins n = 0 (a prompt-only cache): kept although 0 is the default
    changed = {k: v for k, v in _options(args).items() if defaults.get(k) != v or k == "new_tokens"}
    return {**{k: v for k, v in keys.items() if v is not None}, **changed}


#: The largest notes file ``check --file`` reads (a limit, so that ``/dev/zero`` is an error, not a hang).
MAX_FILE_BYTES = 4_000_000


def read_notes(path: str) -> str:
    """The text of a notes file, at most ``MAX_FILE_BYTES``; UTF-8."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: more than {MAX_FILE_BYTES:,} bytes, the limit of check --file; split the file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start:,})") from None


def _section(path: str, line: int, body: str) -> str:
    """A claim's report headed by a comment naming where it is (``--`` cut so the name cannot close it)."""
    return f"<!-- {path.replace('--', '- -')}:{line} -->\n{body}"


def _error(message: str, fmt: str) -> str:
    return f"error: {md_text(message) if fmt == 'md' else tex_escape(message)}"


def _verdict(check_claim: Any, claim: Any) -> tuple[Any, str]:
    """A claim's result, or why it could not be checked (one claim's failure never aborts the others')."""
    try:
        return check_claim(claim), ""
    except ValueError as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 -- reported on that claim, in the file's report
        return None, f"internal error on this claim ({type(exc).__name__}: {exc}); please report it"


def _run_file(args: argparse.Namespace) -> int:
    text = read_notes(args.file)
    found = []
    verdicts: dict[str, tuple[Any, str]] = {}  # a claim repeated word for word is checked once
    _, check_claim, markers = _claims()
    for marked in markers.find_claims(text, _defaults(args), markers.MAX_CLAIMS):
        if marked.claim is None:
            found.append((marked, None, marked.error))
            continue
        key = repr(marked.claim)
        if key not in verdicts:
            verdicts[key] = _verdict(check_claim, marked.claim)
        found.append((marked, *verdicts[key]))
    if args.json:
        text = json.dumps([{"line": m.line, "formula": m.formula, **({"error": e} if r is None else r.to_json())}
                           for m, r, e in found], indent=2)
    elif args.format == "latex":
        text = latex_document([(f"{args.file}:{m.line}", r, e) for m, r, e in found],
                              f"Claims in {args.file}").rstrip("\n")
    elif args.format != "text":
        text = "\n\n".join(_section(args.file, m.line, _render(r, args.format) if r else _error(e, args.format))
                           for m, r, e in found)
    else:
        text = "\n".join(file_lines(args.file, found)) if found else f"{args.file}: no marked claims " \
            "(see README, 'Checking formulas')"
    emit(text, args.output, args.force)
    if any(r is None for _, r, _ in found):
        return 2
    return 0 if all(r.holds for _, r, _ in found) else 1
