"""Megatron-Core's custom pipeline layout (``--pipeline-model-parallel-layout``), read without ``eval``.

A layout is a string of model chunks split by ``|``: ``E`` the embedding, ``t`` a decoder layer, ``m`` a
multi-token-prediction layer, ``L`` the loss (the output layer); ``x*N`` repeats one symbol, ``(...)*N`` a group
(commas are cosmetic). Chunk ``i`` of the string runs on pipeline rank ``i % p`` as its virtual stage ``i // p``
(``PipelineParallelLayerLayout.__init__``: ``layout[vpp_rank * pp + pp_rank]``), so the string lists the chunks in
the order the layers run, and ``len(chunks) = p v`` (references ``megatron-pp-layout``).

>>> [c.text for c in parse_layout("Et*2|(tt|)*2L", 2)]
['Ett', 'tt', 'tt', 'L']
>>> [(c.rank, c.stage, c.first, c.layers) for c in parse_layout("Et*2|(tt|)*2L", 2)]
[(0, 0, 0, 2), (1, 0, 2, 2), (0, 1, 4, 2), (1, 1, 6, 0)]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Chunk", "LayoutError", "parse_layout", "expand_layout", "rank_chunks", "chunks_in_flight",
           "LAYOUT_SYMBOLS"]

#: The symbols of a layout string (Megatron-Core's ``char2layer_type``).
LAYOUT_SYMBOLS = {"E": "embedding", "t": "decoder layer", "m": "MTP layer", "L": "loss"}
#: The most symbols a layout may expand to (a typo's ``*100000`` is refused, not expanded).
MAX_SYMBOLS = 100_000


class LayoutError(ValueError):
    """A pipeline layout string that cannot be read or does not fit the run (the message says what is wrong)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One model chunk: its symbols, pipeline rank, virtual stage and the decoder layers it holds (``first`` the
    index of its first decoder layer in the model, ``layers`` how many)."""

    text: str
    rank: int
    stage: int
    first: int
    layers: int

    @property
    def embedding(self) -> bool:
        return "E" in self.text

    @property
    def loss(self) -> bool:
        return "L" in self.text

    @property
    def mtp(self) -> int:
        return self.text.count("m")


def expand_layout(text: str) -> str:
    """The layout with every repetition unrolled and the commas dropped (``'(t|)*2L'`` -> ``'t|t|L'``); a
    recursive descent over ``item := (symbol | '|' | '(' items ')') ['*' N]``, never ``eval``."""
    bare = text.replace(",", "")
    out, end = _items(bare, 0)
    if end != len(bare):
        raise LayoutError(f"--pipeline-layout {text!r}: a ')' without its '('")
    return out


def _items(text: str, at: int) -> tuple[str, int]:
    parts: list[str] = []
    while at < len(text) and text[at] != ")":
        char = text[at]
        if char == "(":
            inner, at = _items(text, at + 1)
            if at >= len(text):
                raise LayoutError(f"--pipeline-layout {text!r}: '(' without its ')'")
            at += 1
        elif char in LAYOUT_SYMBOLS or char == "|":
            inner, at = char, at + 1
        else:
            raise LayoutError(f"--pipeline-layout {text!r}: {char!r} is not a layout symbol (E embedding, t decoder "
                              "layer, m MTP layer, L loss, '|' between chunks, x*N and (...)*N repeat)")
        if at < len(text) and text[at] == "*":
            digits = at + 1
            while digits < len(text) and text[digits].isdigit():
                digits += 1
            if digits == at + 1:
                raise LayoutError(f"--pipeline-layout {text!r}: '*' at character {at + 1} needs a count")
            inner, at = inner * int(text[at + 1:digits]), digits
        parts.append(inner)
        if sum(map(len, parts)) > MAX_SYMBOLS:
            raise LayoutError(f"--pipeline-layout {text!r} expands past {MAX_SYMBOLS:,} symbols")
    return "".join(parts), at


@lru_cache(maxsize=64)
def parse_layout(text: str, pp: int) -> tuple[Chunk, ...]:
    """The chunks of ``text`` on ``pp`` pipeline ranks, in the order the layers run; checks what Megatron-Core's
    ``PipelineParallelLayerLayout`` checks without the model: the chunk count a multiple of ``pp``, one embedding
    first, one loss last, MTP layers after every decoder layer (the decoder-layer count needs the model:
    ``check_layers``)."""
    chunks = expand_layout(text).split("|")
    if len(chunks) % pp:
        raise LayoutError(f"--pipeline-layout {text!r} has {len(chunks)} chunks, not a multiple of --pp {pp} (p x v "
                          "chunks, split by '|')")
    flat = "".join(chunks)
    for symbol, where, name in (("E", 0, "first"), ("L", -1, "last")):
        if flat.count(symbol) != 1 or flat[where] != symbol:
            raise LayoutError(f"--pipeline-layout {text!r}: the {LAYOUT_SYMBOLS[symbol]} ({symbol}) must appear once, "
                              f"as the {name} symbol")
    if "m" in flat and "t" in flat[flat.index("m"):]:
        raise LayoutError(f"--pipeline-layout {text!r}: MTP layers (m) must come after every decoder layer (t)")
    out, first = [], 0
    for i, chunk in enumerate(chunks):
        out.append(Chunk(chunk, i % pp, i // pp, first, chunk.count("t")))
        first += chunk.count("t")
    return tuple(out)


def check_layers(chunks: tuple[Chunk, ...], text: str, layers: int) -> None:
    """Every decoder layer of the model placed exactly once."""
    placed = sum(c.layers for c in chunks)
    if placed != layers:
        raise LayoutError(f"--pipeline-layout {text!r} places {placed} decoder layers (t); the model has {layers}")


def rank_chunks(chunks: tuple[Chunk, ...], rank: int) -> tuple[Chunk, ...]:
    """The chunks of pipeline rank ``rank``, virtual stage 0 first."""
    return tuple(c for c in chunks if c.rank == rank)


@lru_cache(maxsize=1024)
def chunks_in_flight(held: tuple[Chunk, ...], pp: int, micro_batches: int | None) -> tuple[int, ...]:
    """Micro-batches each chunk of one rank holds at the moment its decoder layers hold the most, under Megatron-LM's
    schedule (references ``megatron-schedules``): 1F1B with one chunk (warm-up ``p - r - 1``), else the interleaved
    schedule, warm-up ``2(p - r - 1) + (v - 1) p`` chunk micro-batches, at most all ``m v`` of the step; forward k
    runs chunk ``(k // p) % v`` (``get_schedule_table`` with the micro-batch group of p, the last group all that is
    left), backward k the chunk ``v - 1`` less that; each steady-state step runs forward ``k + warm-up`` and then
    backward ``k``. Without ``m`` the step is taken long (4p micro-batches): the warm-up is never cut short.

    >>> row = parse_layout("Et|tt|tt|tL", 2)
    >>> chunks_in_flight(rank_chunks(row, 0), 2, 4), chunks_in_flight(rank_chunks(row, 1), 2, 4)
    ((3, 2), (3, 0))
    """
    v, r = len(held), held[0].rank
    m = 4 * pp if micro_batches is None else micro_batches
    if m > 6 * pp:  # the steady state repeats every group of p micro-batches: fewer whole groups, the same states
        m = 5 * pp + m % pp
    total = m * v
    table = [c for start in range(0, m, pp) for c in range(v) for _ in range(start, min(start + pp, m))]
    warmup = min(total, (pp - r - 1) * 2 + (v - 1) * pp if v > 1 else pp - r - 1)
    counts, best, most = [0] * v, (0,) * v, -1

    def forward(k: int) -> None:
        nonlocal best, most
        counts[table[k]] += 1
        weight = sum(n * c.layers for n, c in zip(counts, held))
        if weight > most:
            best, most = tuple(counts), weight

    for k in range(warmup):
        forward(k)
    for k in range(total - warmup):
        forward(k + warmup)
        counts[v - 1 - table[k]] -= 1
    return best
