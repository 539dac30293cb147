"""The time of Megatron-Core's Muon step on one GPU (``--optimizer muon``; states: ``model_states.second_state_elements``).

Muon orthogonalizes each owned matrix's Nesterov momentum with Newton-Schulz iterations (Emerging-Optimizers'
``newton_schulz``, ``NS_CITATION``): the iterate X is transposed so that it has m = min(rows, cols) rows and
n = max(rows, cols) columns, normalized, cast to bf16 (fp32 matmul precision ``medium``, Megatron-Bridge's Kimi-K2
recipe), and each of the ``NS_STEPS`` iterations runs three products::

    A = X X^T          (m x n) (n x m): 2 m^2 n FLOPs
    B = b A + c A A    (m x m) (m x m): 2 m^3
    X = a X + B X      (m x m) (m x n): 2 m^2 n

4 m^2 n + 2 m^3 FLOPs per iteration, each product at the matmul rate of its own shape (``efficiency.matmul_rate``).
Under ``--zero 1`` (Megatron-Core's LayerWiseDistributedOptimizer) each data-parallel rank steps the whole
parameters dealt to it, the routed experts' over the expert data-parallel ranks (the code deals them sorted by
size, ping-pong: ``model_states.MUON_NOTE``), and the step waits for the busiest: the mean rank's 1/d of the GPU's
matrices, or the one parameter with the most Newton-Schulz work where that is more (``newton_schulz_s``). Under tensor
parallelism the recipe's ``muon_tp_mode`` blockwise orthogonalizes each rank's own block: the per-GPU shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memderive.derivations.columns import is_column, maximum, minimum, where
from memderive.derivations.quantities.expert_states import expert_zero_ranks
from memderive.derivations.quantities.memory_bound import layout_int
from memderive.derivations.quantities.model_states import as_matrices, muon_owned, stored_parameters
from memderive.derivations.quantity import Evaluated
from memderive.symbolic import dims
from memderive.symbolic.experts import expert_ops
from memderive.symbolic.expr import Expr
from memderive.symbolic.formula import Citation
from memderive.symbolic.graph import Graph

__all__ = ["NS_STEPS", "NS_CITATION", "newton_schulz_flops", "newton_schulz_products",
           "muon_matrices", "newton_schulz_s"]

#: Newton-Schulz iterations per step: Megatron-Bridge v0.4.0's distributed_muon_with_cosine_annealing
#: (muon_num_ns_steps=5), Megatron-Core's OptimizerConfig default too; the quintic coefficient set has 5 rows.
NS_STEPS = 5
NS_CITATION = Citation("emerging-optimizers-muon", "newton_schulz: transpose = x.size(-2) > x.size(-1); X.to(bfloat16) "
                       "under fp32 matmul precision 'medium'; newton_schulz_step: A = X @ X.mT, B = torch.addmm(A, A, "
                       "A, alpha=c, beta=b), X = torch.addmm(X, B, X, alpha=1.0, beta=a)", also=(
                           Citation("bridge-kimi-k2", "distributed_muon_with_cosine_annealing: muon_num_ns_steps 5, "
                                    "muon_fp32_matmul_prec medium, muon_tp_mode blockwise"),))



def newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> int:
    """FLOPs of ``steps`` Newton-Schulz iterations on one (rows, cols) matrix: (4 m^2 n + 2 m^3) each, m the smaller
    side, n the larger (the module docstring).

    >>> newton_schulz_flops(2048, 7168)  # m 2,048, n 7,168: 4 x 4,194,304 x 7,168 + 2 x 8,589,934,592, x 5
    687194767360
    """
    return steps * sum(2 * m * n * k for m, n, k in newton_schulz_products(rows, cols))


def newton_schulz_products(rows: Any, cols: Any) -> tuple[tuple[Any, Any, Any], ...]:
    """The (m, n, k) of one iteration's three products (an m x k by k x n product each): X X^T, A A, B X (cell by
    cell on columns of layouts).

    >>> newton_schulz_products(7168, 2048)
    ((2048, 2048, 7168), (2048, 2048, 2048), (2048, 7168, 2048))
    """
    m, n = minimum(rows, cols), maximum(rows, cols)
    return (m, m, n), (m, m, m), (m, n, m)


def _qkv_split(op_path: str, rows: Expr, est: Evaluated) -> tuple[Expr, ...]:
    """Megatron-Core's fused linear_qkv split into q, k and v before Newton-Schulz (muon_split_qkv, True by default:
    TensorParallelMuon.orthogonalize), where the graph's fused (q + 2 kv, h) weight is that; else the weight whole."""
    if op_path != "attn/qkv" or est.options.implementation != "megatron":
        return (rows,)
    q, kv = dims.a * dims.d_h / dims.t, dims.a_kv * dims.d_h / dims.t
    try:
        fused = layout_int(rows, est.values) == layout_int(q + 2 * kv, est.values)
    except (KeyError, ValueError, TypeError):  # a graph whose qkv is not a * d_h + 2 a_kv d_h rows
        return (rows,)
    return (q, kv, kv) if bool(fused if not is_column(fused) else fused.all()) else (rows,)


