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
from dataclasses import fields, replace
from typing import Any

from memderive.arguments import add_model_options, add_options, add_output_options, check_output, emit, fail, option_values
from memderive.derivations.claims import Claim, check_claim, markers, scan
from memderive.derivations.claims.check import VERDICTS
from memderive.derivations.frameworks import apply_framework
from memderive.derivations.option_table import options_for
from memderive.derivations.options import Options
from memderive.derivations.quantity_table import QUANTITY_NAMES
from memderive.documents.check_report import (check_text, file_lines, latex_document, latex_report, markdown_report,
                                              md_text)
from memderive.documents.latex import tex_escape
from memderive.documents.notes_formats import kind_of, line_map, to_markdown


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("check", help="check a published or teaching formula against the derivation")
    parser.add_argument("--quantity", help="one of " + ", ".join(q.name for q in QUANTITY_NAMES if q.checkable)
                        + " (or an alias derive takes, e.g. activations, kv-cache)")
    parser.add_argument("--claim", help="the formula, Python (4*R*N**2) or LaTeX (sbh(34 + 5as/h), 16\\Psi)")
    parser.add_argument("--file", nargs="+", metavar="FILE",
                        help="notes whose marked formulas are all checked: Markdown, LaTeX (.tex), reStructuredText "
                             "(.rst), HTML or a notebook (.ipynb); several files give a summary line each")
    parser.add_argument("--scan", metavar="FILE", help="list the candidate claims of unmarked notes, with the marker "
                        "each would need (exit 0: it never fails a build)")
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


def _render(result: Any, fmt: str) -> str:
    return {"text": check_text, "md": markdown_report, "latex": latex_report}[fmt](result)


def run(args: argparse.Namespace) -> int:
    check_output(args.output, args.force)  # refused before any work, as every -o is
    if args.scan:
        if args.file or args.claim or args.quantity:
            fail("give --scan FILE alone (it lists candidate claims; --file checks marked ones)")
        return _run_scan(args)
    if args.file:
        if args.claim or args.quantity:
            fail("give either --file or --quantity with --claim, not both")
        return _run_file(args)
    if not (args.quantity and args.claim):
        fail("give --quantity and --claim (or --file NOTES.md)")
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


def _check_file(path: str, defaults: dict[str, Any], verdicts: dict[str, tuple[Any, str]]) -> list[tuple[Any, Any, str]]:
    """Every marked claim of one notes file, with its result or why it could not be checked; ``verdicts``
    holds the claims already checked (a claim repeated word for word is checked once)."""
    found = []
    text, lines = _markdown(path)
    for marked in markers.find_claims(text, defaults, markers.MAX_CLAIMS):
        marked = replace(marked, line=_in_file(marked.line, lines))
        if marked.claim is None:
            found.append((marked, None, marked.error))
            continue
        key = repr(marked.claim)
        if key not in verdicts:
            verdicts[key] = _verdict(check_claim, marked.claim)
        found.append((marked, *verdicts[key]))
    return found


def _markdown(path: str) -> tuple[str, list[int] | None]:
    """A notes file as the Markdown the marker reader takes (``notes_formats``) and the file's line of each of its
    lines (None: the same lines), its path named in any error."""
    text = read_notes(path)
    try:
        return to_markdown(text, kind_of(path)), line_map(text, kind_of(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _in_file(line: int, lines: list[int] | None) -> int:
    return lines[line - 1] if lines and 0 < line <= len(lines) else line


def summary_line(path: str, found: list[tuple[Any, Any, str]]) -> str:
    """One line per file: how many claims, how many hold, do not, or could not be read.

    >>> print(summary_line("notes.md", []))
    notes.md: no marked claims (see README, 'Checking formulas')
    """
    if not found:
        return f"{path}: no marked claims (see README, 'Checking formulas')"
    holds = sum(1 for _, r, _ in found if r is not None and r.holds)
    errors = sum(1 for _, r, _ in found if r is None)
    fails = len(found) - holds - errors
    parts = [f"{holds} hold{'s' * (holds == 1)}", f"{fails} {'does' if fails == 1 else 'do'} not hold"]
    parts += [f"{errors} unreadable"] if errors else []
    return f"{path}: {len(found)} claim{'s' * (len(found) != 1)}: " + ", ".join(parts)


def _run_file(args: argparse.Namespace) -> int:
    defaults = _defaults(args)
    verdicts: dict[str, tuple[Any, str]] = {}
    files = [(path, _check_file(path, defaults, verdicts)) for path in args.file]
    every = [(path, *entry) for path, found in files for entry in found]
    if args.json:
        text = json.dumps([{"file": path, "line": m.line, "formula": m.formula,
                            **({"error": e} if r is None else r.to_json())} for path, m, r, e in every], indent=2)
    elif args.format == "latex":
        title = f"Claims in {', '.join(args.file)}"
        text = latex_document([(f"{path}:{m.line}", r, e) for path, m, r, e in every], title).rstrip("\n")
    elif args.format != "text":
        text = "\n\n".join(_section(path, m.line, _render(r, args.format) if r else _error(e, args.format))
                           for path, m, r, e in every)
    else:
        text = "\n".join(line for path, found in files
                         for line in [*file_lines(path, found), summary_line(path, found)])
    emit(text, args.output, args.force)
    if any(r is None for _, _, r, _ in every):
        return 2
    return 0 if all(r.holds for _, _, r, _ in every) else 1


def _run_scan(args: argparse.Namespace) -> int:
    """``check --scan FILE``: the candidate claims of unmarked notes and the marker each needs; exit 0."""
    kind = kind_of(args.scan)
    text, lines = _markdown(args.scan)
    found = [replace(c, line=_in_file(c.line, lines)) for c in scan.scan_claims(text, read=True)]
    if args.json:
        text = json.dumps([{"file": args.scan, "line": c.line, "formula": c.formula, "quantity": c.quantity,
                            "model": c.model, "sizes": c.sizes, "readable": not c.reading, "reading": c.reading,
                            "marker": scan.marker_text(c, kind)} for c in found], indent=2)
    else:
        lines = []
        for c in found:
            sizes = "".join(f", {k}={v:,}" if isinstance(v, int) else f", {k}={v}" for k, v in c.sizes.items())
            model = c.model or "no model named (the default, gpt3-175b)"
            lines.append(f"{args.scan}:{c.line}: would check {c.quantity} ({model}{sizes}): {c.formula}")
            if c.reading:
                lines.append(f"    unsure: the checker cannot read it as written ({c.reading})")
            lines.append(f"    add before it: {scan.marker_text(c, kind)}")
        readable = sum(1 for c in found if not c.reading)
        lines.append(f"{args.scan}: {len(found)} candidate claim{'s' * (len(found) != 1)}, {readable} readable as "
                     "written (a scan checks nothing: exit 0)")
        text = "\n".join(lines)
    emit(text, args.output, args.force)
    return 0
