"""Strategies as pure ``Graph -> Graph`` transforms.

Compose them as a visible pipeline::

    g = SequenceParallel(t)(TensorParallel(t)(base))

Each returns a new graph (``dataclasses.replace``) and records its name in
``graph.strategies``; degree 1 is the identity.

>>> from memderive.symbolic.dims import t
>>> TensorParallel(1).name
'tensor parallel (t=1)'
"""

from __future__ import annotations

import abc

from dataclasses import dataclass, replace

from memderive.symbolic import dims
from memderive.symbolic.expr import Expr, Max, Min, const
from memderive.symbolic.graph import Block, Flop, Graph, Op
from memderive.symbolic.mtp_layer import FINAL_NORM, MTP_BLOCK
from memderive.symbolic.pipeline_layout import Chunk
from memderive.symbolic.tensor import Tensor
from memderive.symbolic.dtypes import dtype

__all__ = ["TensorParallel", "SequenceParallel", "SelectiveRecompute", "FullRecompute", "FlashAttention", "Freeze",
           "KeepFrozenInputs",
           "RequiresGrad", "fused_swiglu", "FUSED_SWIGLU",
           "PipelineParallel", "ContextParallel", "Strategy"]

PARAM_ROLES = frozenset({"weight", "bias"})
SCORE_ROLE = "attention-scores"


class Strategy(abc.ABC):
    """Abstract: a frozen dataclass whose call maps a graph to a graph."""

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """How writeups name the transform."""

    @abc.abstractmethod
    def __call__(self, graph: Graph) -> Graph:
        """The transformed graph (a new one; ``graph`` is unchanged)."""


def _degree(value: int | Expr) -> Expr:
    return const(value)


@dataclass(frozen=True, slots=True)
class TensorParallel(Strategy):
    """Megatron tensor parallelism: every tensor with a ``tp_axis`` is split over t ranks.

    Column-parallel weights split their output features, row-parallel their input features;
    attention splits heads and the output layer the vocabulary (Shoeybi et al. 2019).

    ``experts``: the expert tensor-parallel degree etp of Megatron-Core's MoE parallel folding
    (``expert_tensor_parallel_size``, default the tensor-parallel size: Megatron-LM arguments.py; Liu et al. 2025,
    arXiv:2504.14960), None for t. The routed experts' weights split over etp instead of t, and an expert GPU
    computes on the tokens of its etp expert-tensor ranks: the alltoall dispatcher sends each rank's b s/t tokens'
    k copies over the ep ranks and all-gathers them over the etp ranks (token_dispatcher.py
    ``MoEAlltoAllTokenDispatcher``: ``num_global_tokens = num_local_tokens * tp_size * ep_size``, its tp group the
    expert tensor-parallel one), so b s k etp/t token-expert rows at width f_e/etp (their product, in FLOPs and
    bytes, 1/t of the whole as without folding).

    >>> from memderive.symbolic.dims import b, s, k, E, f_e, h, t, etp
    >>> from memderive.symbolic.dtypes import dtype
    >>> from memderive.symbolic.ops import BlockBuilder
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.experts("moe/experts", bb.input, E, k, f_e, kind="swiglu", bias=False)
    >>> op = TensorParallel(t, experts=etp)(Graph("toy", (bb.build(),))).blocks[0].ops[0]
    >>> op.params[0].shape, next(x for x in op.saved if x.name.endswith(".hidden")).shape
    ((E, 2*f_e/etp, h), (b, etp*s/t, k, f_e/etp))
    """

    t: int | Expr
    experts: int | Expr | None = None

    @property
    def name(self) -> str:
        name = "tensor parallel" if self.t == dims.t else f"tensor parallel (t={self.t})"
        if self.experts is None:
            return name
        return f"{name}, routed experts over {'etp' if self.experts == dims.etp else f'etp={self.experts}'}"

    def __call__(self, graph: Graph) -> Graph:
        t = _degree(self.t)
        folded = self.experts is not None and _degree(self.experts) != t
        if t == 1 and not folded:
            return graph

        def split(tensor: Tensor) -> Tensor:
            return tensor.split(tensor.tp_axis, t) if tensor.tp_axis is not None else tensor

        if not folded:
            return graph.map_blocks(lambda blk: blk.map_tensors(split), self.name)
        etp = _degree(self.experts)

        def fold(tensor: Tensor) -> Tensor:
            """A routed-expert op's tensor: weights over etp; the rows an expert GPU computes on, b s k etp/t (axis
            1 of the row tensor and of the width-f_e buffers), those buffers' width over etp. The buffers at width h
            keep their rows here (``SequenceParallel`` splits them by t/etp: the all-gather over the etp ranks)."""
            if tensor.role in PARAM_ROLES:
                return tensor.split(tensor.tp_axis, etp) if tensor.tp_axis is not None else tensor
            if tensor.tp_axis is not None:
                return tensor.split(tensor.tp_axis, etp).split(1, t / etp)
            # the (b, s, k) rows of the experts' FLOPs: seq_axis None, as sequence parallelism leaves them whole
            return tensor.split(1, t / etp) if tensor.role == "expert-buffer" and tensor.seq_axis is None else tensor

        def per_op(op: Op) -> Op:  # "experts": symbolic.experts.EXPERTS (that module imports this one)
            return op.map_tensors(fold) if op.kind == "experts" else op.map_tensors(split)

        return graph.map_blocks(lambda blk: replace(blk.map_ops(per_op), input=split(blk.input)), self.name)


