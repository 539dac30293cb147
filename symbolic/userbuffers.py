"""Transformer Engine's userbuffers configs: the SMs each communication kernel takes from the GEMM it overlaps.

Under Megatron-Core's ``--tp-comm-overlap`` Transformer Engine (``initialize_ub``) creates one communicator per GEMM
of a layer's linears, named as TE names them: ``qkv`` and ``fc1`` the column-parallel linears (Megatron-Core's
linear_qkv, linear_fc1: gate and up fused), ``proj`` and ``fc2`` the row-parallel ones; ``fprop`` the forward
GEMM, ``dgrad`` the data gradient's, ``wgrad`` the weight gradient's. Each has a method (``ring_exchange``: qkv_fprop,
fc1_fprop, proj_dgrad, fc2_dgrad; ``pipeline``: proj_fprop, fc2_fprop; ``bulk``: qkv_dgrad, qkv_wgrad, fc1_dgrad,
fc1_wgrad), a ``num_sm`` and a ``set_sm_margin`` (``UbComm``). Two different things follow from them:

* The communication kernel occupies SMs while its transfer runs. A bulk or pipelined overlap launches the
  userbuffers all-gather / reduce-scatter kernels on ``num_sm`` CTAs on a stream of its own (TE v2.9
  comm_gemm_overlap.cpp L288 CommOverlapBase: ``use_ce`` false; L333 ``_ub_comm->sms = _num_comm_sm``;
  userbuffers.cu L1794, L1841, L1874: ``int sms = ar_nvsize == 1 ? 2 : comm->sms``, the launch's grid; TE
  1.8.0.dev0 comm_gemm_overlap.h L88-89 ``use_ce = 0; comm_sms = num_comm_sm``), whether or not the GEMM was told.
  A ring exchange copies with the copy engine (v2.9 base.py L342 ``"use_ce": True`` in get_default_config, no
  config here sets it; 1.8.0.dev0 comm_gemm_overlap.h L566-567 ``use_ce = 1; sms = 1`` whatever the config):
  ``userbuffers_send`` issues ``cudaMemcpyAsync`` and a signal kernel of one thread (v2.9 userbuffers.cu L2314-2335,
  1.8.0.dev0 L2334-2352): it takes no SM (``UbComm.busy`` 0).
* ``set_sm_margin`` launches the GEMM itself on the rest, for its whole time (comm_gemm_overlap.cpp L99,
  CommOverlapCore: ``_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count``; 1.8.0.dev0 comm_gemm_overlap.h
  L118 and L610), a ring exchange's included.

``te``: TE v2.9's own defaults (the 25.11 container's; v2.12 the same), what Megatron-LM's --tp-comm-overlap runs
without a --tp-comm-overlap-cfg yaml: base.py L327-348 ``get_default_config``: ``"num_sm": 1 if method ==
"ring_exchange" else 16``, ``"set_sm_margin": not method == "ring_exchange"`` (L336, L338), a config's keys merged
over them (L473-480). ``te_v1``: TE 1.x's, what NeMo 24.07 runs under ub_tp_comm_overlap without a config (NeMo
Framework 24.07 ships NeMo 2.0.0rc1 and TE 1.8.0.dev0: docs.nvidia.com/nemo-framework/user-guide/24.09/
softwarecomponentversions.html. NeMo r2.0.0rc1 megatron_gpt_model.py L735-754 ``initialize_ub_func``: ``ub_cfgs =
self.cfg.get('ub_tp_comm_overlap_cfg', None)``, a None warned of and handed to TE's ``initialize_ub``; TE at its
Dockerfile.ci L36 TE_TAG, 7d576ed2, 1.8.0.dev0: base.py L107-118 ``add_ub(..., num_sm: int = 16, ...,
set_sm_margin: int = 0, ...)`` for a GEMM no config names (L220-228), ``ub_cfg.get("num_sm", 16)``,
``ub_cfg.get("set_sm_margin", 0)`` for one that does (L198, L201); v1.9 to v1.13 ``get_default_config``
``"num_sm": 1 if method == "ring_exchange" else 16``, ``"set_sm_margin": False``; v2.0 the first to set it): bulk and
pipelined overlaps on 16 SMs, none with a margin. The rest: Megatron-Bridge's configs (v0.2.0, 7af9601c,
src/megatron/bridge/training/comm_overlap.py L95-198, the same at v0.3.0; L41-75 the dataclasses: BulkOverlapCfg and
PipelineOverlapCfg name num_sm and set_sm_margin, RingExchangeOverlapCfg defaults num_sm 1, set_sm_margin False;
L591-595 handed to TE as ``asdict``, no ``use_ce``), keyed as Bridge keys them, the ones its Llama 3 / 3.1
performance recipes select (scripts/performance/configs/llama3/llama3_llm_pretrain.py and llama31/ at v0.2.0,
configs/llama/ at v0.3.0: ``comm_overlap_cfg``, bf16 or else fp8 by precision; H100 the h100 configs, B200, B300,
GB200 and GB300 the b200 ones). Their bulk overlaps set no margin; their fp8 configs run proj_fprop and fc2_fprop as a
ring exchange of one SM with the margin. ``ub_cfg_*``: NeMo-Framework-Launcher's yamls
(launcher_scripts/conf/training/tp_overlap/: L5-27 the bulk overlaps, set_sm_margin 0; L29-44 the ring exchanges,
no num_sm (TE 1.8.0.dev0's 16); L47-59 proj_fprop, fc2_fprop), keyed as the launcher names them, the ones NeMo 24.07's
H100 rows run. Each model's yaml selects its own in its defaults list (L3, ``- optional
tp_overlap@model.ub_tp_comm_overlap_cfg: <name>``; no name, none loaded); no code picks one by name at tag 24.07
(8325688d): stages.py's ``_get_ub_cfg_override`` (ub_cfg_{gpu}_h{hidden}_tp{t}_mbs{b}_seqlen{s}) left in c10f50f3,
"Hydra fix for optional TP overlap config files" (2024-01-30), before tag 24.01. The yamls as tag 24.07 has them;
ub_cfg_h100_h8192_tp4_mbs1_seqlen4096, _seqlen8192, ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192 and
ub_cfg_h100_h6144_tp2_mbs2_seqlen2048 are the same at tags 24.05 to 24.12 (24.09: 35e43939);
``ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07`` is that file at tag 24.07 (proj_fprop and fc2_fprop pipeline, 24 and
20 SMs with the margin; 121c975d, 2024-08-02, after the tag, made fc2_fprop a ring exchange of 1 SM);
``ub_cfg_h100_h12288_tp4_mbs2_seqlen2048`` the file of that name from tag 24.09 on (none at 24.07; L55-58 fc2_fprop
ring_exchange num_sm 1 set_sm_margin 1): 24 and 1.
``ub_cfg_h100_bf16_h16384_tp8_cp2_mbs1_seqlen8192``: the yaml the dgxc Llama 3.1 405B rows select (llama3_1_405b.yaml's
defaults list at launcher tag 24.09, BF16 and FP8 rows alike), read at 0937882d: bulk qkv_dgrad 2, qkv_wgrad 24,
fc1_dgrad 2, fc1_wgrad 2 without a margin; qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad ring_exchange with
``aggregate: 1`` (TE's split_overlap_ag then runs t/2 GEMMs of two chunks each); proj_fprop pipeline 24 and
fc2_fprop pipeline 8 with the margin, num_splits 4: Megatron-Bridge's
userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192 but for the aggregate (Bridge's rings: aggregate=False).
``dgxc_gpt3_175b_hydra``: the inline ``model.ub_tp_comm_overlap_cfg`` of NVIDIA/dgxc-benchmarking's
nemo_megatron/gpt3_175b_hydra.yaml (L176-220 at v25.01, 143b90dd91f9; the same lines at v24.11.1, 35a9aecc8d5b, and
v25.02, 8f5cbb3799ea), the config its configure.sh passes NeMo (``--config-name=gpt3_${MODEL_SIZE}_hydra.yaml``)
and NeMo's ``initialize_ub_func`` hands TE's ``initialize_ub`` as ``ub_cfgs``: bulk qkv_dgrad 4, qkv_wgrad 8,
fc1_dgrad 2, fc1_wgrad 4 SMs with set_sm_margin 0; qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad ring_exchange
(no num_sm: TE 1.9 on's default 1; no margin); proj_fprop pipeline num_sm 24 and fc2_fprop pipeline num_sm 20, both
set_sm_margin 1.

>>> UB_CONFIGS["te"]["qkv_wgrad"]
UbComm(method='bulk', num_sm=16, margin=True, aggregate=False)
>>> UB_CONFIGS["userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"]["fc2_fprop"]
UbComm(method='ring_exchange', num_sm=1, margin=True, aggregate=False)
>>> UB_CONFIGS["te_v1"]["fc2_fprop"], UB_CONFIGS["te_v1"]["qkv_fprop"].busy  # 16 SMs while it sends; a copy engine
(UbComm(method='pipeline', num_sm=16, margin=False, aggregate=False), 0)
>>> {name: c.num_sm for name, c in UB_CONFIGS["ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07"].items() if c.busy}
{'qkv_dgrad': 4, 'qkv_wgrad': 8, 'fc1_dgrad': 2, 'fc1_wgrad': 4, 'proj_fprop': 24, 'fc2_fprop': 20}
"""

