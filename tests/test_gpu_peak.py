"""``benchmarks/gpu_peak.py`` runs every framework preset when a GPU is lent; here (CPU-only torch) its
no-CUDA path and its plan: one run per preset, each of which memderive can derive."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_peak  # noqa: E402

from memderive.derivations.frameworks import FRAMEWORKS  # noqa: E402


def test_without_cuda_it_says_so_and_exits_0(capsys) -> None:
    import torch

    assert not torch.cuda.is_available()  # this test is of the no-CUDA path
    assert gpu_peak.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_every_preset_has_a_run_memderive_derives() -> None:
    plans = gpu_peak.runs("llama-3-8b", 2, 1, 256)
    assert [r["framework"] for r in plans] == list(FRAMEWORKS)
    for run in plans:
        ours = gpu_peak.derived(run, "h100-sxm")
        assert 0 < ours["allocated"] <= ours["reserved"] < ours["device"], run["framework"]
        assert ours["options"]["framework"] == run["framework"] and run["why"]
    assert "kv_cache_blocks" in gpu_peak.derived(plans[-1], "h100-sxm")


def test_device_names_map_to_the_gpu_table() -> None:
    names = {"NVIDIA H100 80GB HBM3": "h100-sxm", "NVIDIA H200": "h200", "NVIDIA A100-SXM4-80GB": "a100-80gb",
             "NVIDIA A100-SXM4-40GB": "a100-40gb", "NVIDIA L4": "l4", "NVIDIA A10": "a10", "Tesla T4": "t4",
             "NVIDIA GeForce RTX 3090": "rtx-3090", "NVIDIA RTX A6000": "a6000", "Tesla V100-SXM2-16GB": "v100-16gb"}
    assert {k: gpu_peak.table_gpu(k) for k in names} == names
    assert gpu_peak.table_gpu("Some Other GPU") is None