@dataclass(frozen=True, slots=True)
class SequenceParallel(Strategy):
    """Sequence parallelism (Korthikanti et al. 2022 §4.2.2): activations that tensor
    parallelism leaves whole (norm and dropout regions, linear inputs) are split along s.

    The routed experts' buffers at width h (their gathered inputs and outputs) are the exception: each rank
    dispatches its s/t tokens, and the expert GPU all-gathers what it receives over its ``experts`` (etp)
    expert tensor-parallel ranks (Megatron-Core's ``MoEAlltoAllTokenDispatcher``: ``gather_from_sequence_parallel_
    region`` over the expert tensor-parallel group after the all-to-all), so those rows are split by t/etp: not at
    all when etp = t (``experts`` None), by t under MoE parallel folding's etp 1.

    >>> from memderive.symbolic.dims import b, s, k, E, h, t, etp
    >>> from memderive.symbolic.dtypes import dtype
    >>> from memderive.symbolic.ops import BlockBuilder
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> _ = bb.experts("moe/experts", bb.input, E, k, 4 * h, kind="swiglu", bias=False)
    >>> g = Graph("toy", (bb.build(),))
    >>> [next(x for x in SequenceParallel(t, e)(g).blocks[0].ops[0].saved if x.name.endswith(".gathered")).shape
    ...  for e in (None, etp)]
    [(b, s, k, h), (b, etp*s/t, k, h)]
    """

    t: int | Expr
    experts: int | Expr | None = None

    @property
    def name(self) -> str:
        return "sequence parallel" if self.t == dims.t else f"sequence parallel (t={self.t})"

    def __call__(self, graph: Graph) -> Graph:
        t = _degree(self.t)
        if t == 1:
            return graph
        gathered = 1 if self.experts is None else t / _degree(self.experts)  # the expert buffers' split

        def split(tensor: Tensor) -> Tensor:
            if tensor.role in PARAM_ROLES or tensor.tp_axis is not None or tensor.seq_axis is None:
                return tensor
            if tensor.role == "expert-buffer":
                return tensor if gathered == 1 else tensor.split(tensor.seq_axis, gathered)
            return tensor.split(tensor.seq_axis, t)

        return graph.map_blocks(lambda blk: blk.map_tensors(split), self.name)


@dataclass(frozen=True, slots=True)
class ContextParallel(Strategy):
    """Context parallelism over c ranks (Megatron-Core's ``--context-parallel-size``, torchtitan's
    ``context_parallel_degree``): each rank holds s/c of every sequence's tokens in every block (embedding, layers,
    loss), weights whole; ring attention (Liu et al. 2023) passes the K/V chunks round the c ranks so each rank's
    queries attend to all s keys. Every activation's first sequence axis is divided by c: a score tensor
    ``b a s s`` keeps its key axis (the rank's s/c queries against all s keys), so the attention's FLOPs per rank
    are 1/c of the whole, as every other product's are. The K/V chunks in flight are a working buffer of the
    attention (``training.context_parallel_buffers``), not saved.

    >>> from memderive.symbolic.dims import b, a, s, cp
    >>> from memderive.symbolic.dtypes import dtype
    >>> ContextParallel(cp)._split(Tensor("scores", (b, a, s, s), dtype("bf16"))).shape
    (b, a, s/cp, s)
    """

    c: int | Expr

    @property
    def name(self) -> str:
        return "context parallel (ring attention)" if self.c == dims.cp else f"context parallel (c={self.c})"

    def _split(self, tensor: Tensor) -> Tensor:
        if tensor.role in PARAM_ROLES:
            return tensor
        for axis, size in enumerate(tensor.shape):
            if size == dims.s:
                return tensor.split(axis, _degree(self.c))
        return tensor

    def __call__(self, graph: Graph) -> Graph:
        if _degree(self.c) == 1:
            return graph
        return graph.map_blocks(lambda blk: blk.map_tensors(self._split), self.name)


def _drop_saved(op: Op, roles: frozenset[str]) -> Op:
    return replace(op, saved=tuple(x for x in op.saved if x.role not in roles))


