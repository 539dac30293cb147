"""What ``torch.compile`` saves for backward: the min-cut partitioner run on the graph's ATen program.

AOTAutograd traces a compiled region's forward and backward as one joint graph, and
``min_cut_rematerialization_partition`` (``torch/_functorch/partitioners.py``, torch 2.13; Inductor and
``aot_eager_decomp_partition`` use it) chooses which forward values the backward receives; the rest it
recomputes in backward. ``saved_by_partitioner`` runs the same rules on the calls of an ``hf`` graph's
program (``symbolic.program.flatten``), each call's kind declaring how the partitioner treats it
(``PARTITION``), a few kinds spelled as the ATen ops Inductor's decompositions make of them
(``softmax``, ``log_softmax``, ``nll_loss``, ``layer_norm``):

* a node may be recomputed only if its op is in the partitioner's allowlist (``get_default_op_list``:
  pointwise ops, casts, views, reductions, ``index``/``gather``; ``ban_recompute_not_in_allowlist``):
  matmuls, the attention kernel, the embedding and ``cat`` never are;
* a node that backward reads through an op that cannot fuse it (a matmul's operand, the attention
  kernel's and the embedding's inputs, the loss's scatter index) is materialized in backward anyway:
  never recomputed (``ban_recompute_materialized_backward``);
* a node 4 times smaller than its inputs (a reduction: norm statistics, softmax's max and sum) is never
  recomputed (``ban_recompute_reductions``);
* a fusible node used by a fusible op after a first unfusible use of the same input (the residual sum,
  read by the next norm and, past the sublayer's matmuls, by the next residual add) is never recomputed
  (``ban_recompute_used_far_apart``);
* the model's inputs are never recomputed; parameters and buffers are free to save
  (``treat_parameters_as_free_to_save``);
* what is saved is the minimum cut between the nodes never recomputed and what backward reads (the
  tensors each call's autograd rule saves, ``symbolic.kernels.KINDS``), every node weighing its bytes
  times ``1.1 ** d`` (``d``: its distance to a backward reader, 1 to 100), twice that when every user
  could fuse it (``get_node_weight``). ``activation_memory_budget`` is 1.0 by default: this one cut.

The saved bytes count each storage once (a view saves its base's storage), parameters and buffers
excluded, as ``saved_tensors_hooks`` sees them. Not modelled: the partitioner's ban of long fusible
chains (more than 100 fusible ops in a row), Inductor's fused buffers (what it saves is a partitioned
graph's output; the kernels it generates do not change which), graph breaks (one graph per model:
transformers' loss in a graph of its own saves the same logits, the graph's input).

>>> sorted({PARTITION[k] for k in ("mm", "rsqrt", "view", "embedding")})
['compute', 'opaque', 'pointwise', 'view']
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from memderive.symbolic.dtypes import dtype
from memderive.symbolic.graph import Graph
from memderive.symbolic.kernels import KINDS
from memderive.symbolic.program import BASELINE_ROLES, Call, flatten
from memderive.symbolic.tensor import Tensor

__all__ = ["PARTITION", "Saved", "saved_by_partitioner", "partition_covered"]

FP32, BOOL, INT64 = dtype("fp32"), dtype("bool"), dtype("int64")
INF = float("inf")

#: How the partitioner treats each kernel kind (its ATen op after Inductor's decompositions):
#: ``compute`` (matmuls: ``compute_intensive_ops``), ``opaque`` (not in the recomputable allowlist),
#: ``cat`` (not in it either, but a pointwise producer fuses into it), ``pointwise`` (in it: pointwise ops, casts, copies, reductions; a reduction is told apart by its
#: sizes), ``view`` (``view_ops``), ``composite`` (spelled as its decomposition, ``_decompose``).
PARTITION: dict[str, str] = {
    "mm": "compute", "bmm": "compute", "addmm": "compute",
    "sdpa": "opaque", "embedding": "opaque", "pad": "opaque", "cat": "cat",
    "mul": "pointwise", "mul_scalar": "pointwise", "add": "pointwise", "to": "pointwise", "pow": "pointwise",
    "rsqrt": "pointwise", "mean": "pointwise", "silu": "pointwise", "gelu": "pointwise", "tanh": "pointwise",
    "neg": "pointwise", "clone": "pointwise", "expand_clone": "pointwise", "const": "pointwise",
    "view": "view", "slice": "view", "split": "view", "hold": "view",
    "softmax": "composite", "log_softmax": "composite", "nll_loss": "composite", "layer_norm": "composite",
}
#: Kinds whose backward reads what they save through an op that cannot fuse it (a matmul, the attention
#: kernel's backward, the embedding's backward; ``nll_loss``: its scatter index only, see ``_decompose``).
UNFUSED_BACKWARD = frozenset({"mm", "bmm", "addmm", "sdpa", "embedding"})
FUSIBLE = frozenset({"pointwise", "view"})


@dataclass(slots=True)
class _Node:
    key: tuple
    tensor: Tensor
    cls: str  # compute | opaque | pointwise | view | input | param
    ins: tuple[tuple, ...]
    nbytes: int
    where: str
    users: list[tuple] = field(default_factory=list)
    base: tuple | None = None  # a view's storage owner


@dataclass(frozen=True, slots=True)
class Saved:
    """One storage the partitioner saves: the tensor that owns it, its bytes and where it is made."""

    tensor: Tensor
    nbytes: int
    where: str


def partition_covered(graph: Graph) -> str | None:
    """Why the graph's program cannot be partitioned (None: it can): an op without a program, a kind
    ``PARTITION`` does not declare."""
    for blk, op in graph.ops():
        if not op.program:
            return f"{blk.name} {op.path} ({op.kind}) has no ATen program"
        unknown = sorted({k.kind for k in op.program} - set(PARTITION) - {"parameters"})
        if unknown:
            return f"{blk.name} {op.path}: kernel kinds {', '.join(unknown)} have no partitioner rule"
    return None


class _Joint:
    """The forward nodes of the joint graph, what backward reads of them, and the partitioner's rules."""

    def __init__(self, graph: Graph, values: Mapping[Any, int], weight: str) -> None:
        self.values = values
        self.nodes: dict[tuple, _Node] = {}
        self.order: list[tuple] = []
        self.reads: dict[tuple, bool] = {}  # backward reads the node: fusibly (True) or not (False)
        self.params: dict[tuple, tuple[Tensor, bool]] = {}
        self.batch: dict[tuple, Tensor] = {}
        calls = flatten(graph, values, dtype(weight), self.params, self.batch)
        self.requires: dict[tuple, bool] = {key: trainable for key, (_, trainable) in self.params.items()}
        for key, (t, _) in self.params.items():
            self._add(key, t, "param", (), "parameters")
        for key, t in self.batch.items():
            self._add(key, t, "input", (), "batch")
        for call in calls:
            self._call(call)

    # --- building ------------------------------------------------------------------------------
    def _bytes(self, t: Tensor) -> int:
        return -(-int(t.nbytes.evaluate(self.values)) // 1)

    def _add(self, key: tuple, t: Tensor, cls: str, ins: tuple[tuple, ...], where: str) -> tuple:
        if t.role == "batch":
            cls = "input"  # the labels: a model input
        elif t.role in BASELINE_ROLES:
            cls = "param"  # a buffer (the rotary inv_freq): free to save
        node = _Node(key, t, cls, ins, self._bytes(t), where)
        if cls == "view" and ins:
            src = self.nodes[ins[0]]
            node.base = src.base or src.key
        self.nodes[key] = node
        self.order.append(key)
        for x in dict.fromkeys(ins):
            self.nodes[x].users.append(key)
        return key

    def _read(self, key: tuple, fusible: bool) -> None:
        self.reads[key] = self.reads.get(key, True) and fusible

    def _call(self, call: Call) -> None:
        k = call.kernel
        kind = PARTITION[k.kind]
        ins = tuple(call.ins)
        rg = KINDS[k.kind].differentiable and any(self.requires.get(x, False) for x in ins)
        for key in call.outs:
            self.requires[key] = rg
        if kind == "composite":
            self._decompose(call, rg)
            return
        same = k.kind == "expand_clone" and self._bytes(k.outputs[0]) == self.nodes[ins[0]].nbytes  # repeat_kv, a_kv = a
        cls = "view" if (k.alias or same) else kind
        for key, t in zip(call.outs, k.outputs):
            self._add(key, t, cls, ins if cls != "view" else ins[:1], call.where)
        if rg:
            names = dict(zip(k.inputs, ins)) | {t.name: key for t, key in zip(k.outputs, call.outs)}
            for name in KINDS[k.kind].saves(k, lambda n: self.requires.get(names[n], False)):
                self._read(names[name], k.kind not in UNFUSED_BACKWARD)

    def _decompose(self, call: Call, rg: bool) -> None:
        """Inductor's decompositions: softmax ``amax, sub, exp, sum, div``; log_softmax ``amax, sub, exp, sum,
        log, sub``; nll_loss ``ne, where, gather, sum``, its weight ``sum(ne)`` cast to fp32 (backward scatters
        into the ``where``'d labels, masks with ``ne`` and divides by the weight); layer_norm ``to(fp32),
        var_mean, rsqrt, (x - mean) * rstd * w + b``, the output and the statistics cast back."""
        k, ins, where = call.kernel, tuple(call.ins), call.where
        out = call.outs[0]
        t_out = k.outputs[0]
        x = self.nodes[ins[0]].tensor
        row = replace(x, name=f"{t_out.name}:row", shape=(*x.shape[:-1], 1))
        sub = lambda name, t, cls, args: self._add((*out, name), replace(t, name=f"{t_out.name}:{name}"), cls, args, where)  # noqa: E731
        if k.kind in ("softmax", "log_softmax"):
            amax = sub("amax", row, "pointwise", ins[:1])
            shifted = sub("sub", x, "pointwise", (ins[0], amax))
            exp = sub("exp", x, "pointwise", (shifted,))
            total = sub("sum", row, "pointwise", (exp,))
            if k.kind == "softmax":
                self._add(out, t_out, "pointwise", (exp, total), where)
            else:
                log = sub("log", row, "pointwise", (total,))
                self._add(out, t_out, "pointwise", (shifted, log), where)
            if rg:
                self._read(out, True)
        elif k.kind == "nll_loss":
            logp, labels = ins[0], ins[1]
            lab = self.nodes[labels].tensor
            ne = sub("ne", replace(lab, dtype=BOOL), "pointwise", (labels,))
            safe = sub("where", lab, "pointwise", (ne, labels))
            picked = sub("gather", replace(lab, dtype=t_out.dtype), "pointwise", (logp, safe))
            count = sub("count", replace(lab, shape=()), "pointwise", (ne,))
            weight_key = call.outs[1]
            self._add(weight_key, k.outputs[1], "pointwise", (count,), where)
            summed = sub("sum", replace(t_out, shape=()), "pointwise", (picked,))
            self._add(out, t_out, "pointwise", (summed, weight_key), where)
            if rg:  # backward masks the labels again and scatters into zeros: a pointwise where under
                self._read(labels, True)  # Inductor's scatter_upon_const_tensor pass
                self._read(weight_key, True)
        elif k.kind == "layer_norm":
            x32 = ins[0] if x.dtype == FP32 else sub("x_fp32", replace(x, dtype=FP32), "pointwise", ins[:1])
            mean = sub("mean", replace(row, dtype=FP32), "pointwise", (x32,))  # var_mean's two results
            var = sub("var", replace(row, dtype=FP32), "pointwise", (x32,))
            rstd = sub("rstd", replace(row, dtype=FP32), "pointwise", (var,))
            normed = sub("normed", replace(x, dtype=FP32), "pointwise", (x32, mean, rstd, *ins[1:]))
            self._add(out, t_out, "pointwise", (normed,), where)
            stats = []
            for key, t, src in zip(call.outs[1:], k.outputs[1:], (mean, rstd)):
                self._add(key, t, "pointwise" if t.dtype != FP32 else "view", (src,), where)
                stats.append(key)
            if rg:
                for key in (x32, *stats):
                    self._read(key, True)

    # --- the partitioner's rules --------------------------------------------------------------------
    def fusible(self, a: tuple, b: _Node) -> bool:
        """``is_fusible``: both ops fusible, or ``b`` a ``cat`` (memory fusion into a cat)."""
        return b.cls == "cat" or self.nodes[a].cls in FUSIBLE and b.cls in FUSIBLE

    def banned(self) -> set[tuple]:
        out = set()
        for key in self.order:
            n = self.nodes[key]
            if n.cls == "view":
                continue
            if n.cls in ("compute", "opaque", "cat", "input", "param") or self._materialized_backward(key):
                out.add(key)
            elif n.nbytes * 4 < sum(self.nodes[x].nbytes for x in dict.fromkeys(n.ins)):  # a reduction
                out.add(key)
        return out | self._used_far_apart(out)

    def _materialized_backward(self, key: tuple) -> bool:
        """``is_materialized_backwards``: backward reads the node, or a view of it, through an op that
        cannot fuse it."""
        todo = [key]
        while todo:
            cur = todo.pop()
            if cur in self.reads and (not self.reads[cur] or self.nodes[cur].cls not in FUSIBLE):
                return True
            todo += [u for u in self.nodes[cur].users if self.nodes[u].cls == "view"]
        return False

    def _used_far_apart(self, banned: set[tuple]) -> set[tuple]:
        """``ban_recompute_used_far_apart``: a fusible user of a node placed after the node's first
        unfusible use (found through fusible users in forward order) is banned."""
        index = {key: i for i, key in enumerate(self.order)}
        out: set[tuple] = set()
        for key in self.order:
            users = self.nodes[key].users
            if not users:
                continue
            limit = max(index[u] for u in users)
            first = self._first_unfusible(users, limit, index)
            for u in users:
                if index[u] > first and self.fusible(key, self.nodes[u]) and u not in banned and \
                        self.nodes[u].cls != "view":
                    out.add(u)
        return out

    def _first_unfusible(self, starts: list[tuple], limit: int, index: dict[tuple, int]) -> int:
        heap = [(index[u], u, True) for u in dict.fromkeys(starts)]
        heapq.heapify(heap)
        seen = set(heap)
        while heap:
            at, cur, ok = heapq.heappop(heap)
            if not ok:
                return at
            for u in self.nodes[cur].users:
                if index[u] <= limit:
                    item = (index[u], u, self.fusible(cur, self.nodes[u]))
                    if item not in seen:
                        seen.add(item)
                        heapq.heappush(heap, item)
        return limit

    def distances(self) -> dict[tuple, int]:
        """``dist_from_bw``: 1 for what backward reads, else one more than the nearest user's."""
        dist: dict[tuple, int] = {}
        for key in reversed(self.order):
            if key in self.reads:
                dist[key] = 1
            else:
                dist[key] = min((dist[u] + 1 for u in self.nodes[key].users), default=int(1e9))
        return dist

    def weight(self, key: tuple, dist: int) -> float:
        n = self.nodes[key]
        if n.cls == "param":
            return 0.0
        size = int(n.nbytes * (1.1 ** max(min(dist, 100), 1)))
        materialized = n.cls == "input" or key in self.reads and not self.reads[key] or not all(
            self.fusible(key, self.nodes[u]) for u in n.users) or (key in self.reads and n.cls not in FUSIBLE)
        return size if materialized else size * 2


def _min_cut(joint: _Joint) -> list[tuple]:
    """The nodes whose ``_in -> _out`` edge the minimum source-sink cut crosses (the partitioner's
    ``nx.minimum_cut`` graph; solved by Dinic's max flow)."""
    banned, dist = joint.banned(), joint.distances()
    index = {key: i for i, key in enumerate(joint.order)}
    source, sink = 2 * len(index), 2 * len(index) + 1
    flow = _Flow(sink + 1)
    for key, i in index.items():
        if key in banned:
            flow.edge(source, 2 * i, INF)
        if key in joint.reads:
            flow.edge(2 * i + 1, sink, INF)
        flow.edge(2 * i, 2 * i + 1, joint.weight(key, dist[key]))
        for u in joint.nodes[key].users:
            flow.edge(2 * i + 1, 2 * index[u], INF)
    reach = flow.cut(source, sink)
    return [key for key, i in index.items() if reach[2 * i] and not reach[2 * i + 1]]


class _Flow:
    """Dinic's maximum flow on a residual graph of edge arrays; ``cut`` returns the source side."""

    def __init__(self, n: int) -> None:
        self.adj: list[list[int]] = [[] for _ in range(n)]
        self.to: list[int] = []
        self.cap: list[float] = []

    def edge(self, u: int, v: int, c: float) -> None:
        self.adj[u].append(len(self.to))
        self.to.append(v)
        self.cap.append(c)
        self.adj[v].append(len(self.to))
        self.to.append(u)
        self.cap.append(0.0)

    def _levels(self, s: int) -> list[int]:
        level = [-1] * len(self.adj)
        level[s] = 0
        todo = deque([s])
        while todo:
            u = todo.popleft()
            for e in self.adj[u]:
                v = self.to[e]
                if level[v] < 0 and self.cap[e] > 1e-9:
                    level[v] = level[u] + 1
                    todo.append(v)
        return level

    def _push(self, s: int, t: int, level: list[int], it: list[int]) -> float:
        """One augmenting path along increasing levels (iterative DFS), its bottleneck pushed."""
        path: list[int] = []
        u = s
        while True:
            if u == t:
                push = min(self.cap[e] for e in path)
                if push == INF:
                    raise ValueError("the partition is unbounded: a value backward reads can be neither saved "
                                     "nor recomputed")
                for e in path:
                    self.cap[e] -= push
                    self.cap[e ^ 1] += push
                return push
            while it[u] < len(self.adj[u]):
                e = self.adj[u][it[u]]
                v = self.to[e]
                if self.cap[e] > 1e-9 and level[v] == level[u] + 1:
                    break
                it[u] += 1
            else:
                if not path:
                    return 0.0
                level[u] = -1  # a dead end
                e = path.pop()
                u = self.to[e ^ 1]
                it[u] += 1
                continue
            path.append(self.adj[u][it[u]])
            u = self.to[path[-1]]

    def cut(self, s: int, t: int) -> list[bool]:
        while True:
            level = self._levels(s)
            if level[t] < 0:
                return [x >= 0 for x in level]
            it = [0] * len(self.adj)
            while self._push(s, t, level, it) > 0:
                pass


def saved_by_partitioner(graph: Graph, values: Mapping[Any, int], weight: str = "bf16") -> list[Saved]:
    """The storages the min-cut partitioner saves for backward, in forward order (parameters and buffers
    left out; ``weight``: the weights' dtype).

    Args:
        graph: an ``hf`` graph whose ops carry programs (``partition_covered`` says None).
        values: every size symbol bound to an integer.
    """
    why = partition_covered(graph)
    if why is not None:
        raise ValueError(f"torch.compile's partition is derived from an ATen program: {why}")
    joint = _Joint(graph, values, weight)
    out: dict[tuple, Saved] = {}
    for key in _min_cut(joint):
        n = joint.nodes[key]
        owner = joint.nodes[n.base] if n.base is not None else n
        if owner.cls == "param" or owner.key in out:
            continue
        out[owner.key] = Saved(owner.tensor, owner.nbytes, owner.where)
    return list(out.values())
