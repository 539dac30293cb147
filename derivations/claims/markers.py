"""Claims marked in a Markdown document: an HTML comment before a formula.

::

    <!-- memderive: quantity=activations.per_layer symbols="R=l, N=a" flash -->
    $$M = sbh\\left(34 + \\frac{5as}{h}\\right)$$

A marker applies to the first formula after it, on the same line or the next lines with no blank
line in between: a ``$$...$$`` or ``\\[...\\]`` block, inline ``$...$``, or inline code. A
``<!-- memderive-defaults: model=llama-2-7b -->`` comment sets keys for every later marker.
Markers inside fenced code blocks are examples, not claims, and are skipped.

Keys: ``quantity`` (required), ``symbols``, ``model``, ``units``, ``syntax``, ``expect`` and every
option of ``check`` but ``--mode`` (the quantity decides it), by its flag's name as
``derivations.option_table`` declares it: ``tp=8``, ``kv-block=16``, ``overhead=2GiB``,
``attention=flash``, ``gpu=h100-sxm``, ...; a switch (``sp flash dropout offload dora ...``) as a bare
key is true, ``no-flash`` or ``flash=false`` false. Values with spaces or commas go in quotes
(``lora-targets="q_proj,v_proj"``).

>>> found = find_claims('<!-- memderive: quantity=params.total -->\\n$N \\\\approx 12lh^2$')
>>> found[0].line, found[0].claim.formula
(2, 'N \\\\approx 12lh^2')
"""

from __future__ import annotations

import bisect
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memderive.derivations.claims.check import Claim
from memderive.derivations.option_table import Option, options_for, value_from_text

__all__ = ["Marked", "find_claims", "marker_fields", "marker_comments", "mask_fences", "LineIndex", "FORMULA", "KEYS",
           "MAX_CLAIMS"]

_MARKER = re.compile(r"<!--\s*memderive(-defaults)?\s*:")
_BLANK = re.compile(r"\n[ \t]*\n")
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.DOTALL | re.MULTILINE)
FORMULA = re.compile(r"\$\$(?P<block>.+?)\$\$|\\\[(?P<display>.+?)\\\]|(?<![\\$])\$(?P<inline>[^$\n]+?)\$"
                      r"|`(?P<code>[^`\n]+)`", re.DOTALL)
#: Inline formulas and code alone (``FORMULA``'s last two branches): no lazy scan across lines.
_INLINE = re.compile(r"(?<![\\$])\$[^$\n]+?\$|`[^`\n]+`")
#: The most markers ``check --file`` reads in one document (each distinct claim is checked on its own, ~0.1 s).
MAX_CLAIMS = 500
_CLAIM_KEYS = ("quantity", "symbols", "model", "units", "syntax", "expect")
#: The options a marker sets: those of ``check`` but the mode (a claim's quantity decides it).
_OPTIONS = {o.key: o for o in options_for("check") if o.name != "mode"}
KEYS = _CLAIM_KEYS + tuple(_OPTIONS)


@dataclass(frozen=True, slots=True)
class Marked:
    """A claim found at ``line`` (1-based, where its formula starts), or why it cannot be read."""

    line: int
    formula: str
    claim: Claim | None = None
    error: str = ""


def _option(key: str) -> Option | None:
    """The option a key names: its flag's name, or its ``Options`` field (``overhead_bytes``)."""
    return _OPTIONS.get(key.replace("_", "-")) or next((o for o in _OPTIONS.values() if o.name == key), None)


def marker_fields(body: str) -> dict[str, Any]:
    """The ``key=value`` pairs of one marker, typed; unknown keys are an error naming the known ones.

    >>> marker_fields('quantity=kv_cache.total tp=8 no-dropout symbols="L=l, H=h"')
    {'quantity': 'kv_cache.total', 'tp': 8, 'dropout': False, 'symbols': 'L=l, H=h'}
    """
    fields: dict[str, Any] = {}
    for word in shlex.split(body):
        key, sep, value = word.partition("=")
        key = key.strip().replace("-", "_")
        if not sep:
            switch = _option(key[3:]) if key.startswith("no_") else None
            key, value = (key[3:], "false") if switch is not None and switch.kind == "bool" else (key, "true")
            if getattr(_option(key), "kind", None) != "bool":
                raise ValueError(f"{word!r} needs a value ({key}=...)")
        option = _option(key)
        if option is not None:
            fields[option.name] = value_from_text(option, value)
        elif key in _CLAIM_KEYS:
            fields[key] = value
        else:
            raise ValueError(f"unknown key {key!r}; keys: {', '.join(KEYS)}")
    return fields