@dataclass(frozen=True, slots=True)
class SelectiveRecompute(Strategy):
    """Recompute the attention core (softmax, its dropout) in backward: the ``as^2`` tensors
    are not stored (Korthikanti et al. 2022 §5); the core's forward FLOPs run again."""

    @property
    def name(self) -> str:
        return "selective recompute"

    def __call__(self, graph: Graph) -> Graph:
        roles = frozenset({SCORE_ROLE})

        def select(op: Op) -> Op:
            op = _drop_saved(op, roles)
            return op.recomputed() if op.kind == "attention" else op

        return graph.map_blocks(lambda blk: blk.map_ops(select), self.name)


@dataclass(frozen=True, slots=True)
class FullRecompute(Strategy):
    """Checkpoint each layer's input and recompute the layer (its whole forward) in backward. ``share``: the
    fraction of the layers checkpointed (Megatron's ``--recompute-method block``: ``recompute_layers`` of each model
    chunk's, ``Options.recompute_share``); their recompute's FLOPs are that share of the layers'. What the layers
    that are not checkpointed save is the memory quantities' (``quantities.training``): the graph holds the
    checkpointed layer."""

    share: Expr | int = 1

    @property
    def name(self) -> str:
        return "full recompute" if const(self.share) == const(1) else "full recompute of some layers"

    def __call__(self, graph: Graph) -> Graph:
        def checkpoint(blk: Block) -> Block:
            if blk.name == MTP_BLOCK:
                return _mtp_checkpoint(blk)
            if blk.name != "layer":
                return blk
            ops = tuple(replace(op, saved=()).recomputed(self.share) for op in blk.ops)
            keep = Op("checkpoint", "checkpoint", (), (blk.input,), blk.input, "layer input kept for recompute")
            return replace(blk, ops=(keep, *ops))

        return graph.map_blocks(checkpoint, self.name)


def _mtp_checkpoint(blk: Block) -> Block:
    """An MTP layer under full recompute (``derivations.models.mtp``): Megatron-Core checkpoints its
    ``_proj_and_transformer_layer`` (multi_token_prediction.py ``MultiTokenPredictionLayer.forward``:
    ``recompute_granularity == 'full'`` -> ``_checkpointed_forward``), the norms, eh_proj and the layer, keeping the
    two tensors it reads (the hidden states and the shifted tokens' embedding); its final norm, the output layer and
    the loss run after it and save as usual."""
    end = next(i for i, op in enumerate(blk.ops) if op.path == FINAL_NORM)
    region = blk.ops[:end]
    made = tuple(f"{op.path}." for op in region)  # what the region makes, views included (``<op path>.*``)
    read = {x.name: x for op in region for x in op.saved if x.name in op.inputs and not x.name.startswith(made)}
    keep = Op("checkpoint", "checkpoint", (), tuple(read.values()), blk.input,
              "MTP layer's inputs kept for recompute")
    return replace(blk, ops=(keep, *(replace(op, saved=()).recomputed() for op in region), *blk.ops[end:]))


@dataclass(frozen=True, slots=True)
class FlashAttention(Strategy):
    """FlashAttention (Dao et al. 2022 §3.1; FA-2 §3.1.1): the s x s scores are never stored;
    backward keeps q, k, v, the output O and the fp32 row-wise logsumexp (b, a, s). ``kernel``
    ``sdpa`` names PyTorch's memory-efficient scaled_dot_product_attention, which saves the same.
    Both recompute the scores ``q k^T`` and their softmax in backward (FLOPs as FlopCounterMode's
    ``sdpa_backward_flop_count``: five products where eager attention's backward has four)."""

    kernel: str = "flash"
    #: the attention ops are already as transformers runs them (``symbolic.huggingface``): one still of kind
    #: ``attention`` is SDPA's math fallback (fp32 scores saved), kept as it is
    chosen: bool = False

    @property
    def name(self) -> str:
        return "FlashAttention" if self.kernel == "flash" else "memory-efficient attention (sdpa)"

    def __call__(self, graph: Graph) -> Graph:
        def flash(op: Op) -> Op:
            if op.kind != "attention" or self.chosen:
                return op
            q = next(x for x in op.saved if x.role == "q")
            lse = Tensor(f"{op.path}.logsumexp", q.shape[:3], _fp32(), role="softmax-stats",
                         tp_axis=q.tp_axis, seq_axis=q.seq_axis)
            kept = tuple(x for x in op.saved if x.role != SCORE_ROLE)
            # The fused backward needs q, k, v, O and the logsumexp for any of the three gradients.
            again = tuple(replace(x, phase="recompute") for x in op.flops
                          if x.phase == "forward" and (x.name.endswith("q@k^T") or x.name.endswith("softmax")))
            return replace(op, kind="flash-attention", saved=(*kept, op.output, lse), saved_for=(),
                           flops=op.flops + again)

        return graph.map_blocks(lambda blk: blk.map_ops(flash), self.name)


