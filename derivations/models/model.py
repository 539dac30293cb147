"""A concrete model: an architecture plus its sizes.

>>> from memderive.derivations.models.architectures import GPT
>>> m = Model("tiny", GPT, {"h": 64, "a": 4, "l": 2, "V": 100, "n_ctx": 32})
>>> m.sizes["f"], m.sizes["d_h"], m.sizes["a_kv"]
(256, 16, 4)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from memderive.derivations.memo import Keyed
from memderive.derivations.models.architectures import HYBRID_KINDS, Arch, build_graph
from memderive.derivations.models.quantization import Quantization
from memderive.symbolic.dims import a, a_kv, d_h, d_r, f, h, sym
from memderive.symbolic.errors import DerivationError
from memderive.symbolic.expr import Expr
from memderive.symbolic.graph import Graph


__all__ = ["Model", "ModelError"]

REQUIRED = ("h", "a", "l", "V")


class ModelError(DerivationError):
    """A model whose sizes are missing, non-positive or inconsistent."""


@dataclass(frozen=True, slots=True)
class Model:
    """Sizes by dimension name (``h``, ``a``, ``a_kv``, ``d_h``, ``f``, ``l``, ``V``, ``n_ctx``, ...).

    Defaults: ``a_kv = a``, ``d_h = h / a``, ``f = 4h``. ``window`` is a sliding-attention
    window (tokens) or None; ``window_layers`` how many of the ``l`` layers attend through it,
    ``l_w``, the others attending to the whole context (None: every layer; dropped without a
    window); ``max_positions`` the longest context the model supports; ``notes`` what the mapping
    from a config says beyond sizes; ``quantization`` the scheme its ``quantization_config`` declares.

    >>> from dataclasses import replace
    >>> from memderive.derivations.models.architectures import LLAMA
    >>> gemma = Model("alternating", LLAMA, {"h": 64, "a": 4, "l": 4, "V": 100}, window=8, window_layers=2)
    >>> gemma.windowed_layers, replace(gemma, window=None).windowed_layers
    (2, 0)
    """

    name: str
    arch: Arch
    sizes: Mapping[str, int]
    window: int | None = None
    window_layers: int | None = None
    max_positions: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default=())
    quantization: Quantization | None = None  # the checkpoint's quantization_config, as read
    # the tensors its local files store (headers only): a ``checkpoint_files.StoredTensors``, not imported here since
    # checkpoint_files raises config_fields' ConfigError, and config_fields imports this module
    checkpoint: Any = None

    def __post_init__(self) -> None:
        sizes = dict(self.sizes)
        for key in REQUIRED:
            if key not in sizes:
                raise ModelError(f"{self.name}: missing size {key!r}")
        for key, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ModelError(f"{self.name}: size {key} must be a positive integer, got {value!r}")
        sizes.setdefault("a_kv", sizes["a"])
        if "d_h" not in sizes:
            if sizes["h"] % sizes["a"]:
                raise ModelError(f"{self.name}: hidden size {sizes['h']} is not divisible by {sizes['a']} heads;"
                                 " give head_dim explicitly")
            sizes["d_h"] = sizes["h"] // sizes["a"]
        if sizes["a"] % sizes["a_kv"]:
            raise ModelError(f"{self.name}: {sizes['a']} attention heads are not divisible by "
                             f"{sizes['a_kv']} key/value heads")
        sizes.setdefault("f", 4 * sizes["h"])
        if self.arch.positions == "learned":
            sizes.setdefault("n_ctx", self.max_positions or 0)
            if sizes["n_ctx"] <= 0:
                raise ModelError(f"{self.name}: learned positions need the number of positions (n_ctx)")
        if self.arch.token_types:
            sizes.setdefault("n_type", 2)
        if self.arch.partial_rotary:
            sizes.setdefault("d_r", sizes["d_h"])
            if sizes["d_r"] > sizes["d_h"]:
                raise ModelError(f"{self.name}: {sizes['d_r']} rotary dimensions exceed the head size {sizes['d_h']}")
        self._check_experts(sizes)
        self._check_hybrid(sizes)
        if self.arch.attention == "mla":
            for key in ("d_c", "d_hR", "d_v") + (("d_cq",) if self.arch.q_lora else ()):
                if key not in sizes:
                    raise ModelError(f"{self.name}: multi-head latent attention needs the size {key!r}")
        if self.window is not None and self.window <= 0:
            raise ModelError(f"{self.name}: sliding window must be positive, got {self.window}")
        object.__setattr__(self, "sizes", MappingProxyType(sizes))
        object.__setattr__(self, "window_layers", self._window_layers())

    def _check_experts(self, sizes: dict[str, int]) -> None:
        """E routed experts, k per token (k <= E), expert width f_e; l_d dense layers (fewer than l)."""
        moe = self.arch.moe
        if moe is None:
            return
        for key in ("E", "k", "f_e") + (("f_s",) if moe.shared else ()) + (("l_d",) if moe.dense_layers else ()) \
                + (("d_lat",) if moe.latent else ()):
            if key not in sizes:
                raise ModelError(f"{self.name}: a mixture-of-experts model needs the size {key!r}")
        if sizes["k"] > sizes["E"]:
            raise ModelError(f"{self.name}: {sizes['k']} experts per token is more than the {sizes['E']} experts")
        if moe.dense_layers and sizes["l_d"] >= sizes["l"]:
            raise ModelError(f"{self.name}: {sizes['l_d']} dense layers leave no MoE layer among {sizes['l']}")

    def _check_hybrid(self, sizes: dict[str, int]) -> None:
        """A hybrid's layer counts (each present kind's, ``HYBRID_KINDS``) add up to l; its Mamba sizes are whole
        (d_in = n_sh d_sh, the n_g groups dividing the n_sh heads)."""
        hybrid = self.arch.hybrid
        if hybrid is None:
            return
        if ("moe" in hybrid.kinds) != (self.arch.moe is not None):
            raise ModelError(f"{self.name}: a hybrid with MoE layers needs the experts (Arch.moe), and experts need "
                             "MoE layers among its kinds")
        counts = [str(HYBRID_KINDS[kind]) for kind in hybrid.kinds]
        needed = [*counts, *(("d_in", "n_sh", "d_sh", "d_st", "n_g", "d_cv", "s_ch") if "mamba" in hybrid.kinds else ())]
        for key in needed:
            if key not in sizes:
                raise ModelError(f"{self.name}: a hybrid model needs the size {key!r}")
        if sum(sizes[key] for key in counts) != sizes["l"]:
            raise ModelError(f"{self.name}: the hybrid's layer counts ({', '.join(f'{k} = {sizes[k]}' for k in counts)}) "
                             f"do not add up to its {sizes['l']} layers")
        if "mamba" in hybrid.kinds and (sizes["n_sh"] * sizes["d_sh"] != sizes["d_in"] or sizes["n_sh"] % sizes["n_g"]):
            raise ModelError(f"{self.name}: Mamba heads n_sh = {sizes['n_sh']} of d_sh = {sizes['d_sh']} must make "
                             f"d_in = {sizes['d_in']} and divide into n_g = {sizes['n_g']} groups")

    def _window_layers(self) -> int | None:
        """``window_layers`` checked; None where it says nothing more than ``window`` (all or no layers)."""
        count, layers = self.window_layers, self.sizes["l"]
        if count is None or self.window is None:
            return None
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= layers:
            raise ModelError(f"{self.name}: window_layers must be a number of layers from 1 to l = {layers}, got "
                             f"{count!r}; give window=None when no layer slides")
        return None if count == layers else count

    @property
    def windowed_layers(self) -> int:
        """How many of the ``l`` layers attend to the sliding window (0 without one)."""
        if self.window is None:
            return 0
        return self.sizes["l"] if self.window_layers is None else self.window_layers

    def values(self) -> dict[Expr, int]:
        """``{symbol: size}`` for substitution."""
        return {sym(name): value for name, value in self.sizes.items()}

    def relations(self) -> dict[Expr, Expr]:
        """Relations that hold for these sizes, used to print closed forms in few letters."""
        z = self.sizes
        rel: dict[Expr, Expr] = {}
        if z["d_h"] * z["a"] == z["h"]:
            rel[d_h] = h / a
        if z["a_kv"] == z["a"]:
            rel[a_kv] = a
        if z["f"] == 4 * z["h"]:
            rel[f] = 4 * h
        if z.get("d_r") == z["d_h"]:
            rel[d_r] = d_h
        return rel

    def graph(self, activation_dtype: str = "bf16", dropout: bool = True, mtp_layers: int = 0) -> Graph:
        """The model's graph (built once per model, dtype, dropout and MTP layers within a process: graphs are
        immutable); ``mtp_layers``: Megatron-Core's multi-token-prediction layers (``models.mtp``)."""
        return _graph(Keyed((repr(self), activation_dtype, dropout, mtp_layers), self))


@lru_cache(maxsize=128)
def _graph(key: Keyed) -> Graph:
    model, (_, activation_dtype, dropout, mtp_layers) = key.value, key.key
    return build_graph(model.arch, activation_dtype=activation_dtype, dropout=dropout,
                       relations=model.relations(), name=model.name, mtp_layers=mtp_layers)