from __future__ import annotations

from typing import NamedTuple

from memderive.symbolic.formula import Citation

__all__ = ["BRIDGE_UB", "DGXC_GPT3_UB", "GEMM_SPLITS", "NEMO_LAUNCHER_UB", "PIPELINE_SPLITS", "SM_MARGIN",
           "TE_UB_DEFAULTS", "TE_V1_UB_DEFAULTS", "UB_BUSY", "UB_CONFIGS", "UbComm", "ring_reduce_scatters", "ub_gemm",
           "ub_source"]

SM_MARGIN = Citation("te-comm-gemm-overlap", "CommOverlapCore: _math_sms = set_sm_margin ? sm_count - "
                                             "num_comm_sm : sm_count, the overlapped GEMM launched on _math_sms")
UB_BUSY = Citation("te-comm-gemm-overlap", "CommOverlapBase (bulk, pipeline): use_ce false, the userbuffers kernels "
                                           "launched on num_comm_sm CTAs; CommOverlapP2P (ring_exchange): use_ce, "
                                           "cudaMemcpyAsync and a one-thread signal kernel")
TE_UB_DEFAULTS = Citation("te-userbuffers", "v2.9 initialize_ub get_default_config: num_sm 16 and set_sm_margin "
                                            "for the pipeline and bulk methods, 1 SM without a margin for ring_exchange")