#: Megatron-LM's fused SwiGLU, the default of its MLP (``--no-bias-swiglu-fusion`` turns it off; ``MLP.forward``
#: calls ``bias_swiglu_impl`` when ``bias_activation_fusion`` and the activation is a gated SiLU).
FUSED_SWIGLU = ("Megatron-LM's fused SwiGLU (megatron/core/fusions/fused_bias_swiglu.py, SwiGLUFunction: "
                "ctx.save_for_backward(input), the gate and up halves of fc1's output; silu(gate) and the product "
                "recomputed in backward)")


def fused_swiglu(graph: Graph) -> Graph:
    """Each ``silu(gate) * up`` op as Megatron-LM runs it, one autograd function that saves only its input:
    the gate and the up projections (the backward ``swiglu_back`` recomputes silu(gate) from them), where
    the unfused op also saves silu(gate). The product, fc2's input, is still saved by fc2.

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h, f
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> gate, up = (bb.linear(f"mlp/{x}", bb.input, f, bias=False) for x in ("gate", "up"))
    >>> _ = bb.gated("mlp/act", gate, up, "silu")
    >>> op = bb.ops[-1]
    >>> [x.name for x in op.saved], [x.name for x in _fused_glu(op).saved]
    (['mlp/gate.out', 'mlp/act.act', 'mlp/up.out'], ['mlp/gate.out', 'mlp/up.out'])
    """
    if not any(op.kind == "silu-glu" for blk in graph.blocks for op in blk.ops):
        return graph
    return replace(graph, blocks=tuple(blk.map_ops(_fused_glu) for blk in graph.blocks),
                   assumptions=graph.assumptions + (FUSED_SWIGLU,))


def _fused_glu(op: Op) -> Op:
    if op.kind != "silu-glu":
        return op
    gate, up = op.inputs
    kept = tuple(x for x in op.saved if x.name in (gate, up))
    return replace(op, saved=kept, saved_for=tuple((x.name, (gate, up)) for x in kept))


def _fp32():
    return dtype("fp32")


