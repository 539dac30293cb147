"""``--experts-implementation eager|grouped_mm``: transformers' experts kernels, under ``--implementation hf``.

Whole-model measurements of both kernels for every MoE family are in ``tests/test_hf_families.py``
(``*-grouped_mm-*`` and ``*-eager-*`` cases). Here: the CLI's difference between the two at a real size,
by hand from ``transformers/integrations/moe.py`` (v5.24), and the one-line refusals.
"""

from __future__ import annotations

import pytest

from memderive.derivations import estimate
from memderive.derivations.options import Options, OptionsError


def _activation_bytes(kernel: str | None) -> int:
    more = {} if kernel is None else {"experts_implementation": kernel}
    est = estimate("mixtral-8x7b", mode="train", batch=1, seq=8, implementation="hf", profile="exact", **more)
    return int(est.quantity("activation_bytes").value(est.values))


def test_grouped_mm_saves_less_than_the_eager_loop_by_hand() -> None:
    # Mixtral-8x7B, b=1, s=8, k=2: T = b*s*k = 16 token-expert pairs, h = 4096, E = 8, 32 MoE layers.
    # The eager loop saves the scaled outputs index_add_ scatters back, T*h bf16 = 131,072 B, and the int64
    # token and slot indices of torch.where (2 x 8T = 256 B); grouped_mm saves no scaled outputs (a view's
    # sum) but three int64 permutations (perm // k, perm, inv_perm: 3 x 8T = 384 B) and the int32 offsets
    # (4E = 32 B). Per layer eager - grouped = 131,072 + 256 - 384 - 32 = 130,912 B; x 32 = 4,189,184 B.
    assert _activation_bytes("eager") - _activation_bytes("grouped_mm") == 4_189_184


def test_the_default_is_transformers_default() -> None:
    # PreTrainedModel.get_correct_experts_implementation: "grouped_mm" when none is requested
    assert _activation_bytes(None) == _activation_bytes("grouped_mm")


def test_refused_in_one_line() -> None:
    with pytest.raises(OptionsError, match="--implementation hf"):
        Options(mode="train", batch=1, seq=8, experts_implementation="eager")
    with pytest.raises(OptionsError, match="must be one of grouped_mm, eager"):
        Options(mode="train", batch=1, seq=8, implementation="hf", experts_implementation="batched_mm")
