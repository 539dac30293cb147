"""A symbolic trace of a deep model run on a few of its layers: one of each kind, and one more of each repeated kind.

``traced_symbolic`` runs transformers' forward on symbolic sizes, and every op of every layer then builds SymPy
expressions: a 61-layer DeepSeek-V3.2 takes minutes a run. Its decoder layers are of two kinds (3 dense, 58 MoE),
and what a layer saves, caches or computes does not depend on where in the stack it sits. So the count ``Q`` of the
whole stack is the count of the stack ``R`` of each kind's first layer plus, for each kind that repeats ``n`` times,
``n - 1`` times what one more layer of it adds::

    Q(all) = Q(R) + sum over kinds k with n_k >= 2 of (n_k - 1) (Q(R + k's second layer) - Q(R))

A layer's kind is its module tree: each submodule's class and plain attributes (its sliding window, attention type,
whether its MLP is sparse), each parameter's and buffer's shape and dtype; its index (``layer_idx``) is not part
of it. The stack run is the model's own ``ModuleList`` with the other layers taken out, the layers renumbered
``0 .. k-1`` and the text config's per-layer lists (``layer_types``, ``mlp_layer_types``, ...) and
``num_hidden_layers`` cut to match, all put back afterwards.

Nothing here is trusted: ``traced_symbolic.symbolic`` checks the folded expression against the bytes or FLOPs the
full model's trace measured at the user's (b, s) (and, where b = 1 has an expression of its own, at the other b too),
and ``traced.checked_fit`` the polynomial fitted through folded counts
at small (b, s) (the fits of a prepared model: recompute, LoRA, ``--tp``), and where they differ (a layer whose
behaviour follows its index in a way its attributes do not show) run the whole stack instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from memderive.symbolic.lazy import lazy

nn = lazy("torch.nn")

__all__ = ["Fold", "fold", "layers_now"]

#: The attribute names transformers' layers keep their index under (not part of a layer's kind; renumbered).
INDEX_NAMES = ("layer_idx", "layer_id", "layer_number")
_PLAIN = (bool, int, float, str, type(None))


@dataclass(frozen=True)
class Fold:
    """The stack ``parent.<attr>`` (a ``ModuleList`` of ``config.num_hidden_layers`` layers) and the runs that
    make its count: each a tuple of layer indices and its coefficient (``Q(all) = sum coefficient x Q(run)``)."""

    parent: Any
    attr: str
    config: Any
    runs: tuple[tuple[tuple[int, ...], int], ...]

    @property
    def layers_run(self) -> int:
        return sum(len(indices) for indices, _ in self.runs)

    @contextlib.contextmanager
    def only(self, indices: tuple[int, ...]) -> Iterator[None]:
        """The model with only the layers ``indices`` in its stack, renumbered, its config cut to them."""
        full = self.parent._modules[self.attr]
        n = len(full)
        cfg = self.config
        lists = {k: v for k, v in vars(cfg).items() if isinstance(v, (list, tuple)) and len(v) == n}
        depth = cfg.num_hidden_layers
        renumbered = [(m, name, i, j) for j, i in enumerate(indices) for m in full[i].modules()
                      for name in INDEX_NAMES if getattr(m, name, None) == i]
        try:
            self.parent._modules[self.attr] = nn.ModuleList([full[i] for i in indices])
            for k, v in lists.items():
                setattr(cfg, k, type(v)(v[i] for i in indices))
            if cfg.num_hidden_layers != len(indices):  # a plain field (a property of the lists already follows)
                cfg.num_hidden_layers = len(indices)
            for m, name, _, j in renumbered:
                setattr(m, name, j)
            yield
        finally:
            self.parent._modules[self.attr] = full
            for m, name, i, _ in renumbered:
                setattr(m, name, i)
            for k, v in lists.items():
                setattr(cfg, k, v)
            if cfg.num_hidden_layers != depth:
                cfg.num_hidden_layers = depth


    def count(self, f: Any, model: Any, mode: Any, b: int, s: int) -> Any:
        """``f(model, mode, b, s)`` (an integer or a tuple of them) of the whole stack, from its runs."""
        total: tuple[Any, ...] = ()
        pair = False
        for indices, coefficient in self.runs:
            with self.only(indices):
                value = f(model, mode, b, s)
            pair = isinstance(value, tuple)
            run = tuple(coefficient * v for v in (value if pair else (value,)))
            total = tuple(x + y for x, y in zip(total, run)) if total else run
        return total if pair else total[0]


def _kind(layer: Any) -> tuple[Any, ...]:
    """A layer's module tree, parameters and buffers without its index: equal for layers that run alike."""
    modules = tuple((name, type(m).__qualname__,
                     tuple(sorted((k, v) for k, v in vars(m).items()
                                  if k not in INDEX_NAMES and not k.startswith("_") and k != "training"
                                  and (isinstance(v, _PLAIN) or (isinstance(v, tuple)
                                                                 and all(isinstance(x, _PLAIN) for x in v))))))
                    for name, m in layer.named_modules())
    tensors = tuple((name, tuple(t.shape), str(t.dtype))
                    for name, t in (*layer.named_parameters(), *layer.named_buffers()))
    return modules, tensors


def _stacks(model: Any) -> list[tuple[Any, str, Any]]:
    """Every ``ModuleList`` as long as its parent's ``config.num_hidden_layers``: (parent, attribute, config)."""
    found = []
    for parent in model.modules():
        cfg = getattr(parent, "config", None)
        depth = getattr(cfg, "num_hidden_layers", None)
        if not isinstance(depth, int) or depth < 2:
            continue
        for attr, child in parent._modules.items():
            if isinstance(child, nn.ModuleList) and len(child) == depth:
                found.append((parent, attr, cfg))
    return found


def layers_now(model: Any) -> tuple[int, ...]:
    """Which layers ``model``'s stacks hold now (their ids): what a count memoized across ``Fold.only`` is keyed by."""
    return tuple(id(layer) for parent, attr, _ in _stacks(model) for layer in parent._modules[attr])


def fold(model: Any) -> Fold | None:
    """The ``Fold`` of ``model``'s one decoder stack, or None where there is not exactly one stack or folding runs
    no fewer layers than the stack has."""
    stacks = _stacks(model)
    if len(stacks) != 1:
        return None
    parent, attr, cfg = stacks[0]
    layers = parent._modules[attr]
    kinds: dict[tuple[Any, ...], list[int]] = {}
    for i, layer in enumerate(layers):
        kinds.setdefault(_kind(layer), []).append(i)
    first = tuple(sorted(at[0] for at in kinds.values()))
    repeated = [at for at in kinds.values() if len(at) > 1]
    runs = ((first, 1 - sum(len(at) - 1 for at in repeated)),
            *((tuple(sorted((*first, at[1]))), len(at) - 1) for at in repeated))
    plan = Fold(parent, attr, cfg, runs)
    return plan if plan.layers_run < len(layers) else None