@dataclass(frozen=True, slots=True)
class PipelineParallel(Strategy):
    """Pipeline parallelism over p stages, as seen by one stage (Narayanan et al. 2021).

    ``stage="first"`` (the most loaded under 1F1B, Korthikanti et al. 2022 §4.2.3) holds the
    embedding and l/p layers, with p micro-batches in flight (min(p, m) when m is given); the
    interleaved schedule with v virtual stages holds p + (p-1)/v, never more than m (``in_flight``).
    ``stage="last"`` holds l/p layers, one micro-batch in flight (interleaved, p - (p-1)/v, at most m), and the
    output layer, one micro-batch in flight either way.

    Uneven stages (Megatron-LM's ``--decoder-first-pipeline-num-layers`` and
    ``--decoder-last-pipeline-num-layers``; Llama 3 405B: 126 layers on 16 stages, one fewer on the
    first and the last, Dubey et al. 2024 §3.3.2): ``first_layers`` / ``last_layers`` layers on the
    first / last stage, the rest ``(l - first - last)/(p - stages given)`` on each other stage.
    ``stage="middle"`` is the second stage: those layers with p - 1 micro-batches in flight
    (min(p - 1, m)), the most a middle stage holds under 1F1B; interleaved, p + (p - 3)/v (Megatron-LM's
    warm-up on rank 1: 2(p - 2) + (v - 1)p chunk micro-batches and the one in flight, each 1/v of the layers),
    at most m.

    A custom layout (Megatron-Core's ``--pipeline-model-parallel-layout``, ``symbolic.pipeline_layout``): ``chunks``
    are the rank's model chunks and ``flight`` the micro-batches each holds at the rank's peak
    (``chunks_in_flight``, Megatron-LM's schedule run chunk by chunk); ``stage`` names the rank (``rank 3``). The
    rank holds the decoder layers of its chunks, the embedding and the output layer where its chunks hold E and L.

    >>> from memderive.symbolic.dims import l
    >>> PipelineParallel(16, stage="middle", first_layers=7, last_layers=7).layers(l)
    l/14 - 1
    """

    p: int | Expr
    virtual: int | Expr | None = None
    micro_batches: int | Expr | None = None
    stage: str = "first"
    first_layers: int | None = None
    last_layers: int | None = None
    chunks: tuple[Chunk, ...] | None = None
    flight: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        degree = "" if self.p == dims.p else f"p={self.p}, "
        virtual = "" if self.virtual in (None, 1) else ("interleaved, " if self.virtual == dims.v
                                                        else f"interleaved v={self.virtual}, ")
        uneven = "" if self.uneven is None else f"{self.uneven}, "
        if self.chunks is not None:
            return f"pipeline parallel ({degree}{virtual}layout {'|'.join(c.text for c in self.chunks)}, {self.stage})"
        return f"pipeline parallel ({degree}{virtual}{uneven}{self.stage} stage)"

    @property
    def uneven(self) -> str | None:
        """How the layers are split when not evenly (None: l/p on every stage)."""
        if self.first_layers is None and self.last_layers is None:
            return None
        given = [f"{k} {n}" for k, n in (("first", self.first_layers), ("last", self.last_layers)) if n is not None]
        return " and ".join(given) + " layers"

    def layers(self, total: Expr) -> Expr:
        """Layers this stage holds of ``total``."""
        p = _degree(self.p)
        if self.chunks is not None:
            return const(sum(c.layers for c in self.chunks))
        if self.uneven is None:
            return total / p
        own = self.first_layers if self.stage == "first" else self.last_layers if self.stage == "last" else None
        if own is not None:
            return const(own)
        fixed = [n for n in (self.first_layers, self.last_layers) if n is not None]
        if not isinstance(self.p, int) or self.p <= len(fixed):
            raise ValueError(f"uneven pipeline stages need a number of stages past the {len(fixed)} given, "
                             f"not {self.p}")
        return (total - sum(fixed)) / (self.p - len(fixed))

    def in_flight(self) -> Expr:
        """Micro-batches whose activations the stage holds at once, in units of all its layers.

        The stage is rank r = 0 (first), 1 (middle) or p - 1 (last). 1F1B: the warm-up runs p - r - 1 micro-batches
        and the steady state holds one more, p - r: p on the first stage, p - 1 on the second, 1 on the last.
        Interleaved (Korthikanti et al. 2022 §4.2.3: the first stage holds 1 + (p-1)/(p v) times p): Megatron-LM's
        warm-up on rank r runs 2(p - r - 1) + (v - 1) p chunk micro-batches (the micro-batch group is p unless
        ``--microbatch-group-size-per-virtual-stage`` says otherwise), each 1/v of the stage's layers, and the
        steady state holds one more: p + (p - 2r - 1)/v, so p + (p - 1)/v on the first rank, p + (p - 3)/v on the
        second, p - (p - 1)/v on the last. Either way never more than the m micro-batches of the step: the warm-up
        stops at all m v chunk micro-batches (``get_pp_rank_microbatches``, references ``megatron-schedules``), so
        with m given the count is the smaller of the two. (Before Megatron-LM's tunable schedule, commit 4295be1a6c
        of November 2024, m = p ran every forward first: m on every rank, more than p - (p - 1)/v on the last.)"""
        p = _degree(self.p)
        if self.virtual in (None, 1):
            if self.stage == "last":  # one micro-batch, and m >= 1
                return const(1)
            held = p - (1 if self.stage == "middle" else 0)
        else:
            rank = {"first": const(0), "middle": const(1)}.get(self.stage, p - 1)
            v = _degree(self.virtual)
            chunks = p * v + p - 2 * rank - 1  # chunk micro-batches held: the warm-up and one more
            # NOTE(in_flight): the cap as min(chunks, m v)/v, not min(chunks/v, m): the same number, but a minimum of
            # whole numbers, which the layout grid sweeps in int64 (a fraction inside Min sends every row of a plan
            # through the per-row evaluator)
            return chunks / v if self.micro_batches is None else Min(chunks, _degree(self.micro_batches) * v) / v
        return held if self.micro_batches is None else Min(held, _degree(self.micro_batches))

    def __call__(self, graph: Graph) -> Graph:
        p = _degree(self.p)
        if p == 1:
            return graph
        if self.chunks is not None:
            return self._layout(graph)
        if self.stage not in ("first", "middle", "last"):
            raise ValueError(f"stage must be 'first', 'middle' or 'last', not {self.stage!r}")
        kept = {"first": {"embed", "layer"}, "middle": {"layer"}, "last": {"layer", MTP_BLOCK, "head"}}[self.stage]
        if self.stage == "last" and graph.has_block(MTP_BLOCK):  # Megatron-Core builds the embedding on the MTP rank
            kept = kept | {"embed"}  # (models/gpt/gpt_model.py L173: pre_process or mtp_process; models.mtp)
        flight = self.in_flight()
        blocks = []
        for blk in graph.blocks:
            if blk.name not in kept:
                continue
            if blk.name == "layer":
                blk = replace(blk, repeat=self.layers(blk.repeat))
            # NOTE(lastinflight): the output layer is in the last rank's last chunk, whose backward of a micro-batch
            # runs straight after its forward (1F1B, and interleaved: the warm-up fills the other v - 1 chunks), so
            # it holds one micro-batch whatever the stage's layers hold; so do the MTP layers before it and the
            # embedding lookup of their shifted tokens on that rank.
            own = const(1) if self.stage == "last" and blk.name in ("head", MTP_BLOCK, "embed") else flight
            blocks.append(replace(blk, in_flight=blk.in_flight * own))
        count = "l/p" if self.uneven is None else "its"
        interleaved = self.virtual not in (None, 1)
        note = {"first": f"first pipeline stage: embedding and {count} layers, p micro-batches in flight (1F1B)",
                "middle": f"second pipeline stage: {count} layers, "
                          + ("p + (p-3)/v micro-batches in flight, at most m (interleaved warm-up)" if interleaved
                             else "p - 1 micro-batches in flight (1F1B)"),
                "last": f"last pipeline stage: {count} layers and the output layer"
                        + (", p - (p-1)/v micro-batches in flight, at most m (interleaved warm-up)" if interleaved
                           else "")}[self.stage]
        if self.uneven is not None:
            note += f" (uneven stages: {self.uneven}, the rest evenly over the other stages)"
            if interleaved:  # a chunk of the embedding or loss alone holds more in flight than the layers' chunks
                note += "; interleaved: each chunk counted at the stage's average, an upper bound when a first or " \
                        "last chunk holds only the embedding or the loss"
        return replace(graph, blocks=tuple(blocks), strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))

    def _layout(self, graph: Graph) -> Graph:
        """The rank of a custom layout: each chunk's decoder layers with the micro-batches that chunk holds
        (``flight``), the block's ``in_flight`` their layer-weighted sum over the rank's layers, so that the saved
        bytes are each chunk's layers times its own count; the embedding with its chunk's count, the output layer
        with one (NOTE(lastinflight)). A MoE model's dense layers (the first ``l_d``) are counted where they sit:
        ``min(max(l_d - first, 0), layers)`` of each chunk."""
        chunks, flight = self.chunks, self.flight
        assert chunks is not None and flight is not None  # __call__ calls it where chunks is set
        n = sum(c.layers for c in chunks)
        held = sum(c.layers * f for c, f in zip(chunks, flight))
        dense = sum((Min(Max(dims.l_d - c.first, 0), c.layers) for c in chunks if c.layers), const(0))
        blocks = []
        for blk in graph.blocks:
            if blk.name == "layer":
                ops = blk.ops if not n else tuple(
                    op if not isinstance(op.share, Expr) or dims.l_d not in op.share.free_symbols
                    else replace(op, share=op.share.subs({dims.l_d: dense * dims.l / n})) for op in blk.ops)
                blk = replace(blk, ops=ops, repeat=const(n),
                              in_flight=blk.in_flight * (const(held) / n if n else const(0)))
            elif blk.name == "embed" and any(c.embedding or c.mtp for c in chunks):  # the MTP rank's own copy
                blk = replace(blk, in_flight=blk.in_flight * next(f for c, f in zip(chunks, flight)
                                                                  if c.embedding or c.mtp))
            elif blk.name == MTP_BLOCK and any(c.mtp for c in chunks):  # its chunk's micro-batches, as its layers'
                blk = replace(blk, repeat=const(sum(c.mtp for c in chunks)),
                              in_flight=blk.in_flight * next(f for c, f in zip(chunks, flight) if c.mtp))
            elif blk.name != "head" or not any(c.loss for c in chunks):
                continue
            blocks.append(blk)
        shown = ", ".join(f"{c.text or '(empty)'}: {f}" for c, f in zip(chunks, flight))
        note = (f"pipeline {self.stage} of {self.p} (--pipeline-layout): {n} decoder layers in chunks {shown} "
                "micro-batches in flight at the rank's peak (Megatron-LM's schedule run chunk by chunk)")
        if any(c.mtp for c in chunks):
            note += "; its MTP layers (m) with the embedding's copy Megatron-Core builds for them (models.mtp)"
        if dims.l_d in graph.block("layer").repeat.free_symbols or any(
                isinstance(op.share, Expr) and dims.l_d in op.share.free_symbols for op in graph.block("layer").ops):
            note += ("; dense and MoE layers counted where they sit, their saved tensors at the rank's "
                     "layer-weighted in-flight count")
        return replace(graph, blocks=tuple(blocks), strategies=graph.strategies + (self.name,),
                       assumptions=graph.assumptions + (note,))




