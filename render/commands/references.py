"""``memderive references [KEY]``: the works memderive cites (``derivations.references``), one per line, or one
entry in full; ``--json`` for both."""

from __future__ import annotations

import argparse
import json

from memderive.arguments import emit
from memderive.derivations.references import REFERENCES, reference

FIELDS = ("label", "authors", "title", "year", "venue", "where", "url", "kind")


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("references", help="list the papers, datasheets and source files memderive cites")
    parser.add_argument("key", nargs="?", help="one reference key (e.g. korthikanti-2022): its full entry")
    parser.add_argument("--json", action="store_true", help="JSON: a list of entries, or the one entry")
    parser.set_defaults(func=run)


def listing() -> str:
    """One line per entry: key, label, title and where to find it."""
    width = max(len(k) for k in REFERENCES)
    lines = [f"{ref.key:<{width}}  {ref.label}: {ref.title} ({ref.where})" for ref in REFERENCES.values()]
    return "\n".join([*lines, "", "memderive references KEY prints one entry in full; writeups list what they cite."])


def entry(key: str) -> str:
    """The entry of ``key``, one field per line (fields without a value left out)."""
    data = reference(key).to_json()
    rows = [f"  {name + ':':<8} {data[name]}" for name in FIELDS if data[name] not in ("", None)]
    return "\n".join([key, *rows])


def run(args: argparse.Namespace) -> int:
    if args.json:
        data = reference(args.key).to_json() if args.key else [r.to_json() for r in REFERENCES.values()]
        emit(json.dumps(data, indent=2, ensure_ascii=False), None)
    else:
        emit(entry(args.key) if args.key else listing(), None)
    return 0
