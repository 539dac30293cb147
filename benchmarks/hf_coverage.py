"""Every causal-LM model type of the installed transformers through memderive's traced path, as a table.

For each ``model_type`` of ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (200 in transformers 5.25), a small config
(``small_config``: the config class's defaults with small sizes where it has the fields), then:

* params: the traced module tree's groups (``traced.parameters``, meta device) against the count of a model
  transformers instantiates on fake CPU tensors, ``sum(p.numel() for p in model.parameters())``;
* cache: the polynomial in b and s fitted on fake tensors (prefill of s tokens and one decode step) against the
  cache object of a real CPU run at (1, 7) and (2, 7), points it was not fitted on;
* saved (eager, sdpa): the polynomial fitted on fake tensors against autograd's saved tensors of a real bf16 CPU
  training forward at b 1 and b 2 (s 7), counted as ``tests/hf_saved.py`` counts them.

A model type that fails says why in one line; a cell whose fake run fails tries the real CPU run too and says so
where that fails as well (the fault is transformers' or the small config's, not the fake tensors'); a cell whose
polynomial misses the real runs while the fake runs at those very points equal them says "exact at the points, no
polynomial" (a cache compressed every few tokens). ``python benchmarks/hf_coverage.py`` prints the table and the totals;
``--types llama,mamba`` runs a few; ``--only params`` skips the forwards.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memderive.derivations.quantities import traced  # noqa: E402
from memderive.symbolic.lazy import lazy  # noqa: E402

torch = lazy("torch")
transformers = lazy("transformers")
modeling_auto = lazy("transformers.models.auto.modeling_auto")

#: Small sizes, each set where the config class has the field (as tests/hf_meta.py's SMALL, with MoE and SSM sizes).
SMALL = {"hidden_size": 64, "n_embd": 64, "d_model": 64, "num_attention_heads": 4, "n_head": 4, "n_heads": 4,
         "num_heads": 4, "num_key_value_heads": 2, "n_kv_heads": 2, "intermediate_size": 96, "ffn_dim": 96,
         "vocab_size": 128, "head_dim": 16, "max_position_embeddings": 64, "n_positions": 64, "max_seq_len": 64,
         "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
         "num_experts_per_tok": 2, "moe_k": 2, "moe_topk": 2, "top_k": 2, "moe_intermediate_size": 32,
         "expert_intermediate_size": 32, "shared_expert_intermediate_size": 32, "n_group": 1, "topk_group": 1,
         "expand": 1, "state_size": 8, "mamba_d_state": 8, "ssm_state_size": 8, "mamba_n_heads": 4,
         "mamba_d_head": 16, "mamba_head_dim": 16, "n_groups": 1, "time_step_rank": 8, "kv_lora_rank": 16, "q_lora_rank": 16,
         "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "rotary_dim": 8, "v_head_dim": 16, "encoder_layers": 2, "decoder_layers": 2,
         "encoder_ffn_dim": 96, "decoder_ffn_dim": 96, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
         "d_ff": 96, "d_kv": 16, "num_layers": 2, "n_layer": 2, "n_layers": 2, "num_hidden_layers": 2,
         "image_size": 32, "patch_size": 8, "num_channels": 3, "attn_layer_period": 2, "attn_layer_offset": 1,
         "expert_layer_period": 2, "expert_layer_offset": 1, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
         "is_decoder": True}
LAYERS = 2
#: Fitted on fake tensors at b in (1, 2, 3) and s in (4, 6, 8); checked against real CPU runs at REAL only.
FIT = dict(s_points=(4, 6, 8), check=())
REAL = ((1, 7), (2, 7))


def small_config(model_type: str):
    """``model_type``'s config with ``SMALL`` sizes where the class accepts them (greedily: a size the class's
    validation refuses keeps its default), sub-configs (text, vision, audio) shrunk alike, layer-type lists cut
    to ``LAYERS`` layers keeping one of each kind."""
    cls = transformers.CONFIG_MAPPING[model_type]
    return cls(**_small_kwargs(cls))


def _small_kwargs(cls) -> dict:
    base = cls()
    names = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set(vars(base))
    kwargs: dict = {}
    for key, value in vars(base).items():
        if isinstance(value, transformers.PretrainedConfig):
            kwargs[key] = _small_kwargs(type(value))
    layers_key = next((k for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers") if k in names), None)
    wanted = {k: v for k, v in SMALL.items() if k in names and not isinstance(_get(base, k), (list, dict))}
    if "kv_lora_rank" in names and "num_attention_heads" in wanted:
        # multi-head latent attention (DeepSeek V2/V3 and kin) expands its latent to every query head before the
        # attention, which repeats KV heads num_attention_heads // num_key_value_heads times more: every published
        # MLA config (and every such config class's defaults) has as many KV heads as heads
        wanted["num_key_value_heads"] = wanted["num_attention_heads"]
    if layers_key:
        wanted[layers_key] = LAYERS
    if "qk_dim_factor" in names and "hidden_size" in wanted:
        # xLSTM rounds hidden_size * qk_dim_factor up to a multiple of 64 (its qk_dim) but projects to the width
        # unrounded: they agree where the product is a multiple of 64, as in xLSTM-7b (4096 * 0.5), not at 64 * 0.5
        wanted["hidden_size"] = 128
    if "n_recurrent_loops" in names and layers_key:
        # Dory (a looped model): its 8 input and 8 output layers leave none to loop among LAYERS; one of each and
        # LAYERS looped between them, the layer kinds of the class's defaults (every fourth full attention)
        wanted.update(n_input_layers=1, n_output_layers=1)
        wanted[layers_key] = LAYERS + 2
        wanted["layer_types"] = [_get(base, "layer_types")[i] for i in range(LAYERS + 2)]
    if "attn_layer_indices" in names and _get(base, "attn_layer_indices") is None:
        wanted["attn_layer_indices"] = [LAYERS - 1]  # Bamba: one attention layer, as the published hybrids have
    for key in ("layer_types", "layers_block_type", "attention_types_per_layer", "hybrid_override_pattern",
                "block_types"):
        kinds = _get(base, key)
        if isinstance(kinds, (list, str)) and kinds and layers_key and key in names and key not in wanted:
            distinct = list(dict.fromkeys(kinds))
            if distinct == ["linear_attention"]:
                # a hybrid whose defaults hold no attention layer (GraniteMoeHybrid); transformers' mask code needs
                # one (get_mask_sizes on a cache of linear layers only fails on real tensors too)
                distinct.append("full_attention")
            cut = (distinct * LAYERS)[:max(LAYERS, len(distinct))]
            wanted[layers_key] = len(cut)
            wanted[key] = "".join(cut) if isinstance(kinds, str) else cut
    try:
        cls(**kwargs, **wanted)
        return {**kwargs, **wanted}
    except Exception:  # noqa: BLE001 - greedily keep the sizes the class accepts
        pass
    for key, value in wanted.items():
        try:
            cls(**kwargs, **{key: value})
            kwargs[key] = value
        except Exception:  # noqa: BLE001
            continue
    return kwargs


def _get(config, key: str):
    """A config field, or None (per-layer configs refuse to give some fields globally)."""
    try:
        return getattr(config, key, None)
    except Exception:  # noqa: BLE001
        return None


class Timeout(BaseException):  # not an Exception: the traced path turns those into one-line errors
    pass


def _alarm(_signum, _frame):
    raise Timeout("over the time limit")


def row(model_type: str, only: str = "", seconds: int = 120) -> dict:
    out = {"type": model_type, "params": "", "cache": "", "eager": "", "sdpa": "", "why": ""}
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        try:
            cfg = small_config(model_type)
            got = traced.parameters(cfg, task="causal")
        except Exception as exc:  # noqa: BLE001 - the config class's own defaults (full size: parameters only)
            cls = transformers.CONFIG_MAPPING[model_type]
            cfg = cls(is_decoder=True) if "is_decoder" in {f.name for f in dataclasses.fields(cls)} else cls()
            got = traced.parameters(cfg, task="causal")
            only = "params"
            out["why"] = f"small config failed ({' '.join(str(exc).split())[:120]}): parameters of the default config"
        want = transformers_count(cfg)
        out["params"] = "exact" if got.total == want else f"{got.total} != {want}"
        if only == "params":
            return out
        out["cache"] = _cache(cfg)
        for attention in ("eager", "sdpa"):
            out[attention] = _saved(cfg, attention)
        torch.manual_seed(0)
    except Timeout as exc:
        out["why"] = str(exc)
    except traced.TracedError as exc:
        out["why"] = str(exc)
    except Exception as exc:  # noqa: BLE001 - the table says why, in one line
        out["why"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
    finally:
        signal.alarm(0)
    return out


def transformers_count(cfg) -> int:
    """What transformers instantiates, counted as tests/hf_meta.py counts it (meta device, parameters() once)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def _cache(cfg) -> str:
    try:
        model, mode = traced.build(cfg, "eager", task="causal")
        poly = traced.polynomial(lambda b, s: traced.cache_bytes(model, mode, b, s).total, s_degree=1, **FIT)
        if poly is None:
            return "no polynomial (fit missed a check point)"
        real, _ = traced.build(cfg, "eager", fake=False, task="causal")
        got = [traced.cache_bytes(real, None, b, s).total for b, s in REAL]
        if all(g == 0 for g in got):
            return "no cache"
        return _verdict(poly, lambda b, s: traced.cache_bytes(model, mode, b, s).total, got)
    except traced.TracedError as exc:
        return _failed(exc, cfg, "eager", lambda real: traced.cache_bytes(real, None, *REAL[0]))


