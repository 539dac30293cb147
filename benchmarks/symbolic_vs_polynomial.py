"""The symbolic-shape route (``traced_symbolic``) against the polynomial route (``traced.polynomial``), per model type.

``PYTHONPATH=. python benchmarks/symbolic_vs_polynomial.py arcee bart t5 whisper jamba mamba qwen3_next gemma3 llava``:
for each small config of ``tests/test_traced.py`` (and ``tests/test_traced_symbolic.py``'s arcee), saved activations
and cache, one line: the symbolic expression (traced at b 2, s 24) equal to the polynomial (``expand`` of the
difference 0, and the points of b 1..3 x s 3..100 where both agree) or the fallback's reason, and the seconds of
each route. ``--config PATH``: a config.json (a 7B-sized one) timed alone, at b 1 and s 4096: one concrete fake trace,
the polynomial route (its 13 fake traces), the two symbolic traces (b symbolic; b = 1).
"""

from __future__ import annotations

import json
import sys
import time

import sympy as sp

from memderive.derivations.quantities import traced
from memderive.derivations.quantities import traced_symbolic as ts
from memderive.symbolic.dims import by_name
from tests.test_traced import SAMPLE, VLM
from tests.test_traced_symbolic import ARCEE

CONFIGS = {"arcee": ARCEE, **SAMPLE, "llava": VLM["llava"]}
b, s = by_name("b").symbol, by_name("s").symbol


def _cache(model, mode, bb, ss):
    return traced.cache_bytes(model, mode, bb, ss).total


def compare(model_type: str) -> None:
    cfg = traced.hf_config({"model_type": model_type, **CONFIGS[model_type]})
    model, mode = traced.build(cfg, "eager")
    for kind, count, degree in (("saved", traced.saved_bytes, 2), ("cache", _cache, 1)):
        start = time.time()
        fit = traced.polynomial(lambda bb, ss, count=count: count(model, mode, bb, ss), s_degree=degree)
        poly_s = time.time() - start
        start = time.time()
        try:
            sym_model, sym_mode = ts.symbolic_model(cfg, "eager")
            got = ts.symbolic(count, sym_model, sym_mode, 2, 24, count(model, mode, 2, 24))
        except traced.TracedError as exc:
            got = str(exc)
        times = f"symbolic {time.time() - start:.1f} s, polynomial {poly_s:.1f} s"
        if isinstance(got, str):
            print(f"{model_type:10s} {kind}: falls back ({got}); polynomial {fit}; {times}", flush=True)
            continue
        if fit is None:
            print(f"{model_type:10s} {kind}: symbolic, no polynomial fits; {times}", flush=True)
            continue
        exact = sp.expand(got.general - sp.sympify(str(fit.general), locals={"b": b, "s": s})) == 0
        points = [(bb, ss) for bb in (1, 2, 3) for ss in (3, 5, 9, 24, 33, 64, 100)]
        differ = sorted({ss for bb, ss in points if got(bb, ss) != fit(bb, ss)})
        print(f"{model_type:10s} {kind}: symbolic; expand(symbolic - polynomial) {'== 0' if exact else '!= 0'}; "
              f"differ at s in {differ}; {len(got.guards)} guards; {times}", flush=True)


def time_config(path: str) -> None:
    cfg = traced.hf_config(json.load(open(path)))
    model, mode = traced.build(cfg, "eager")
    start = time.time()
    measured = traced.saved_bytes(model, mode, 1, 4096)
    print(f"one concrete fake trace at b 1, s 4096: {time.time() - start:.1f} s -> {measured:,} B")
    start = time.time()
    fit = traced.polynomial(lambda bb, ss: traced.saved_bytes(model, mode, bb, ss))
    print(f"polynomial route: {time.time() - start:.1f} s -> {fit}")
    sym_model, sym_mode = ts.symbolic_model(cfg, "eager")
    start = time.time()
    general, guards = ts.symbolic_bytes(traced.saved_bytes, sym_model, sym_mode, hint=(2, 4096))
    print(f"one symbolic trace (hints b 2, s 4096): {time.time() - start:.1f} s -> {general}; {len(guards)} guards")
    start = time.time()
    one, _ = ts.symbolic_bytes(traced.saved_bytes, sym_model, sym_mode, b=1, hint=(2, 4096))
    print(f"the b = 1 symbolic trace: {time.time() - start:.1f} s -> {one}; at s 4096: {int(one.subs(s, 4096)):,} B")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--config"]:
        time_config(sys.argv[2])
    else:
        for name in sys.argv[1:]:
            compare(name)
