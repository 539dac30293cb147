"""The six conventions: memderive's own figures and five other tools' accounting of the same model.

Sources (read with the search tool; line numbers in the tests):
Megatron-LM ``megatron/training/theoretical_memory_usage.py`` (commit 00caa53a), DeepSpeed
``deepspeed/runtime/zero/stage_1_and_2.py::estimate_zero2_model_states_mem_needs`` and
``stage3.py::estimate_zero3_model_states_mem_needs``, llm-analysis 0.2.2 (PyPI)
``llm_analysis/analysis.py``, EleutherAI cookbook ``calc/calc_transformer_mem.py`` (HEAD 827ee3b),
accelerate 1.15 ``accelerate/commands/estimate.py``. Each tool computes in floats; the figures here
are its arithmetic done exactly and rounded to whole bytes at the end.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from memderive.derivations.models.model import Model
from memderive.derivations.options import Options, OptionsError
from memderive.symbolic.derive import activations, evaluate
from memderive.symbolic.dims import V
from memderive.symbolic.formula import Citation
from memderive.derivations.estimate import estimate
from memderive.derivations.models.architectures import GPT, build_graph
from memderive.symbolic import dims
from memderive.symbolic.strategies import SelectiveRecompute, SequenceParallel, TensorParallel

__all__ = ["Figures", "memderive", "megatron", "deepspeed", "llm_analysis", "eleuther", "accelerate", "NotModelled",
           "graph_parameters", "largest_layer"]


@dataclass(frozen=True, slots=True)
class Figures:
    """One tool's figures in bytes (parameters in elements); None where the tool has no such figure.

    ``printed`` is how the tool prints its unit (``MB`` = 2^20 bytes for Megatron); ``why`` maps a
    column to the term that makes it differ from memderive's.
    """

    convention: str
    parameters: int
    model_states: int | None
    activations: int | None
    kv_cache: int | None
    total: int
    source: Citation
    printed: str
    why: dict[str, str] = field(default_factory=dict)

    def column(self, name: str) -> int | None:
        return getattr(self, name)

MEGATRON = Citation("megatron-theoretical-memory", "compute_weight_and_optimizer_memory(), compute_activation_memory()")
DEEPSPEED = Citation("deepspeed-zero2-estimator", "estimate_zero2_model_states_mem_needs()",
                     also=(Citation("deepspeed-zero3-estimator", "estimate_zero3_model_states_mem_needs()"),))
LLM_ANALYSIS = Citation("llm-analysis", "training(), inference()")
ELEUTHER = Citation("eleuther-calc-mem", "calc_mem()")
ACCELERATE = Citation("accelerate-estimate", "estimate_training_usage(), gather_data()")


class NotModelled(OptionsError):
    """The tool has no figure for this mode (e.g. Megatron's estimator is for training only)."""


def _round(x: Fraction | int) -> int:
    return int(Fraction(x).__round__())


# --- our graph, changed as a tool counts ------------------------------------------------------
def graph_parameters(model: Model, *, vocab: int | None = None, linear_biases: bool = True,
                     positions: bool = True, head: bool = True) -> int:
    """Parameters of the model's graph, with the vocabulary padded to ``vocab``, without the linear
    layers' biases or without learned position/token-type embeddings (as a tool counts them)."""
    values = {**model.values(), **({V: vocab} if vocab else {})}
    total = 0
    for blk, op in model.graph().ops():
        if (not positions and op.path in ("positions", "token_types")) or (not head and blk.name == "head"
                                                                              and op.path != "final_norm"):
            continue
        for x in op.params:
            if linear_biases or not (op.kind == "linear" and x.role == "bias"):
                total += int(evaluate(x.numel * blk.repeat * op.share, values))
    return total


def components(model: Model, vocab: int | None = None) -> dict[str, int]:
    """Our parameters by component (embeddings with an untied LM head, attention, MLP, norms)."""
    values = {**model.values(), **({V: vocab} if vocab else {})}
    out = dict.fromkeys(("embeddings", "attention", "mlp", "norms"), 0)
    for blk, op in model.graph().ops():
        n = sum(int(evaluate(x.numel * blk.repeat * op.share, values)) for x in op.params)
        key = ("norms" if "norm" in op.kind else "embeddings" if op.kind == "embedding" or op.path == "lm_head"
               else "attention" if op.path.startswith("attn/") else "mlp" if op.path.startswith("mlp/") else "norms")
        out[key] += n
    return out


def explain_parameters(model: Model, theirs: dict[str, int | Fraction], reason: str) -> str:
    """``reason`` and each component's difference from ours, e.g. ``mlp -1,442,840,576``."""
    ours = components(model)
    parts = [f"{k} {_round(theirs.get(k, 0)) - ours.get(k, 0):+,}" for k in dict.fromkeys((*ours, *theirs))
             if _round(theirs.get(k, 0)) != ours.get(k, 0)]
    return f"{reason} ({'; '.join(parts)})" if parts else reason


def largest_layer(model: Model) -> int:
    """The largest module's own parameters (DeepSpeed's ``largest_layer_params``): transformers keeps
    q, k and v projections apart, so a fused qkv op counts as its query projection."""
    z, best = model.sizes, 0
    for _, op in model.graph().ops():
        n = sum(int(evaluate(x.numel, model.values())) for x in op.params)
        if op.path == "attn/qkv":
            n = z["a"] * z["d_h"] * (z["h"] + (1 if any(x.role == "bias" for x in op.params) else 0))
        best = max(best, n)
    return best


# --- memderive ---------------------------------------------------------------------------------
def memderive(model: Model, opts: Options) -> Figures:
    est = estimate(model, opts)
    train = opts.mode == "train"
    return Figures("memderive", est.number("parameters"),
                   est.number("model_state_bytes" if train else "weight_bytes"), est.number("activation_bytes"),
                   None if train else est.number("kv_cache_bytes"), est.number("total_bytes"),
                   Citation("memderive", f"implementation {opts.implementation}"),
                   "bytes; GB = 10^9, GiB = 2^30")


# --- Megatron-LM -------------------------------------------------------------------------------
def _megatron_in_flight(opts: Options) -> Fraction:
    p = opts.pp
    if opts.virtual_stages not in (None, 1):
        return 1 + Fraction(p - 1, p * opts.virtual_stages)
    if p > 1 and opts.micro_batches is not None:
        return min(Fraction(1), Fraction(opts.micro_batches, p))
    return Fraction(1)


def megatron(model: Model, opts: Options) -> Figures:
    """``report_theoretical_memory``: 18 bytes per parameter of the most loaded shard (6 + 12/d with the
    distributed optimizer, here ``--zero 1``), Table-2 activations for every layer."""
    if opts.mode != "train":
        raise NotModelled("Megatron-LM's theoretical memory is for training only")
    z, t, p, b, s = model.sizes, opts.tp, opts.pp, opts.batch, opts.seq
    h, f, L = z["h"], z["f"], z["l"]
    multiple = 128 * t  # --make-vocab-size-divisible-by 128, times t (_vocab_size_with_padding)
    v_pad = -(-z["V"] // multiple) * multiple
    params = graph_parameters(model, vocab=v_pad, linear_biases=False, positions=False)
    emb, untied = h * v_pad, not model.arch.tied_embeddings
    block = params - emb * (2 if untied else 1)
    shard = (Fraction(block, p) + emb) / t + (Fraction(emb, t) if untied and p == 1 else 0)
    per_param = Fraction(18) if opts.zero == 0 else 6 + Fraction(12, opts.dp)
    states = shard * per_param
    sbh, phi = s * b * h, _megatron_in_flight(opts)
    if opts.sp and opts.recompute == "selective":  # sbh(18 + 4f/h)/t per layer
        acts = (t * gpt_layer(model, opts, f, sp=True) * L + 8 * s * b * p + sbh * p) * phi
        acts = (acts + (4 * sbh * (1 + Fraction(v_pad, h)) if p == 1 else 0)) / t
        path = "Table 2 with sequence parallelism and selective recompute, sbh(18 + 4f/h)/t per layer (our GPT graph)"
    else:
        acts = (gpt_layer(model, opts, 4 * h, sp=False) * L + 8 * s * b * p + sbh * p) * phi  # sbh(10 + 24/t)
        acts = Fraction(105, 100) * (acts + (2 * (Fraction(s * b * v_pad, t) + sbh) if p == 1 else 0))
        path = ("Table 2's selective-recompute row for every layout, sbh(10 + 24/t) per layer (our GPT graph at "
                "f = 4h), times 1.05")
    mg_parts = components(model, vocab=v_pad)
    why = {"parameters": explain_parameters(model, mg_parts, f"vocabulary padded to a multiple of 128*t: "
                                            f"{z['V']:,} -> {v_pad:,}; linear biases, learned positions not counted"),
           "model_states": "18 bytes per parameter (bf16 weights, fp32 gradients, fp32 master weights and Adam "
                           "moments) against memderive's 16 (16-bit gradients)" if opts.zero == 0 else
                           "distributed optimizer: 6 + 12/d bytes per parameter (fp32 gradients kept whole)",
           "activations": f"{path}: a GPT layer (LayerNorm, 4h GeLU MLP) whatever the model, no a*s^2 scores",
           "total": "model states + activations, each as above"}
    return Figures("megatron", params, _round(states), _round(acts), None, _round(states + acts), MEGATRON,
                   "MB = 2^20 bytes", why)


def gpt_layer(model: Model, opts: Options, f: int, sp: bool) -> Fraction:
    """Megatron's per-layer activations are Korthikanti's GPT layer: our GPT graph (LayerNorm, GeLU MLP of
    width ``f``, dropout) with selective recompute and t-way tensor (and sequence) parallelism, the
    paper's profile, at the model's h, a, s, b: sbh(10 + 24/t) at f = 4h, sbh(18 + 4f/h)/t with SP."""
    graph = TensorParallel(dims.t)(SelectiveRecompute()(build_graph(GPT)))
    graph = SequenceParallel(dims.t)(graph) if sp else graph
    z = model.sizes
    values = {dims.b: opts.batch, dims.s: opts.seq, dims.h: z["h"], dims.a: z["a"], dims.a_kv: z["a"],
              dims.d_h: Fraction(z["h"], z["a"]), dims.f: f, dims.t: opts.tp}
    per = activations(graph, ignore_roles=("norm-stats", "token-ids", "loss-scalars"), blocks=["layer"],
                      per_repeat=True).total
    return Fraction(evaluate(per, values))


# --- DeepSpeed ---------------------------------------------------------------------------------
def deepspeed(model: Model, opts: Options) -> Figures:
    """ZeRO-3 estimator under ``--zero 3``, else the ZeRO-2 one (DeepSpeed has none for stages 0-1):
    N = d*t*p GPUs; 4x the largest layer is gathered under ZeRO-3."""
    if opts.mode != "train":
        raise NotModelled("DeepSpeed's estimators are for training model states only")
    params, gpus = graph_parameters(model), opts.dp * opts.tp * opts.pp
    if opts.zero == 3:
        lam = largest_layer(model)
        shard = (2 * params) // gpus if opts.offload else (18 * params) // gpus
        states = 4 * lam + shard
        why = f"ZeRO-3: 4 x the largest layer ({lam:,} parameters) gathered, plus 18P/N"
    else:
        states = 2 * params + (0 if opts.offload else (18 * params) // gpus)
        why = "ZeRO-2 estimator: 16-bit weights whole (2P) plus 18P/N (16-bit and fp32 gradients, fp32 " \
              "master weights, Adam moments)"
    why_total = "model states only: activations are out of the estimators' scope"
    return Figures("deepspeed", params, states, None, None, states, DEEPSPEED, "GB = 2^30 bytes",
                   {"model_states": why, "total": why_total})


# --- llm-analysis 0.2.2 ------------------------------------------------------------------------
def _la_ffn(model: Model) -> int:
    """llm-analysis asserts f % h == 0 (``ModelConfig.__post_init__``); its bundled Llama-2 configs
    (NousResearch_Llama-2-7b-hf, upstage_Llama-2-70b-instruct-v2) therefore give f = 4h."""
    z = model.sizes
    return z["f"] if z["f"] % z["h"] == 0 else 4 * z["h"]


def _la_params(model: Model, t: int) -> tuple[Fraction, Fraction, int, int]:
    """Per-layer attention+MLP+norm, embedding (tied: hV once) and final norm, as llm-analysis counts."""
    z = model.sizes
    h, a = z["h"], z["a"]
    kv = max(Fraction(z["a_kv"], t), 1) * t
    attn = 2 * h * h + 2 * h * Fraction(h * kv, a)  # d_h = h/a; q and o are h x h
    layer = attn + 2 * h * _la_ffn(model) + 2 * h  # two MLP matrices, 2h of norm weights
    return layer, attn, h * z["V"], h


def llm_analysis(model: Model, opts: Options) -> Figures:
    """w16a16e16, Adam (4-byte master, 8 bytes of moments), fp32 gradients, flash_attn as ``--flash``."""
    z, t, b, s = model.sizes, opts.tp, opts.batch, opts.seq
    h, L = z["h"], z["l"]
    layer, attn, emb, final = _la_params(model, t)
    params = _round(L * layer + emb + final)
    zero3 = opts.dp if opts.zero == 3 else 1
    weights = (L * layer / t / zero3 + Fraction(final, t) / zero3 + Fraction(emb, t) / zero3) * 2
    la_parts = {"embeddings": emb, "attention": L * attn, "mlp": L * 2 * h * _la_ffn(model),
                "norms": L * 2 * h + final}
    why = {"parameters": explain_parameters(model, la_parts, f"embedding counted once (tied), two MLP matrices of "
                                            f"f = {_la_ffn(model):,} (a multiple of h, as its bundled Llama-2 configs), "
                                            "d_h = h/a")}
    if opts.mode == "infer":
        kv = L * 2 * b * (s + opts.new_tokens) * Fraction(h, z["a"]) * max(Fraction(z["a_kv"], t), 1) * 2
        layer_act = max(3 * 2 * Fraction(s * b * h, t), (2 * s * b * h + 4 * z["a"] * s * b) * Fraction(2, t),
                        2 * Fraction(_la_ffn(model), h) * s * b * h / t, Fraction(s * b * h * 4, t))
        acts = max(layer_act, Fraction(z["V"] * b * s * 2, t))
        why.update(model_states="weights of the parameters above, 2 bytes each",
                   total="weights + KV cache + prefill activations, each as above",
                   activations="prefill: the largest of one layer's buffers or the 16-bit logits",
                   kv_cache="2 b (s+n) (h/a) max(a_kv/t, 1) bytes per layer: K and V, 16-bit")
        return Figures("llm-analysis", params, _round(weights), _round(acts), _round(kv),
                       _round(weights + kv + acts), LLM_ANALYSIS, "GB = 2^30 bytes", why)
    opt_shard = opts.dp if opts.zero >= 1 else 1
    grad_shard = opts.dp if opts.zero >= 2 else 1
    sharded = L * layer / t + Fraction(emb, t) + Fraction(final, t)
    states = weights + 12 * sharded / opt_shard + 4 * sharded / grad_shard
    head = Fraction(z["V"] * b * s * 2, t) + Fraction(s * b * h * 4, t)  # 16-bit logits, fp32 final norm input
    acts = L * _la_layer_acts(model, opts) + head * (2 if b == 1 else 1)  # b = 1: training() adds them twice
    why.update(model_states="18 bytes per parameter: fp32 gradients (4) beside weights (2) and Adam (12)",
               activations=_la_why(opts), total="model states + activations, each as above")
    return Figures("llm-analysis", params, _round(states), _round(acts), None, _round(states + acts), LLM_ANALYSIS,
                   "GB = 2^30 bytes", why)


def _la_layer_acts(model: Model, opts: Options) -> Fraction:
    """``get_activation_memory_per_layer`` in training, sp_size = tp_size (its default), no recompute
    or full recompute; the MLP keeps 2 matrices' inputs at f/h, norms in fp32, a 1-byte attention dropout mask."""
    z, t, b, s = model.sizes, opts.tp, opts.batch, opts.seq
    h, a, f = z["h"], z["a"], _la_ffn(model)
    sbh = s * b * h
    if opts.recompute == "full":
        return Fraction(sbh * 2, t)
    if opts.recompute == "selective":
        core = Fraction(0)
    elif opts.attention_kernel != "eager":
        core = (2 * sbh + 4 * a * s * b) * Fraction(2, t)
    else:
        core = Fraction(2 * a * s * s * b * 2, t)
    attn = (Fraction(sbh, t) + Fraction(4 * sbh, t)) * 2 + core + Fraction(sbh, t)
    mlp = Fraction(2 * sbh, t) + 4 * Fraction(f, h) * sbh / t
    return attn + mlp + 2 * Fraction(sbh * 4, t)


def _la_why(opts: Options) -> str:
    score = "FlashAttention: no scores" if opts.attention_kernel != "eager" else "one 16-bit a*s^2 score tensor (memderive: softmax and its input)"
    return (f"per layer: attention 5sbh + {score}, a 1-byte dropout mask even without dropout, MLP 2sbh + 4sbf "
            "(no third SwiGLU matrix), two fp32 norm inputs (4sbh each); 16-bit logits sbV, fp32 final norm "
            "(counted twice at batch 1)")


# --- EleutherAI cookbook -----------------------------------------------------------------------
def eleuther(model: Model, opts: Options) -> Figures:
    """``calc_mem``: params with 2Vh, hs positions and 8h per layer of norms, mixed precision (2/4/12 bytes),
    ZeRO over ``num_gpus`` (= d*t*p here), activations of Korthikanti Table 2 without TP."""
    z, t, pp, b, s = model.sizes, opts.tp, opts.pp, opts.batch, opts.seq
    h, a, L = z["h"], z["a"], z["l"]
    # From a config.json: ffn_expansion_factor = f/h; num_mlp_linears and kv_size_ratio keep their defaults
    ff, n_lin, kv_ratio = Fraction(z["f"], h), 2, Fraction(1)
    params = (2 * z["V"] * h + h * s + 8 * h * L + 2 * h + int(2 * (1 + kv_ratio) * L * h * h)
              + n_lin * L * h * ff * h)
    gpus = opts.dp * t * pp
    weights = params * 2 / (t * pp) / (gpus if opts.zero == 3 else 1)
    el_parts = {"embeddings": 2 * z["V"] * h + h * s, "attention": int(2 * (1 + kv_ratio) * L * h * h),
                "mlp": n_lin * L * h * ff * h, "norms": 8 * h * L + 2 * h}
    why = {"parameters": explain_parameters(model, el_parts, "embeddings always untied (2Vh) plus h*s learned "
                                            "positions, 8h of norms per layer, two MLP matrices (num_mlp_linears "
                                            "default), K and V as wide as Q (GQA not read from config.json)")}
    if opts.mode == "infer":
        kv = 2 * h * L * (s + opts.new_tokens) * b  # no factor 2 for K and V, no GQA
        acts = s * b * h * (16 * 2 + 2)
        why.update(model_states="weights: the parameters above at 2 bytes",
                   kv_cache="2hL(s+n)b: the factor 2 for K and V left out (half a cache), GQA ignored",
                   activations="one layer's training activations, 34sbh",
                   total="weights + KV cache + activations, each as above")
        return Figures("eleuther", _round(params), _round(weights), acts, kv, _round(weights + kv + acts),
                       ELEUTHER, "GiB = 2^30 bytes", why)
    grads = params * 4 / (gpus if opts.zero >= 2 else 1)
    optim = params * 12 / (gpus if opts.zero >= 1 else 1)
    comm = (Fraction(5 * 10**8) * 2 if opts.zero >= 1 and gpus > 1 else 0) + (2 * 10**9 if opts.zero == 3 and gpus > 1 else 0)
    ckpt = opts.recompute != "none"
    acts = s * b * h * L * (34 + (0 if ckpt else Fraction(5 * a * s, h)))
    why.update(model_states="2 + 4 (fp32 gradients) + 12 bytes per parameter: 18, not split over t for gradients "
                            "and optimizer", activations="sbhL(34 + 5as/h) (Korthikanti without TP) whatever the MLP",
               total="model states + activations (+ ZeRO buffers)")
    return Figures("eleuther", _round(params), _round(weights + grads + optim + comm), _round(acts), None,
                   _round(weights + grads + optim + comm + acts), ELEUTHER, "GiB = 2^30 bytes", why)


# --- accelerate --------------------------------------------------------------------------------
def _buffers(model: Model) -> int:
    """Buffers transformers registers (rotary inv_freq and its original copy, d_h/2 floats each)."""
    return model.sizes["d_h"] // 2 * 2 if model.arch.positions == "rotary" else 0


def accelerate(model: Model, opts: Options) -> Figures:
    """``estimate-memory``: fp32 size of parameters and buffers; load = half of it in float16;
    "Training using Adam" = the largest of its four stages (8 bytes per parameter under mixed precision)."""
    params = graph_parameters(model, head=False)  # AutoModel.from_config: the base model, no LM head
    fp32 = 4 * (params + _buffers(model))
    load = fp32 // 2
    ac_parts = components(model)
    if not model.arch.tied_embeddings:
        ac_parts["embeddings"] -= model.sizes["V"] * model.sizes["h"]
    why = {"parameters": explain_parameters(model, ac_parts, "AutoModel builds the base model: no LM head"),
           "total": "load size only; accelerate says to add up to 20% for inference, no KV cache or activations"}
    if opts.mode == "infer":
        why["model_states"] = "float16 size of the base model's parameters and buffers, one GPU (no tensor parallelism)"
        return Figures("accelerate", params, load, None, None, load, ACCELERATE, "GB = 2^30 bytes", why)
    train = max(fp32, fp32 + fp32 // 2, 2 * fp32)  # model, gradients (fp32 + fp16), optimizer = step
    why.update(model_states="largest of four stages (model, gradients, optimizer, step) = 2 x fp32 size = 8 bytes "
                            "per parameter, not their sum", total="model states only (no activations), one GPU")
    return Figures("accelerate", params, train, None, None, train, ACCELERATE, "GB = 2^30 bytes", why)

