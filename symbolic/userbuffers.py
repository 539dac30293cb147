"""Transformer Engine's userbuffers configs: the SMs a communication kernel takes from the GEMM it overlaps.

Under Megatron-Core's ``--tp-comm-overlap`` Transformer Engine (``initialize_ub``) creates one communicator per GEMM
of a layer's linears, named as TE names them: ``qkv`` and ``fc1`` the column-parallel linears (Megatron-Core's
linear_qkv, linear_fc1: gate and up fused), ``proj`` and ``fc2`` the row-parallel ones; ``fprop`` the forward
GEMM, ``dgrad`` the data gradient's, ``wgrad`` the weight gradient's. Each has a ``num_sm`` (the SMs its
communication kernel runs on) and ``set_sm_margin``; with the margin the GEMM beside it runs on the rest
(comm_gemm_overlap.cpp, CommOverlapCore: ``_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count``, the
GEMM launched with ``_math_sms``). A config here is what those two settings come to: the SMs taken from each GEMM
(``num_sm`` where ``set_sm_margin``; a GEMM not named keeps every SM).

``te``: TE's own per-GEMM defaults, what Megatron-LM's --tp-comm-overlap runs without a --tp-comm-overlap-cfg yaml
(TE v2.9, the 25.11 container's, base.py ``get_default_config``: ring_exchange (qkv_fprop, fc1_fprop, proj_dgrad,
fc2_dgrad) num_sm 1 without a margin; pipeline (proj_fprop, fc2_fprop) and bulk (qkv_dgrad, qkv_wgrad, fc1_dgrad,
fc1_wgrad) num_sm 16 with it; v2.12 the same). The rest: Megatron-Bridge's configs (comm_overlap.py, the same at
v0.2.0 and v0.3.0), keyed as Bridge keys them, the ones its Llama 3 / 3.1 performance recipes select
(scripts/performance/configs/llama3/llama3_llm_pretrain.py and llama31/ at v0.2.0, configs/llama/ at v0.3.0:
``comm_overlap_cfg``, bf16 or else fp8 by precision; H100 the h100 configs, B200, B300, GB200 and GB300 the b200
ones). Their bulk overlaps set no margin; their fp8 configs run proj_fprop and fc2_fprop as a ring exchange of one
SM with the margin. ``te_v1``: TE 1.x's defaults, what NeMo 24.07 runs under ub_tp_comm_overlap without a config
(NeMo Framework 24.07 ships NeMo 2.0.0rc1 and TE 1.8.0.dev0: docs.nvidia.com/nemo-framework/user-guide/24.09/
softwarecomponentversions.html. NeMo r2.0.0rc1 megatron_gpt_model.py L735-754 ``initialize_ub_func``: ``ub_cfgs =
self.cfg.get('ub_tp_comm_overlap_cfg', None)``, a None warned of and handed to TE's ``initialize_ub``; TE at its
Dockerfile.ci L36 TE_TAG, 7d576ed2, 1.8.0.dev0: base.py ``add_ub(..., set_sm_margin: int = 0, ...)`` for a GEMM
no config names, ``ub_cfg.get("set_sm_margin", 0)`` for one that does; v1.9 to v1.13 ``get_default_config``
"set_sm_margin": False, v2.0 the first to set it): no GEMM loses an SM. ``ub_cfg_*``: NeMo-Framework-Launcher's
yamls (launcher_scripts/conf/training/tp_overlap/), keyed as the launcher names them, the ones NeMo 24.07's H100 rows
run. Each model's yaml selects its own in its defaults list (L3, ``- optional tp_overlap@model.ub_tp_comm_overlap_cfg:
<name>``; no name, none loaded); no code picks one by name at tag 24.07 (8325688d): stages.py's
``_get_ub_cfg_override`` (ub_cfg_{gpu}_h{hidden}_tp{t}_mbs{b}_seqlen{s}) left in c10f50f3, "Hydra fix for optional TP
overlap config files" (2024-01-30), before tag 24.01. The yamls as tag 24.07 has them; ub_cfg_h100_h8192_tp4_mbs1
_seqlen4096, _seqlen8192, ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192 and ub_cfg_h100_h6144_tp2_mbs2_seqlen2048 are
the same at tags 24.05 to 24.12; ``ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07`` is that file at tag 24.07
(proj_fprop and fc2_fprop pipeline, 24 and 20 SMs with the margin; 121c975d, 2024-08-02, after the tag, made fc2_fprop
a ring exchange of 1 SM); ``ub_cfg_h100_h12288_tp4_mbs2_seqlen2048`` the file of that name from tag 24.09 on (none
at 24.07): 24 and 1.
``dgxc_gpt3_175b_hydra``: the inline ``model.ub_tp_comm_overlap_cfg`` of NVIDIA/dgxc-benchmarking's
nemo_megatron/gpt3_175b_hydra.yaml (L176-220 at v25.01, 143b90dd91f9; the same lines at v24.11.1, 35a9aecc8d5b, and
v25.02, 8f5cbb3799ea), the config its configure.sh passes NeMo (``--config-name=gpt3_${MODEL_SIZE}_hydra.yaml``)
and NeMo's ``initialize_ub_func`` hands TE's ``initialize_ub`` as ``ub_cfgs``: bulk qkv_dgrad 4, qkv_wgrad 8,
fc1_dgrad 2, fc1_wgrad 4 SMs with set_sm_margin 0; qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad ring_exchange
(no num_sm, no margin); proj_fprop pipeline num_sm 24 and fc2_fprop pipeline num_sm 20, both set_sm_margin 1.

>>> UB_CONFIGS["te"]["qkv_wgrad"], UB_CONFIGS["userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"]["fc2_fprop"]
(16, 1)
>>> UB_CONFIGS["te_v1"], UB_CONFIGS["ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07"]
({}, {'proj_fprop': 24, 'fc2_fprop': 20})
"""