def _failed(exc: Exception, cfg, attention: str, measure) -> str:
    """``fails: why``; where the fake run failed, the real CPU run at ``REAL[0]`` is tried too: failing there as well,
    the fault is transformers' (or the config's), not the fake tensors', and the cell says so."""
    text = str(exc)
    if "on fake tensors" in text:
        try:
            real, _ = traced.build(cfg, attention, fake=False, task="causal")
            measure(real)
        except traced.TracedError as again:
            return "fails on real CPU tensors too: " + str(again)[:160]
    return "fails: " + text[:160]


def _verdict(poly, fake, got: list[int]) -> str:
    """``exact: poly`` where the fit equals the real runs ``got`` at ``REAL``; else, where the fake runs at ``REAL``
    themselves equal them (the figures exact at every (b, s), the bytes no polynomial of the fitted degree: a cache
    compressed every few tokens), ``exact at REAL, no polynomial``; else how it differs."""
    if all(poly(b, s) == g for (b, s), g in zip(REAL, got)):
        return f"exact: {poly}"
    direct = [fake(b, s) for b, s in REAL]
    if direct == got:
        return f"exact at {', '.join(map(str, REAL))}, no polynomial (the fit gives {[int(poly(b, s)) for b, s in REAL]})"
    return f"differs: {direct} != {got}"