@dataclass(frozen=True, slots=True)
class Freeze(Strategy):
    """Freeze parameters: no gradient, no optimizer state (``graph.frozen``).

    ``params`` and ``keep`` are prefixes of ``block/param`` names (``embed/`` is the embedding
    block, ``""`` every parameter); a parameter is frozen when it matches ``params`` and not
    ``keep``. What autograd saves follows from the frozen set: apply ``RequiresGrad`` last.

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> y = bb.linear("fc2", bb.linear("fc1", bb.input, 4 * h, bias=True), h, bias=True)
    >>> g = Freeze(("layer/fc1",))(Graph("toy", (bb.build(),)))
    >>> sorted(g.frozen), [op.saved for op in RequiresGrad()(g).blocks[0].ops][0]
    (['layer/fc1.bias', 'layer/fc1.weight'], ())
    """

    params: tuple[str, ...] = ("",)
    keep: tuple[str, ...] = ()
    keep_kinds: tuple[str, ...] = ()  # op kinds whose parameters stay trainable (e.g. rms_norm)

    @property
    def name(self) -> str:
        kept = ", ".join((*self.keep, *self.keep_kinds))
        return f"frozen {', '.join(p or 'all parameters' for p in self.params)}" + (f" except {kept}" if kept else "")

    def __call__(self, graph: Graph) -> Graph:
        frozen = {f"{blk.name}/{x.name}" for blk, op in graph.ops() for x in op.params if op.kind not in self.keep_kinds}
        frozen = {x for x in frozen if x.startswith(self.params) and not (self.keep and x.startswith(self.keep))}
        return replace(graph, frozen=graph.frozen | frozenset(frozen), strategies=graph.strategies + (self.name,))


