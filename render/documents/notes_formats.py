"""Notes in LaTeX, reStructuredText, HTML and Jupyter notebooks, read as ``markers`` reads Markdown.

Each reader rewrites a document into the Markdown that ``markers.find_claims`` reads, line for line
(every newline kept, so a claim's line is its line in the original file):

* LaTeX (articles, beamer slides): a marker is a comment, ``% memderive: quantity=...`` (or
  ``% memderive-defaults: ...``); the claim is the first math after it: ``$...$``, ``\\(...\\)``,
  ``\\[...\\]``, ``$$...$$`` or an ``equation``/``align``/``gather``/``multline`` environment (starred or
  not; ``&``, ``\\\\``, ``\\label`` and ``\\nonumber`` dropped, so an ``align`` is a chain). Other comments,
  ``verbatim``/``lstlisting``/``minted`` blocks and ``\\verb`` are not read; backticks are quotes, not code.
* reStructuredText: a marker is a comment, ``.. memderive: ...``; the claim is the first formula of the
  next paragraph (the blank line a comment needs before it is skipped): a ``.. math::`` block, ``:math:`...```
  or an inline literal.
* HTML: markers are the Markdown ones (``<!-- memderive: ... -->``); MathJax's ``\\(...\\)``, ``\\[...\\]``,
  ``$$...$$``, ``<script type="math/tex">`` and ``<code>`` hold claims; other tags are not read and entities
  (``&lt;``) are decoded.
* Jupyter notebooks: the Markdown cells, one after another; a claim's line is its line in the ``.ipynb`` file
  (``line_map``), or in the cells' text for a notebook not written one source line per JSON line.

>>> md = to_markdown("% memderive: quantity=params.total\\n\\\\begin{equation}N = 12lh^2\\\\end{equation}", "tex")
>>> md.splitlines()[1]
'$$N = 12lh^2$$'
"""

from __future__ import annotations

import html
import json
import re

__all__ = ["KINDS", "kind_of", "to_markdown", "line_map"]

#: File endings and the reader each takes (anything else is read as Markdown).
KINDS = {".md": "md", ".markdown": "md", ".qmd": "md", ".rmd": "md", ".mdx": "md", ".tex": "tex", ".ltx": "tex",
         ".rst": "rst", ".html": "html", ".htm": "html", ".ipynb": "ipynb"}


def kind_of(path: str) -> str:
    """The reader for a file, by its ending: ``md``, ``tex``, ``rst``, ``html`` or ``ipynb``."""
    lower = path.lower()
    return next((kind for end, kind in KINDS.items() if lower.endswith(end)), "md")


def _blank(text: str) -> str:
    """``text`` with everything but newlines made spaces (line numbers stay right)."""
    return re.sub(r"[^\n]", " ", text)


# --- LaTeX ------------------------------------------------------------------------------------------------------------

_TEX_VERBATIM = re.compile(r"\\begin\{(verbatim\*?|lstlisting|minted|comment|Verbatim)\}.*?\\end\{\1\}", re.DOTALL)
_TEX_VERB = re.compile(r"\\verb\*?([^a-zA-Z\s*]).*?\1")
_TEX_COMMENT = re.compile(r"(?<!\\)%(?P<body>[^\n]*)")
_TEX_MARKER = re.compile(r"\s*memderive(?P<defaults>-defaults)?\s*:(?P<body>.*)")
_TEX_MATH_ENVS = r"equation|align|gather|multline|flalign|eqnarray|displaymath|math|dmath"
_TEX_ENV = re.compile(rf"\\begin\{{(?P<env>(?:{_TEX_MATH_ENVS})\*?)\}}(?:\{{[^}}\n]*\}})?(?P<body>.*?)\\end\{{(?P=env)\}}",
                      re.DOTALL)
_TEX_INLINE = re.compile(r"\\\((?P<body>.*?)\\\)", re.DOTALL)
_TEX_DROP = re.compile(r"\\(?:label|tag\*?|eqref|ref)\{[^}\n]*\}|\\(?:nonumber|notag|displaystyle|quad|qquad)\b"
                       r"|\\(?:begin|end)\{(?:aligned|split|gathered|alignedat)\*?\}(?:\{\d+\})?|\\pause\b")


def _tex_math(body: str) -> str:
    """An environment's math as one formula: ``&`` and labels dropped, ``\\\\`` a space, trailing
    punctuation (the sentence's) gone."""
    body = _TEX_DROP.sub(" ", body)
    body = re.sub(r"(?<!\\)&", " ", body).replace("\\\\", "  ")
    kept = body.rstrip()
    return re.sub(r"[.,;]$", "", kept) + "\n" * body[len(kept):].count("\n")  # the lines stay where they were


def _tex(text: str) -> str:
    text = _TEX_VERBATIM.sub(lambda m: _blank(m.group()), text)
    text = _TEX_VERB.sub(lambda m: _blank(m.group()), text)

    def comment(m: re.Match) -> str:
        marker = _TEX_MARKER.match(m.group("body"))
        if marker is None:
            return _blank(m.group())
        return f"<!-- memderive{marker.group('defaults') or ''}: {marker.group('body').replace('-->', '')} -->"

    text = _TEX_COMMENT.sub(comment, text)
    text = text.replace("`", "'")  # ``quotes'' are not code spans
    text = _TEX_ENV.sub(lambda m: "$$" + _tex_math(m.group("body")) + "$$", text)
    text = re.sub(r"\$\$(.+?)\$\$", lambda m: "$$" + _tex_math(m.group(1)) + "$$", text, flags=re.DOTALL)
    text = re.sub(r"\\\[(.+?)\\\]", lambda m: "\\[" + _tex_math(m.group(1)) + "\\]", text, flags=re.DOTALL)
    return _TEX_INLINE.sub(lambda m: "$" + m.group("body") + "$", text)


