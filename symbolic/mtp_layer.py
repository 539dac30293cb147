"""The names of a multi-token prediction (MTP) layer's block and own modules: ``derivations.models.mtp`` builds them
(Megatron-Core's ``MultiTokenPredictionLayer``, multi_token_prediction.py) and the strategies that treat an MTP layer
apart read them (``strategies.FullRecompute``, ``strategies.PipelineParallel``, ``mcore_recompute``), so that the
graph and the strategies name them once.

>>> MTP_BLOCK, MTP_NORMS
('mtp', ('enorm', 'hnorm', 'final_layernorm'))
"""

from __future__ import annotations

__all__ = ["MTP_BLOCK", "ENORM", "HNORM", "EH_PROJ", "FINAL_NORM", "MTP_NORMS"]

#: The block of the MTP layers (after the decoder layers, before the head: the order Megatron-Core runs them).
MTP_BLOCK = "mtp"
#: Its norms of the shifted tokens' embedding and of the hidden states, its projection of their concatenation
#: (2h -> h: its TransformerLayer's input) and its final norm.
ENORM, HNORM, EH_PROJ, FINAL_NORM = "enorm", "hnorm", "eh_proj", "final_layernorm"
#: Its own norms: modules of MultiTokenPredictionLayer, not of its TransformerLayer.
MTP_NORMS = (ENORM, HNORM, FINAL_NORM)