def _claim(fields: Mapping[str, Any], formula: str) -> Claim:
    if "quantity" not in fields:
        raise ValueError("the marker needs quantity=... (e.g. quantity=activations.per_layer)")
    options = {k: v for k, v in fields.items() if k not in _CLAIM_KEYS}
    return Claim(fields["quantity"], formula, fields.get("symbols", ""), fields.get("model"), options,
                 fields.get("units"), fields.get("syntax", "auto"), fields.get("expect"))


def _merge(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``more`` over ``base``; symbol mappings are joined (later names win)."""
    out = {**base, **more}
    if base.get("symbols") and more.get("symbols"):
        out["symbols"] = f"{base['symbols']},{more['symbols']}"
    return out


def mask_fences(text: str) -> str:
    """Fenced code blocks blanked out (newlines kept, so line numbers stay right)."""
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


@dataclass(frozen=True, slots=True)
class _Marker:
    start: int
    end: int
    defaults: bool
    body: str


def marker_comments(text: str) -> list[_Marker]:
    """The ``memderive`` comments, in one pass: an unclosed ``<!--`` ends the search (HTML reads the
    rest of the document as that comment), so nothing is scanned twice."""
    found, i = [], 0
    while (start := text.find("<!--", i)) >= 0:
        end = text.find("-->", start + 4)
        if end < 0:
            break
        head = _MARKER.match(text, start, end)
        if head:
            found.append(_Marker(start, end + 3, bool(head.group(1)), text[head.end():end]))
        i = end + 3
    return found


def _formula_after(text: str, start: int, stop: int) -> re.Match | None:
    """The first formula opening before the next blank line, found without a step per character: a ``$$``
    or ``\\[`` block opens at its first occurrence if its closing sign follows (then the nearest one closes
    it), inline ``$...$`` and code by one regex search each (a failed try ends at the line's end or the next
    ``$`` or backtick; a run of backticks is skipped by the engine), so 3 MB of backticks is one scan."""
    blank = _BLANK.search(text, start, stop)
    limit = blank.start() if blank else stop
    openings = []
    for sign, close in (("$$", "$$"), ("\\[", "\\]")):
        j = text.find(sign, start, limit)
        if j >= 0 and text.rfind(close, j + 2, stop) > j + 2:
            openings.append(j)
    inline = _INLINE.search(text, start, stop)
    if inline and inline.start() < limit:
        openings.append(inline.start())
    return FORMULA.match(text, min(openings), stop) if openings else None


class LineIndex:
    """1-based line numbers of offsets, by bisection over the newline offsets (not a count per marker)."""

    def __init__(self, text: str) -> None:
        self.newlines = [i for i, ch in enumerate(text) if ch == "\n"]

    def __call__(self, offset: int) -> int:
        return bisect.bisect_left(self.newlines, offset) + 1


def find_claims(text: str, defaults: Mapping[str, Any] | None = None, limit: int | None = None) -> list[Marked]:
    """Every marked claim of a Markdown document, in order.

    Args:
        text: the document.
        defaults: keys that apply to every marker (a marker's own keys win), e.g. from the CLI.
        limit: the most markers read (``check --file``: ``MAX_CLAIMS``); more is a ``ValueError`` at once.
    """
    masked = mask_fences(text)
    markers = marker_comments(masked)
    if limit is not None and len(markers) > limit:
        raise ValueError(f"{len(markers):,} memderive markers; the limit is {limit:,} per document: split the "
                         "file")
    line_of = LineIndex(masked)
    current = dict(defaults or {})
    found: list[Marked] = []
    for i, marker in enumerate(markers):
        stop = markers[i + 1].start if i + 1 < len(markers) else len(text)
        line = line_of(marker.start)
        try:
            fields = marker_fields(marker.body)
        except ValueError as exc:
            found.append(Marked(line, "", error=f"marker: {exc}"))
            continue
        if marker.defaults:
            current = _merge(current, fields)
            continue
        match = _formula_after(masked, marker.end, stop)
        if match is None:
            found.append(Marked(line, "", error="marker without a formula right after it ($$...$$, $...$ or `...`)"))
            continue
        formula = next(g for g in match.groups() if g is not None).strip()
        line = line_of(match.start())
        try:
            found.append(Marked(line, formula, _claim(_merge(current, fields), formula)))
        except ValueError as exc:
            found.append(Marked(line, formula, error=f"marker: {exc}"))
    return found