from __future__ import annotations

from memderive.symbolic.formula import Citation

__all__ = ["BRIDGE_UB", "DGXC_GPT3_UB", "NEMO_LAUNCHER_UB", "SM_MARGIN", "TE_UB_DEFAULTS", "TE_V1_UB_DEFAULTS",
           "UB_CONFIGS", "ub_gemm", "ub_source"]

SM_MARGIN = Citation("te-comm-gemm-overlap", "CommOverlapCore: _math_sms = set_sm_margin ? sm_count - "
                                             "num_comm_sm : sm_count, the overlapped GEMM launched on _math_sms")
TE_UB_DEFAULTS = Citation("te-userbuffers", "v2.9 initialize_ub get_default_config: num_sm 16 and set_sm_margin "
                                            "for the pipeline and bulk methods, 1 SM without a margin for ring_exchange")
TE_V1_UB_DEFAULTS = Citation("te-userbuffers", "1.8.0.dev0 (NeMo 24.07's; 7d576ed2) initialize_ub add_ub: "
                                               "set_sm_margin 0 for every GEMM no config names (v1.9-v1.13 the same)")
NEMO_LAUNCHER_UB = Citation("nemo-launcher-tp-overlap", "ub_cfg_h100_*.yaml at tag 24.07 (the 175B's mbs1 file; "
                            "the mbs2 file at 24.09), each selected by a model yaml's defaults list (L3): bulk "
                            "overlaps set_sm_margin 0; proj_fprop, fc2_fprop num_sm with set_sm_margin 1")
BRIDGE_UB = Citation("megatron-bridge-comm-overlap", "userbuffers_* TransformerLayerTPOverlapCfg, selected by "
                                                     "scripts/performance/configs/llama*: comm_overlap_cfg")
DGXC_GPT3_UB = Citation("dgxc-gpt3-175b-hydra", "L176-220, model.ub_tp_comm_overlap_cfg: bulk overlaps "
                       "set_sm_margin 0; proj_fprop num_sm 24, fc2_fprop num_sm 20, pipeline, set_sm_margin 1")


def _bridge(proj: int, fc2: int) -> dict[str, int]:
    """A Bridge (NeMo launcher, dgxc-benchmarking) config: its bulk overlaps without a margin, proj_fprop and fc2_fprop taking
    ``proj`` and ``fc2``."""
    return {"proj_fprop": proj, "fc2_fprop": fc2}


#: config name -> {TE's GEMM name: the SMs its overlapped communication takes from it}.
UB_CONFIGS: dict[str, dict[str, int]] = {
    "te": {name: 16 for name in ("proj_fprop", "fc2_fprop", "qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")},
    "te_v1": {},
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": _bridge(24, 16),
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": _bridge(1, 1),
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": _bridge(32, 16),
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": _bridge(1, 1),
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bridge(24, 8),
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": _bridge(1, 1),
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bridge(32, 8),
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": _bridge(1, 1),
    "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096": _bridge(24, 16),
    "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192": _bridge(24, 16),
    "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192": _bridge(24, 16),
    "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048": _bridge(16, 24),
    "ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07": _bridge(24, 20),
    "ub_cfg_h100_h12288_tp4_mbs2_seqlen2048": _bridge(24, 1),
    "dgxc_gpt3_175b_hydra": _bridge(24, 20),
}


def ub_source(name: str) -> Citation:
    """Where ``UB_CONFIGS[name]`` is read (the module's docstring).

    >>> ub_source("te").key, ub_source("te_v1").locus[:10], ub_source("dgxc_gpt3_175b_hydra").key
    ('te-userbuffers', '1.8.0.dev0', 'dgxc-gpt3-175b-hydra')
    """
    if name in ("te", "te_v1"):
        return TE_UB_DEFAULTS if name == "te" else TE_V1_UB_DEFAULTS
    return NEMO_LAUNCHER_UB if name.startswith("ub_cfg_") else DGXC_GPT3_UB if name.startswith("dgxc_") else BRIDGE_UB


def ub_gemm(path: str, row: bool) -> str | None:
    """TE's name (without the phase) of a decoder layer's linear at ``path``: ``qkv``/``proj`` under attention,
    ``fc1``/``fc2`` under the MLP (``row``: row-parallel); None for any other (experts, the head: no userbuffers).

    >>> ub_gemm("attn/qkv", False), ub_gemm("mlp/fc2", True), ub_gemm("moe/experts", False)
    ('qkv', 'fc2', None)
    """
    return {"attn": ("qkv", "proj"), "mlp": ("fc1", "fc2")}.get(path.split("/")[0], (None, None))[row]
