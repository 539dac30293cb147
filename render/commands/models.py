"""``memderive models``: the bundled presets with their sizes (parameters, bf16 weights, layers, context) and the
reference their sizes are published in (``memderive references KEY``)."""

from __future__ import annotations

import argparse
import json
from memderive.derivations.estimate import estimate
from memderive.derivations.models.presets import SOURCES, preset, preset_names
from memderive.documents.units import scaled_bytes, scaled_count

from memderive.derivations.models.ssm import SSM_PRESETS, ssm_model


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("models", help="list the bundled models with their sizes")
    parser.add_argument("--json", action="store_true", help="one JSON list with exact integers")
    parser.set_defaults(func=run)


def rows() -> list[dict]:
    """One row per preset: family, parameters (exact), bf16 weight bytes, layers, hidden size, heads,
    KV heads, context length (``None`` when the config gives none), source (a reference key)."""
    out = []
    for name in preset_names():
        model = preset(name)
        params = estimate(model).number("parameters")
        z = model.sizes
        out.append({"model": name, "family": model.arch.family, "parameters": params, "bf16_bytes": 2 * params,
                    "layers": z["l"], "hidden": z["h"], "heads": z["a"], "kv_heads": z.get("a_kv", z["a"]),
                    "max_positions": model.max_positions, "source": SOURCES[name].key})
    for name, config in SSM_PRESETS.items():  # state space models: SSM heads, no key/value heads, no context limit
        model = ssm_model(config, name)
        z = model.sizes
        params = int(model.parameters().total.evaluate(model.values()))
        out.append({"model": name, "family": model.family, "parameters": params, "bf16_bytes": 2 * params,
                    "layers": z["l"], "hidden": z["h"], "heads": z["n_sh"], "kv_heads": None, "max_positions": None,
                    "source": "dao-gu-2024"})
    return out


def run(args: argparse.Namespace) -> int:
    table = rows()
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    print(f"{'model':<16} {'family':<12} {'parameters':>18} {'bf16 weights':>13} {'layers':>6} {'h':>6} "
          f"{'heads':>5} {'kv':>4} {'context':>8}  source")
    for r in table:
        context = f"{r['max_positions']:,}" if r["max_positions"] else "-"
        print(f"{r['model']:<16} {r['family']:<12} {scaled_count(r['parameters']):>18} "
              f"{scaled_bytes(r['bf16_bytes'])[0]:>13} {r['layers']:>6} {r['hidden']:>6} {r['heads']:>5} "
              f"{r['kv_heads'] or '-':>4} {context:>8}  {r['source']}")
    print("\nsource: where the sizes are published (memderive references KEY). Any local Hugging Face config.json "
          "works too: memderive estimate --model path/to/config.json")
    return 0
