"""Megatron-Core's CPU activation offloading (``--activation-offload-layers N``: ``cpu_offloading``,
``cpu_offloading_num_layers``), as Transformer Engine runs it (``get_cpu_offload_context`` around a
TransformerBlock's layers, ``model_layers`` the config's num_layers: with one pipeline stage, the GPU's l layers).

TE's default synchronizer (cpu_offload.py ``DefaultOffloadSynchronizer._init_offload_synchronization_dicts``)
offloads layers 0..N-1: layer i's saved tensors go to pinned host memory on a side stream from layer i+1's forward,
and its GPU copies are released at layer l-N+i's forward; in backward its reload starts at layer l-1-N+i's. So "if
all layers have memory footprint of T, then peak memory usage of saving activations is (l - N) * T" (its
docstring): at any moment the GPU holds l - N layers' saved activations, those not offloaded and those in flight.
TE refuses N > l - 1 (the last layer is never offloaded). The host holds the N offloaded layers' tensors.

Only the decoder layers' saved activations move (what TE's hooks see inside the context); the embedding, the
loss and the buffers outside the layers stay. The copies' time is not modelled yet: the step time is a lower bound.

>>> from fractions import Fraction
>>> resident_share(32, 8), offloaded_share(32, 8)
(Fraction(3, 4), Fraction(1, 4))
"""

from __future__ import annotations

from fractions import Fraction

from memderive.derivations.options import OptionsError
from memderive.symbolic.derive import Breakdown
from memderive.symbolic.formula import Citation

__all__ = ["ACTIVATION_OFFLOAD_CITATION", "ACTIVATION_OFFLOAD_TIME_NOTE", "activation_offload", "offloaded_share", "resident_share",
           "activation_offload_note"]

ACTIVATION_OFFLOAD_CITATION = Citation("te-cpu-offload", "DefaultOffloadSynchronizer: peak (l - N) layers' saved "
                                       "activations; layers 0..N-1 on pinned host memory")

#: What the step time says of the offload's copies: not timed, so the step a lower bound.
ACTIVATION_OFFLOAD_TIME_NOTE = ("CPU activation offloading (--activation-offload-layers): the saved activations' "
                                "copies to host memory and back are not timed (modelled as hidden behind the other "
                                "layers' compute): the step time is a lower bound")


def resident_share(layers: int, n: int) -> Fraction:
    """The share of the decoder layers' saved activations on the GPU at the peak: (l - N) / l."""
    return Fraction(layers - n, layers)


def offloaded_share(layers: int, n: int) -> Fraction:
    """The share in host memory: N / l."""
    return Fraction(n, layers)


def activation_offload(acts: Breakdown, layers: int, n: int) -> tuple[Breakdown, Breakdown]:
    """``acts`` with the decoder layers' saved activations cut to (l - N) layers' (the rest as they are), and the
    N layers' that host memory holds. Raises ``OptionsError`` where N is not below the layers (TE:
    "Cannot offload all layers without manual synchronization")."""
    if n > layers - 1:
        raise OptionsError(f"--activation-offload-layers {n}: the GPU has {layers} layers and Transformer Engine "
                           f"offloads at most {layers - 1} (the last layer stays); give {layers - 1} or fewer")
    layer = acts.where(lambda path: path.split("/")[0] == "layer")
    rest = acts.where(lambda path: path.split("/")[0] != "layer")
    return rest + layer.scaled(resident_share(layers, n)), layer.scaled(offloaded_share(layers, n))


def activation_offload_note(layers: int, n: int) -> str:
    """The assumption line an estimate prints."""
    return (f"CPU activation offloading (Megatron-Core cpu_offloading_num_layers {n}, Transformer Engine): "
            f"{layers - n} of {layers} layers' saved activations on the GPU at once, {n} layers' in host memory; "
            "the host copies' time not modelled (the step time a lower bound)")