@dataclass(frozen=True, slots=True)
class KeepFrozenInputs(Strategy):
    """Linears that hold their input for backward though their weight is frozen: bitsandbytes' 4-bit linear
    (``MatMul4Bit.forward``: ``if any(ctx.needs_input_grad[:2]): ctx.tensors = (A, B)``,
    bitsandbytes/autograd/_functions.py) keeps A whenever A requires grad, where ``nn.Linear`` with a frozen
    weight saves nothing. Applies to the frozen weight matrices of the linears in the blocks ``blocks``
    (the layers: the output layer stays 16-bit); apply it after the frozen set is final (``Freeze``, LoRA).

    >>> from memderive.symbolic.ops import BlockBuilder
    >>> from memderive.symbolic.dims import b, s, h
    >>> from memderive.symbolic.dtypes import dtype
    >>> bb = BlockBuilder("layer", (b, s, h), dtype("bf16"))
    >>> y = bb.linear("fc2", bb.linear("fc1", bb.input, h, bias=False), h, bias=False)
    >>> g = Freeze(("layer/fc2",))(Graph("toy", (bb.build(),)))
    >>> [[[x.name for x in op.saved] for op in RequiresGrad()(x).blocks[0].ops] for x in (g, KeepFrozenInputs()(g))]
    [[['in'], []], [['in'], ['fc1.out']]]
    """

    blocks: tuple[str, ...] = ("layer", "first_layer")

    @property
    def name(self) -> str:
        return "frozen 4-bit linears keep their inputs (bitsandbytes MatMul4Bit)"

    def __call__(self, graph: Graph) -> Graph:
        def keep(blk: Block) -> Block:
            if blk.name not in self.blocks:
                return blk
            ops = []
            for op in blk.ops:
                weights = {f"{x.name}" for x in op.params if x.role == "weight" and not graph.trainable(blk.name, x.name)}
                if op.kind == "linear" and weights:
                    op = replace(op, saved_for=tuple((name, grads if not set(grads) <= weights else (*grads, name))
                                                     for name, grads in op.saved_for))
                ops.append(op)
            return replace(blk, ops=tuple(ops))

        return graph.map_blocks(keep, self.name, "bitsandbytes' 4-bit linears hold their inputs for backward")


def _live_ops(blk: Block, graph: Graph, live_in: bool) -> tuple[tuple[Op, ...], bool]:
    """The block's ops with only the saved tensors some live gradient needs, and whether its output
    requires grad. A tensor requires grad when a trainable parameter or a live input produced it; an
    op none of whose inputs or parameters requires grad records no backward node: it saves nothing
    and does no backward work; one whose inputs need no gradient computes none for them."""
    outputs = {op.output.name: op for op in blk.ops}
    paths = sorted((op.path for op in blk.ops), key=len, reverse=True)
    by_path = {op.path: op.output.name for op in blk.ops}
    live = {blk.input.name} if live_in else set()

    def source(name: str) -> str:  # a view such as attn/qkv.q resolves to attn/qkv.out (an adapter's sum)
        if name in outputs or name == blk.input.name:
            return name
        path = next((p for p in paths if name.startswith(p + ".")), None)
        if path is None:
            return name
        return f"{path}.out" if f"{path}.out" in outputs else by_path[path]

    def needed(name: str) -> bool:
        if _is_param(name, blk, graph):
            return graph.trainable(blk.name, name)
        return source(name) in live

    ops = []
    for op in blk.ops:
        if op.kind == "checkpoint":  # the recomputed layer's input is held whatever requires grad
            ops.append(op)
            continue
        targets = {g for _, grads in op.saved_for for g in grads}
        own = [x.name for x in op.params] + [g for g in targets if _is_param(g, blk, graph)]
        reads = any(needed(x) for x in op.inputs) if op.inputs else bool(live)
        if not (reads or any(graph.trainable(blk.name, x) for x in own)):  # no backward node at all
            ops.append(replace(op, saved=(), flops=tuple(x for x in op.flops if x.phase not in BACKWARD)))
            continue
        live.add(op.output.name)
        kept = tuple(x for x in op.saved if (grads := op.needs(x)) is None or any(needed(g) for g in grads))
        # a frozen weight's gradient is never computed (autograd: no grad_fn input for it; Transformer Engine's
        # linears: ctx.requires_wgrad = weight.requires_grad), nor, with no live input, the input's
        work = tuple(x for x in op.flops if (reads or x.phase != "input-grad")
                     and not (x.phase == "weight-grad" and x.param is not None and not graph.trainable(blk.name, x.param)))
        if op.kind == "attention" and reads:
            work = _attention_grads(work, *(needed(x) for x in op.inputs))
        ops.append(replace(op, saved=kept, flops=work))
    return tuple(ops), blk.ops[-1].output.name in live if blk.ops else live_in