def muon_matrices(graph: Graph, est: Evaluated) -> list[tuple[Expr, Expr, Expr, bool]]:
    """``(rows, cols, count, routed)`` of each matrix Muon orthogonalizes on one GPU (``model_states.muon_owned``):
    a routed experts' stacked weight E matrices; Megatron's fused qkv as q, k and v (``_qkv_split``), its gated MLP's
    gate and up as the one (2f, h) linear_fc1 they are there (Megatron-Core's mlp.py: ffn_hidden_size * 2 under
    gated_linear_unit). A frozen weight is none of them (get_megatron_muon_optimizer: ``if not
    param.requires_grad: continue``; fine-tuning's frozen base, ``Graph.trainable``)."""
    return [(rows, cols, count, routed) for pieces, count, routed in _muon_parameters(graph, est)
            for rows, cols in pieces]


def _muon_parameters(graph: Graph, est: Evaluated) -> list[tuple[tuple[tuple[Expr, Expr], ...], Expr, bool]]:
    """``(pieces, count, routed)`` of each whole parameter Muon steps on one GPU (``muon_matrices``), ``count`` of
    them alike: the (rows, cols) matrices Newton-Schulz runs on for one (linear_qkv's q, k and v), whether a routed
    experts'."""
    routed = set(expert_ops(graph))
    megatron = est.options.implementation == "megatron"
    found: list[tuple[tuple[tuple[Expr, Expr], ...], Expr, bool]] = []
    for blk, op in graph.ops():
        paths = {o.path for o in blk.ops if any(graph.trainable(blk.name, x.name) for x in stored_parameters(o))}
        for x in stored_parameters(op):
            matrices = as_matrices(op, x)
            if matrices is None or not (muon_owned(blk, op, x) and graph.trainable(blk.name, x.name)):
                continue
            stack, rows, cols = matrices
            count = blk.repeat * op.share * stack
            if megatron and op.path.endswith("gate") and op.path[:-4] + "up" in paths:
                rows = 2 * rows  # linear_fc1: gate and up in one weight
            elif megatron and op.path.endswith("up") and op.path[:-2] + "gate" in paths:
                continue
            found.append((tuple((r, cols) for r in _qkv_split(op.path, rows, est)), count,
                          f"{blk.name}/{op.path}" in routed))
    return found


def newton_schulz_s(est: Evaluated, rate: Callable[[str, Any, Any, Any], Any]) -> Any:
    """Seconds of one step's Newton-Schulz products on one GPU (the module docstring), all its matrices' under
    ``--zero 0``; ``rate(dtype, m, n, k)`` the FLOP/s of one product at its shape, cell by cell on columns of
    layouts (``timing._gemm_rate``).

    Under ``--zero 1`` (``Options.layer_wise``) the step waits for the busiest rank, read as the memory's
    busiest-rank term reads it (``expert_states._busiest_rank``): whole parameters dealt (``as_matrices``), the
    dense ones over the d x cp ranks and the routed experts' over the edp ranks apart, each part the mean rank's
    share (1/(d cp), 1/edp) or the one parameter with the most Newton-Schulz work, whole, where that is more (the
    rank dealt it steps at least that); the small parameters the ping-pong deal adds to that rank not counted."""
    o, values = est.options, est.values
    ranks = {False: o.dp * o.cp, True: layout_int(expert_zero_ranks(o), values)} if o.layer_wise else {}
    total: dict[bool, Any] = {False: 0.0, True: 0.0}
    largest: dict[bool, Any] = {False: 0.0, True: 0.0}
    for pieces, count, routed in _muon_parameters(est.graph, est):
        one: Any = 0.0  # one whole parameter's iterations
        for rows, cols in pieces:
            products = newton_schulz_products(layout_int(rows, values), layout_int(cols, values))
            one = one + NS_STEPS * sum(2 * m * n * k / rate("bf16", m, n, k) for m, n, k in products)
        held = layout_int(count, values)
        total[routed] = total[routed] + held * one
        largest[routed] = maximum(largest[routed], where(held > 0, one, 0.0))
    if not ranks:
        return total[False] + total[True]
    return sum(maximum(total[part] / ranks[part], largest[part]) for part in (False, True))