def _saved(cfg, attention: str) -> str:
    try:
        model, mode = traced.build(cfg, attention, task="causal")
        poly = traced.polynomial(lambda b, s: traced.saved_bytes(model, mode, b, s), **FIT)
        if poly is None:
            return "no polynomial (fit missed a check point)"
        torch.manual_seed(0)
        real, _ = traced.build(cfg, attention, fake=False, task="causal")
        got = [traced.saved_bytes(real, None, b, s) for b, s in REAL]
        return _verdict(poly, lambda b, s: traced.saved_bytes(model, mode, b, s), got)
    except traced.TracedError as exc:
        return _failed(exc, cfg, attention, lambda real: traced.saved_bytes(real, None, *REAL[0]))


def forked_row(model_type: str, only: str, seconds: int) -> dict:
    """``row`` in a forked child (torch and transformers already imported): a model type that kills its interpreter
    (a C++ ``terminate`` inside a fake-tensor kernel) or hangs gets a row saying so, and the table goes on."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one row, as JSON, then exit without cleanup
        os.close(read)
        try:
            data = json.dumps(row(model_type, only, seconds)).encode()
        except BaseException as exc:  # noqa: BLE001
            data = json.dumps({"type": model_type, "why": f"{type(exc).__name__}: {exc}"[:200]}).encode()
        os.write(write, data)
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 65536):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    blank = {"type": model_type, "params": "", "cache": "", "eager": "", "sdpa": "", "why": ""}
    if not chunks:
        return {**blank, "why": f"the interpreter died running it (wait status {status}): a fatal error in a "
                                "fake-tensor kernel"}
    return {**blank, **json.loads(b"".join(chunks))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", help="comma-separated model types (default: all causal-LM types)")
    parser.add_argument("--only", choices=("params",), help="parameters only (no forwards)")
    parser.add_argument("--shard", default="0/1", help="i/n: every n-th type from the i-th (to run in parallel)")
    parser.add_argument("--merge", nargs="+", metavar="TSV",
                        help="print the table and totals of earlier runs' outputs (a later row of a type replaces an "
                             "earlier one: shards, then reruns)")
    parser.add_argument("--seconds", type=int, default=120, help="time limit per model type")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge)
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # read here: the forked rows find transformers imported
    types = args.types.split(",") if args.types else sorted(causal)
    index, count = (int(x) for x in args.shard.split("/"))
    types = types[index::count]
    print(f"transformers {transformers.__version__}: {len(types)} causal-LM model types")
    print("type\tparams\tcache\tsaved eager\tsaved sdpa\twhy not")
    rows = []
    for model_type in types:
        start = time.time()
        r = forked_row(model_type, args.only or "", args.seconds)
        rows.append(r)
        print("\t".join([r["type"], r["params"], r["cache"], r["eager"], r["sdpa"], r["why"]])
              + f"\t({time.time() - start:.1f} s)", flush=True)
    print(totals(rows))
    return 0


COLUMNS = ("type", "params", "cache", "eager", "sdpa", "why")


def totals(rows: list[dict]) -> str:
    exact = lambda key: sum(r[key].startswith("exact") for r in rows)  # noqa: E731
    saved = sum(r["eager"].startswith("exact") or r["sdpa"].startswith("exact") for r in rows)
    no_cache = sum(r["cache"] == "no cache" for r in rows)
    points = sum(r[key].startswith("exact at") for r in rows for key in ("cache", "eager", "sdpa"))
    return (f"totals over {len(rows)}: params exact {exact('params')}; cache exact {exact('cache')} ({no_cache} "
            f"without a cache); saved activations exact at b1 and b2: eager {exact('eager')}, sdpa {exact('sdpa')}, "
            f"either {saved}" + (f" ({points} of these cells exact at the points, no polynomial)" if points else ""))


def merge(paths: list[str]) -> int:
    """The table of earlier runs' printed rows, a type's last row winning, and its totals."""
    rows: dict[str, dict] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            cells = line.split("\t")
            if len(cells) < 6 or cells[0] == "type" or line.startswith(("totals", "transformers")):
                continue
            rows[cells[0]] = dict(zip(COLUMNS, cells))
    print("type\tparams\tcache\tsaved eager\tsaved sdpa\twhy not")
    for name in sorted(rows):
        print("\t".join(rows[name][c] for c in COLUMNS))
    print(totals(list(rows.values())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