TE_V1_UB_DEFAULTS = Citation("te-userbuffers", "1.8.0.dev0 (NeMo 24.07's; 7d576ed2) initialize_ub add_ub: num_sm "
                                               "16, set_sm_margin 0 for every GEMM no config names (v1.9-v1.13 the "
                                               "same margin)")
NEMO_LAUNCHER_UB = Citation("nemo-launcher-tp-overlap", "ub_cfg_h100_*.yaml at tag 24.07 (the 175B's mbs1 file; "
                            "the mbs2 file and the 405B's tp8 cp2 file, its rings aggregate 1, at 24.09), each "
                            "selected by a model yaml's defaults list (L3): bulk overlaps set_sm_margin 0; proj_fprop, "
                            "fc2_fprop num_sm with set_sm_margin 1")
BRIDGE_UB = Citation("megatron-bridge-comm-overlap", "userbuffers_* TransformerLayerTPOverlapCfg, selected by "
                                                     "scripts/performance/configs/llama*: comm_overlap_cfg")
GEMM_SPLITS = Citation("te-comm-gemm-overlap", "CommOverlapP2PBase::split_overlap_ag and split_overlap_rs: "
                       "n_chunk = n / tp_size, one nvte_cublas_gemm per rank's chunk of tokens (with _aggregate, "
                       "num_steps = _tp_size / 2 GEMMs of n_chunk * 2); CommOverlapBase::split_overlap_rs: "
                       "m_chunk = m / _num_splits, one nvte_cublas_gemm per num_splits chunk of the weight's output "
                       "rows")