#: Backward work: none for an op that records no node; no input gradient where no input needs one.
BACKWARD = ("input-grad", "weight-grad")


def _renamed_keeps(ops: tuple[Op, ...], old: str, new: str) -> tuple[Op, ...]:
    """``ops`` of the block ``old`` moved to the block ``new``: a kernel held until an op of its own block
    (``keep="layer/attn/rotary_k"``) is held until that op of ``new``'s instance, not of ``old``'s last one."""
    def kernel(k):
        return replace(k, keep=f"{new}/{k.keep[len(old) + 1:]}") if k.keep.startswith(f"{old}/") else k
    return tuple(replace(op, program=tuple(kernel(k) for k in op.program)) if op.program else op for op in ops)


def _attention_grads(work: tuple[Flop, ...], q: bool, k: bool, v: bool) -> tuple[Flop, ...]:
    """Eager attention's backward computes only the gradients some input needs: ``q k^T`` gives dq and
    dk (half its input-gradient products each), ``P v`` gives dP (for q or k) and dv; without q and k
    the softmax (and dropout) backward is skipped too."""
    share = {"q@k^T": q + k, "P@v": (q or k) + v}
    out = []
    for x in work:
        op_name = x.name.rsplit(" ", 1)[-1]
        if x.phase != "input-grad":
            out.append(x)
        elif op_name in share:
            if share[op_name]:
                out.append(replace(x, coef=x.coef * share[op_name] / 2))
        elif q or k:
            out.append(x)
    return tuple(out)


def _is_param(name: str, blk: Block, graph: Graph) -> bool:
    tied = name.startswith("embed/") and name.endswith((".weight", ".bias"))  # the LM head's tied weight
    return tied or any(x.name == name for op in blk.ops for x in op.params)


@dataclass(frozen=True, slots=True)
class RequiresGrad(Strategy):
    """Keep only what backward needs when some parameters are frozen (``graph.frozen``).

    Autograd saves a tensor for a purpose (a linear saves its input for its weight's gradient; a norm
    its input and statistics for the input's gradient). Requires-grad flows forward from trainable
    parameters: with frozen embeddings, the first layer's ops before the first trainable one save
    nothing, so the ``layer`` block splits into ``first_layer`` (once) and ``layer`` (the rest) when
    the two differ. A pipeline stage without the embedding takes an input that requires grad when a
    layer has something trainable. Apply it after every other strategy.
    """

    @property
    def name(self) -> str:
        return "saved tensors of frozen weights dropped"

    def __call__(self, graph: Graph) -> Graph:
        if not graph.frozen:
            return graph
        blocks: list[Block] = []
        frozen = set(graph.frozen)
        live = False  # token ids never require grad
        if not graph.has_block("embed") and graph.has_block("layer"):
            live = _live_ops(graph.block("layer"), graph, False)[1]
        for blk in graph.blocks:
            if blk.name != "layer":
                ops, live = _live_ops(blk, graph, live)
                blocks.append(replace(blk, ops=ops))
                continue
            first, live_after = _live_ops(blk, graph, live)
            steady, live_out = _live_ops(blk, graph, live_after)
            if first != steady:
                frozen |= {f"first_layer/{x[len('layer/'):]}" for x in graph.frozen if x.startswith("layer/")}
                blocks.append(replace(blk, name="first_layer", ops=_renamed_keeps(first, "layer", "first_layer"),
                                      repeat=const(1)))
                blocks.append(replace(blk, ops=steady, repeat=blk.repeat - 1))
            else:
                blocks.append(replace(blk, ops=steady))
            live = live_out
        return replace(graph, blocks=tuple(blocks), frozen=frozenset(frozen), strategies=graph.strategies + (self.name,))
