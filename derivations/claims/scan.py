"""Candidate claims in notes without markers (``memderive check --scan``): where a formula or a figure sits
near a quantity's words (KV cache, activations, parameters, FLOPs, optimizer states), what would be checked,
with which model and sizes, and the marker that says so.

The guess is a guess: the quantity comes from the words of the formula's line and the two lines before it,
the model from the nearest bundled model named before it (else the first named anywhere), the sizes from
"batch 8", "sequence length 4,096", "32K tokens" nearby. Each candidate is parsed as ``check`` would read it,
so a formula the reader cannot take is said before a marker is added. Nothing is checked: a scan never fails
a build.

>>> found = scan_claims("The KV cache of LLaMA-2-7B per token:\\n$2 \\\\cdot 2 \\\\cdot l \\\\cdot h$\\n")
>>> found[0].quantity, found[0].model, found[0].line
('kv_cache.per_token', 'llama-2-7b', 2)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from memderive.derivations.claims.check import check
from memderive.derivations.claims.markers import FORMULA, LineIndex, marker_comments, mask_fences
from memderive.derivations.models.presets import preset_names

__all__ = ["Candidate", "scan_claims", "marker_text"]

#: Words naming a quantity, tried in order (the first that matches wins); each with the quantity it names
#: and, where a qualifier nearby narrows it, the narrower one.
_WORDS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    (r"kv[- ]?cache|key[- ]value cache|\bkv\b", "kv_cache.total",
     ((r"per[- ]token|per token|/\s*token|each token|one token", "kv_cache.per_token"),)),
    (r"activation", "activations.total", ((r"per[- ]layer|each layer|one layer|a layer", "activations.per_layer"),)),
    (r"flop", "flops.step", ((r"per[- ]token|/\s*token", "flops.per_token"), (r"forward", "flops.forward"),
                             (r"attention", "flops.attention"))),
    (r"optimi[sz]er states?|model states?|bytes per param|adam", "model_states.total", ()),
    (r"trainable|lora|adapter", "params.trainable", ()),
    (r"param|weights", "params.total", ((r"per[- ]layer|each layer|one layer|a layer", "params.per_layer"),)),
)
#: A figure in prose: a number with a unit of memory, a count or FLOPs (``12.9 GB``, ``6.7B parameters``).
_FIGURE = re.compile(r"(?<![\w.$-])\d[\d,_]*(?:\.\d+)?\s?(?:[kKMGTP]i?B|[Bb]ytes|[KMBT]\b|billion|million|"
                     r"[GTPE]?FLOPs?|%)(?![\w])(?!\s*(?:tokens?|context|sequences?|seq|layers?|heads?|GPUs?|steps?|"
                     r"samples?|experts?)\b)")
_BATCH = re.compile(r"batch(?:[- ]size)?\s*(?:of|=|:)?\s*(\d[\d,]*)", re.IGNORECASE)
_SEQ = re.compile(r"(?:sequence(?:[- ]length)?|context(?:[- ]length)?|seq(?:_len)?|prompt)\s*(?:of|=|:)?\s*"
                  r"(\d[\d,]*)\s*([kK])?|(\d[\d,]*)\s*([kK])?[- ]tokens?", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Candidate:
    """A formula or figure that looks like a claim: where, what it would be checked as, and how it reads."""

    line: int
    formula: str
    quantity: str
    model: str | None
    sizes: dict[str, int | str] = field(default_factory=dict)
    reading: str = ""  # "" when it parses; else why not


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _model_mentions(text: str) -> list[tuple[int, int, str]]:
    """(start, end, bundled model) for each mention: ``LLaMA-2-7B``, ``Llama 2 7B`` and ``GPT-3 175B`` all count."""
    names = sorted(preset_names(), key=len, reverse=True)
    found = []
    for name in names:
        parts = [re.escape(p) for p in re.split(r"[^a-z0-9]+|(?<=[a-z])(?=\d)", name) if p]
        pattern = re.compile(r"(?<![a-z0-9])" + r"[\s\-_.]?".join(parts) + r"(?![a-z0-9])", re.IGNORECASE)
        found += [(m.start(), m.end(), name) for m in pattern.finditer(text)]
    # a longer name at an offset wins over a shorter one there (llama-2-70b over llama-2-7b cannot overlap)
    return sorted(found)


def _quantity(context: str, near: str) -> str | None:
    """The quantity the paragraph's words name; a qualifier (per token, per layer) counts in ``near``, the
    words between the previous candidate and this one (and the rest of its line) only."""
    lower, close = context.lower(), near.lower()
    for words, name, narrower in _WORDS:
        if re.search(words, lower):
            return next((q for qualifier, q in narrower if re.search(qualifier, close)), name)
    return None


def _number(digits: str, k: str | None) -> int:
    return int(digits.replace(",", "")) * (1024 if k else 1)


#: An element type named near a claim, and the option it sets for each kind of quantity.
_DTYPE = re.compile(r"(?<![A-Za-z0-9])(fp32|fp16|bf16|fp8|int8|int4|nf4|float16|bfloat16|float32)(?![A-Za-z0-9])",
                    re.IGNORECASE)
_DTYPE_OPTION = {"kv_cache": "kv-dtype", "weights": "weight-dtype", "infer": "weight-dtype",
                 "activations": "dtype", "model_states": "dtype"}
_RANK = re.compile(r"(?:\br\s*=\s*|rank(?:\s+of|\s*=|\s*:)?\s*)(\d+)", re.IGNORECASE)


def _targets(context: str) -> str:
    """The LoRA targets a sentence names, as PEFT names them ("" when it names none)."""
    if re.search(r"all[- ]linear|every linear|all (?:the )?linear", context, re.IGNORECASE):
        return "all-linear"
    named = re.findall(r"\b[a-z]+_proj\b", context)
    if named:
        return ",".join(dict.fromkeys(named))
    if re.search(r"\bq,\s*k,\s*v,?\s*(?:and\s*)?o\b", context):
        return "q_proj,k_proj,v_proj,o_proj"
    if re.search(r"\bq\s*(?:and|,)\s*v\b", context):
        return "q_proj,v_proj"
    return ""


def _sizes(context: str, quantity: str = "") -> dict[str, int | str]:
    """Sizes and settings named near a claim: batch, sequence length, the element type, the LoRA rank."""
    sizes: dict[str, int | str] = {}
    option = _DTYPE_OPTION.get(quantity.split(".")[0])
    if option and (m := _DTYPE.search(context)):
        sizes[option] = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(m.group(1).lower(),
                                                                                      m.group(1).lower())
    if quantity.startswith("params.trainable") and (m := _RANK.search(context)):
        sizes["lora-rank"] = int(m.group(1))
        if targets := _targets(context):
            sizes["lora-targets"] = targets
    if m := _BATCH.search(context):
        sizes["batch"] = _number(m.group(1), None)
    if m := _SEQ.search(context):
        digits, k = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        sizes["seq"] = _number(digits, k)
    return sizes


def _reading(formula: str, quantity: str, model: str | None, sizes: dict[str, int | str]) -> str:
    """"" when ``check`` would read the formula with the marker proposed, else the reader's reason (its first
    line)."""
    try:
        check(quantity, formula, model=model, **{k.replace("-", "_"): v for k, v in sizes.items()})
    except Exception as exc:  # noqa: BLE001 -- any refusal is the reason said to the author
        return str(exc).splitlines()[0]
    return ""


def scan_claims(text: str, *, read: bool = False) -> list[Candidate]:
    """The candidate claims of a Markdown text (``notes_formats.to_markdown`` for the others): formulas and
    figures near a quantity's words that no marker claims yet; ``read`` parses each as ``check`` would."""
    masked = mask_fences(text)
    marked_until = [m.end for m in marker_comments(masked) if "quantity" in m.body]
    models = _model_mentions(masked)
    line_of = LineIndex(masked)
    lines = masked.split("\n")
    spans = [(m.start(), next(g for g in m.groups() if g is not None).strip()) for m in FORMULA.finditer(masked)]
    taken = [(m.start(), m.end()) for m in FORMULA.finditer(masked)]
    taken += [(a, b) for a, b, _ in models]  # the 7B of LLaMA-2-7B is a name, not a figure
    spans += [(m.start(), m.group()) for m in _FIGURE.finditer(masked)
              if not any(a <= m.start() < b for a, b in taken)]
    found = []
    previous = 0
    for start, formula in sorted(spans):
        near_start, previous = previous, start + len(formula)
        if not re.search(r"[\dA-Za-z]", formula) or len(formula) < 2:
            continue
        if any(0 <= start - end <= 2 or masked[end:start].strip() == "" for end in marked_until if end <= start):
            continue  # claimed by a marker right before it
        line = line_of(start)
        above = lines[max(0, line - 3):line]
        blank = [i for i, x in enumerate(above[:-1]) if not x.strip()]
        above = above[blank[-1] + 1:] if blank else above  # the paragraph only: a blank line ends the context
        context = "\n".join(above)
        line_end = masked.find("\n", start)
        near = masked[max(near_start, start - 200):start] + masked[start:line_end if line_end >= 0 else len(masked)]
        quantity = _quantity(context, near)
        if quantity is None:
            continue
        before = [name for offset, _, name in models if offset <= start]
        model = before[-1] if before else (models[0][2] if models else None)
        sizes = _sizes(context, quantity)
        reading = _reading(formula, quantity, model, sizes) if read else ""
        found.append(Candidate(line, " ".join(formula.split()), quantity, model, sizes, reading))
    return found


def marker_text(candidate: Candidate, kind: str = "md") -> str:
    """The marker that claims the candidate, in the file's comment syntax."""
    keys = [f"quantity={candidate.quantity}"] + ([f"model={candidate.model}"] if candidate.model else [])
    keys += [f"{k}={v}" for k, v in candidate.sizes.items()]
    body = "memderive: " + " ".join(keys)
    return {"tex": f"% {body}", "rst": f".. {body}"}.get(kind, f"<!-- {body} -->")