# --- reStructuredText -------------------------------------------------------------------------------------------------

_RST_MARKER = re.compile(r"^\.\.[ \t]+memderive(?P<defaults>-defaults)?[ \t]*:(?P<body>.*)$")
_RST_MATH = re.compile(r"^(?P<indent>[ \t]*)\.\.[ \t]+math::[ \t]*(?P<rest>.*)$")
#: a stand-in for a blank line the reader must not stop at (a Markdown blank line ends a marker's reach)
_KEEP = "\u00a0"


def _rst(text: str) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _RST_MARKER.match(line)
        math = _RST_MATH.match(line)
        if marker:
            out.append(f"<!-- memderive{marker.group('defaults') or ''}: {marker.group('body').replace('-->', '')} -->")
            i += 1
            while i < len(lines) and not lines[i].strip():  # the blank line after a comment
                out.append(_KEEP)
                i += 1
            continue
        if math:
            indent = len(math.group("indent"))
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1  # the blank lines after the block are the next paragraph's
            # options (:label: x) are not the formula; the first paragraph of the rest is (on its first line)
            rows = [(k, lines[k]) for k in range(i + 1, j) if not re.match(r"^\s*:\w[\w-]*:", lines[k])]
            first = math.group("rest").strip()
            head = next((k for k, row in rows if row.strip()), None)
            body = []
            for k, row in rows:
                if k >= (head if head is not None else j) and not row.strip():
                    break
                if head is not None and k >= head:
                    body.append(row.strip())
            out.append(f"$${first}$$" if first else _KEEP)
            for k in range(i + 1, j):
                out.append(f"$${' '.join(body)}$$" if k == head and not first else ("" if head and k > head else _KEEP))
            i = j
            continue
        line = re.sub(r":math:`([^`]+)`", lambda m: "$" + m.group(1) + "$", line)
        out.append(re.sub(r"``([^`]+)``", lambda m: "`" + m.group(1) + "`", line))
        i += 1
    return "\n".join(out)


# --- HTML -------------------------------------------------------------------------------------------------------------

_HTML_SKIP = re.compile(r"<(style|script)(?![^>]*math/tex)[^>]*>.*?</\1\s*>", re.DOTALL | re.IGNORECASE)
_HTML_MATHTEX = re.compile(r"<script[^>]*math/tex[^>]*>(?P<body>.*?)</script\s*>", re.DOTALL | re.IGNORECASE)
_HTML_CODE = re.compile(r"<code[^>]*>(?P<body>.*?)</code\s*>", re.DOTALL | re.IGNORECASE)
_HTML_TAG = re.compile(r"<(?!!--)/?[a-zA-Z][^>]*>")


def _html(text: str) -> str:
    text = _HTML_SKIP.sub(lambda m: _blank(m.group()), text)
    text = _HTML_MATHTEX.sub(lambda m: "$$" + m.group("body") + "$$", text)
    text = text.replace("`", "'")
    text = _HTML_CODE.sub(lambda m: "`" + _HTML_TAG.sub(" ", m.group("body")).replace("\n", " ") + "`"
                          + "\n" * m.group("body").count("\n"), text)
    text = _HTML_TAG.sub(lambda m: _blank(m.group()), text)
    text = _TEX_INLINE.sub(lambda m: "$" + m.group("body") + "$", text)
    # entities decoded outside the markers' comments (a comment's --&gt; is not its end)
    parts = re.split(r"(<!--.*?-->)", text, flags=re.DOTALL)
    return "".join(p if p.startswith("<!--") else html.unescape(p) for p in parts)


# --- notebooks --------------------------------------------------------------------------------------------------------

def _ipynb(text: str) -> str:
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError):
        raise ValueError("not a Jupyter notebook (its JSON does not parse)") from None
    sources = []
    for cell in cells:
        if isinstance(cell, dict) and cell.get("cell_type") == "markdown":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else str(source))
    return "\n\n".join(sources)


def line_map(text: str, kind: str) -> list[int] | None:
    """For a notebook, the line of the ``.ipynb`` file each line of its Markdown (``to_markdown``) comes from
    (nbformat writes each source line as its own JSON string); None for the other kinds, or a notebook
    written otherwise (its lines then count in the Markdown cells' text)."""
    if kind != "ipynb":
        return None
    cells = [c for c in json.loads(text).get("cells", []) if isinstance(c, dict) and c.get("cell_type") == "markdown"]
    starts, kind_now = [], ""
    for number, line in enumerate(text.split("\n"), 1):
        if (match := re.match(r'\s*"cell_type":\s*"(\w+)"', line)) is not None:
            kind_now = match.group(1)
        elif kind_now == "markdown" and re.match(r'\s*"source":\s*\[\s*$', line):
            starts.append(number + 1)
            kind_now = ""
    if len(starts) != len(cells):
        return None
    out: list[int] = []
    for cell, start in zip(cells, starts):
        source = cell.get("source", "")
        count = len(("".join(source) if isinstance(source, list) else str(source)).split("\n"))
        if out:
            out.append(out[-1])  # the blank line between cells
        out += [start + i for i in range(count)]
    return out


def to_markdown(text: str, kind: str) -> str:
    """The document as the Markdown ``find_claims`` reads (see the module docstring)."""
    return {"md": lambda t: t, "tex": _tex, "rst": _rst, "html": _html, "ipynb": _ipynb}[kind](text)