#: num_splits of a pipelined reduce-scatter: 4 in every config ``UB_CONFIGS`` holds (Megatron-Bridge's
#: PipelineOverlapCfg(..., num_splits=4, ...), the launcher yamls' ``num_splits: 4``) and TE's default where a config
#: names none (v2.9 base.py get_default_config ``"num_splits": tp_size if method == "ring_exchange" else 4``; 1.x
#: initialize_ub ``ub_cfg.get("num_splits", 4 if method == "pipeline" else 0)``).
PIPELINE_SPLITS = 4
DGXC_GPT3_UB = Citation("dgxc-gpt3-175b-hydra", "L176-220, model.ub_tp_comm_overlap_cfg: bulk overlaps "
                       "set_sm_margin 0; proj_fprop num_sm 24, fc2_fprop num_sm 20, pipeline, set_sm_margin 1")


class UbComm(NamedTuple):
    """One GEMM's userbuffers communicator as a config sets it (the module's docstring)."""

    method: str  # "bulk", "pipeline" or "ring_exchange"
    num_sm: int  # num_sm: the CTAs of its communication kernel
    margin: bool  # set_sm_margin: the GEMM launched on sm_count - num_sm for its whole time
    aggregate: bool = False  # a ring-exchanged all-gather's aggregate: its chunks GEMMed two at a time

    @property
    def busy(self) -> int:
        """The SMs its communication occupies while the transfer runs: ``num_sm``; 0 for a ring exchange (the copy
        engine's)."""
        return 0 if self.method == "ring_exchange" else self.num_sm

    def splits(self, t: int) -> tuple[int, int]:
        """The parts the overlap cuts its GEMM's output into, (rows, columns) of the per-GPU product ``(tokens) x
        (features)``, one cuBLAS GEMM each (``GEMM_SPLITS``): a ring exchange t GEMMs of 1/t of the tokens (with
        ``aggregate``, t/2 of 2/t: ``num_steps = _tp_size / 2`` GEMMs of ``n_chunk * 2`` rows), a pipelined
        reduce-scatter ``PIPELINE_SPLITS`` of 1/4 of the output features, a bulk overlap the GEMM whole.

        >>> UbComm("ring_exchange", 1, False).splits(8), UbComm("pipeline", 24, True).splits(8)
        ((8, 1), (1, 4))
        >>> UbComm("ring_exchange", 1, False, aggregate=True).splits(8)
        (4, 1)
        """
        if self.method == "ring_exchange":
            return (max(t // 2, 1) if self.aggregate else t, 1)
        return (1, PIPELINE_SPLITS) if self.method == "pipeline" else (1, 1)


def _layer(bulk: tuple[int, int, int, int], proj: UbComm, fc2: UbComm, ring: int = 1,
           margin: bool = False, aggregate: bool = False) -> dict[str, UbComm]:
    """A layer's ten communicators: the bulk overlaps qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad on ``bulk`` SMs
    (``margin``: with set_sm_margin); the ring exchanges qkv_fprop, proj_dgrad, fc1_fprop, fc2_dgrad on ``ring``
    without one (``aggregate`` as set); proj_fprop and fc2_fprop as given."""
    named = dict(zip(("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad"), (UbComm("bulk", n, margin) for n in bulk)))
    named |= {name: UbComm("ring_exchange", ring, False, aggregate) for name in ("qkv_fprop", "proj_dgrad",
                                                                                   "fc1_fprop", "fc2_dgrad")}
    return named | {"proj_fprop": proj, "fc2_fprop": fc2}


def _pipe(n: int, margin: bool = True) -> UbComm:
    """A pipelined reduce-scatter on ``n`` SMs (set_sm_margin: ``margin``)."""
    return UbComm("pipeline", n, margin)


_RING1 = UbComm("ring_exchange", 1, True)  # Bridge's fp8 proj_fprop, fc2_fprop: one SM's margin

#: config name -> {TE's GEMM name: its communicator's method, num_sm, set_sm_margin}.
UB_CONFIGS: dict[str, dict[str, UbComm]] = {
    "te": _layer((16, 16, 16, 16), _pipe(16), _pipe(16), margin=True),
    "te_v1": _layer((16, 16, 16, 16), _pipe(16, False), _pipe(16, False), ring=16),
    "userbuffers_bf16_h100_h8192_tp4_mbs1_seqlen8192": _layer((4, 24, 2, 4), _pipe(24), _pipe(16)),
    "userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192": _layer((4, 24, 2, 4), _RING1, _RING1),
    "userbuffers_bf16_b200_h8192_tp2_mbs1_seqlen8192": _layer((16, 24, 2, 4), _pipe(32), _pipe(16)),
    "userbuffers_fp8_b200_h8192_tp2_mbs1_seqlen8192": _layer((4, 24, 2, 4), _RING1, _RING1),
    "userbuffers_bf16_h100_h16384_tp8_cp2_mbs1_seqlen8192": _layer((2, 24, 2, 2), _pipe(24), _pipe(8)),
    "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192": _layer((2, 24, 2, 2), _RING1, _RING1),
    "userbuffers_bf16_b200_h16384_tp4_cp2_mbs1_seqlen8192": _layer((8, 24, 2, 2), _pipe(32), _pipe(8)),
    "userbuffers_fp8_b200_h16384_tp4_cp2_mbs1_seqlen8192": _layer((8, 32, 2, 8), _RING1, _RING1),
    "ub_cfg_h100_bf16_h16384_tp8_cp2_mbs1_seqlen8192": _layer((2, 24, 2, 2), _pipe(24), _pipe(8), aggregate=True),
    "ub_cfg_h100_h8192_tp4_mbs1_seqlen4096": _layer((8, 16, 2, 4), _pipe(24), _pipe(16), ring=16),
    "ub_cfg_h100_h8192_tp4_mbs1_seqlen8192": _layer((4, 24, 2, 4), _pipe(24), _pipe(16), ring=16),
    "ub_cfg_h100_fp8_h8192_tp4_mbs1_seqlen8192": _layer((4, 24, 2, 4), _pipe(24), _pipe(16), ring=16),
    "ub_cfg_h100_h6144_tp2_mbs2_seqlen2048": _layer((8, 16, 4, 16), _pipe(16), _pipe(24), ring=16),
    "ub_cfg_h100_h12288_tp4_mbs1_seqlen2048_24.07": _layer((4, 8, 2, 4), _pipe(24), _pipe(20), ring=16),
    "ub_cfg_h100_h12288_tp4_mbs2_seqlen2048": _layer((4, 4, 2, 4), _pipe(24), _RING1, ring=16),
    "dgxc_gpt3_175b_hydra": _layer((4, 8, 2, 4), _pipe(24), _pipe(20)),
}


def ring_reduce_scatters(config: dict[str, UbComm]) -> tuple[str, ...]:
    """The row-parallel linears (TE's names) whose forward reduce-scatter ``config`` runs as a ring exchange, whose
    received chunks each rank sums in a pass of its own (``tp_overlap.RING_REDUCE``).

    >>> ring_reduce_scatters(UB_CONFIGS["userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"]), ring_reduce_scatters({})
    (('proj', 'fc2'), ())
    """
    return tuple(name for name in ("proj", "fc2") if getattr(config.get(f"{name}_fprop"), "method", "")
                 == "ring_exchange")


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
