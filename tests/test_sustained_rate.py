"""Matmuls at the rate a GPU sustains at its power limit (Bekman's MSMF), not the burst it reaches at its boost clock
(MAMF), where the sustained rate is measured (``efficiency.MSMF``): a training step keeps the GPU at its power limit.
Expected figures are the pages' tables (MSMF: compute/accelerator/README.md at 082816f; MAMF: the table on master)
and hand arithmetic."""

from __future__ import annotations

from dataclasses import replace

import pytest

from memderive.derivations.hardware import gpu
from memderive.derivations.quantities import efficiency
from memderive.derivations.quantities.efficiency import fp8_rate_ratio, matmul_rate, rate_note

pytestmark = pytest.mark.fast

SIDE = 8192  # past OpenXLA's 4,096: the shape fraction is 1


def test_h200_matmuls_run_at_its_measured_sustained_rate() -> None:
    # H200 SXM: MSMF 708.5 TFLOP/s bf16 (@ 8192x8448x20480, ~693 W, 1,465 MHz), 1,288.7 fp8
    assert matmul_rate(gpu("h200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(708.5e12)
    assert matmul_rate(gpu("h200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(1288.7e12)


def test_the_h100_sxm_takes_the_h200s_sustained_rate() -> None:
    # the same GH100 die (dense bf16 peak 989.5 TFLOP/s both) at the same 700 W, its burst "the same" in the MAMF
    # table: 708.5 x 794.5 / 794.5 = 708.5 (the burst, 794.5, is 12.1% faster)
    assert gpu("h100-sxm").bf16_flops == gpu("h200").bf16_flops
    assert matmul_rate(gpu("h100-sxm"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(708.5e12)
    # fp8: the H200's 1,288.7 times the bursts' 1,402.6 / 1,453.4 = 0.96505: 1,243.7 TFLOP/s, 1,243.7 / 708.5 =
    # 1.7553 the bf16 rate
    assert matmul_rate(gpu("h100-sxm"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(1243.7e12, rel=1e-4)
    assert fp8_rate_ratio(gpu("h100-sxm")) == pytest.approx(1.7553, rel=1e-4)
    assert "no measured MSMF: h200's sustained rate" in rate_note(gpu("h100-sxm"), None)


def test_the_h100_pcie_takes_the_sxms_fraction_of_peak() -> None:
    # no MAMF or MSMF of its own: the H100 SXM's burst fraction of its peak, 794.5 / 989.5, times its 756.5 TFLOP/s,
    # scaled by the H200's 708.5 / 794.5: 756.5 x 708.5 / 989.5 = 541.7
    assert matmul_rate(gpu("h100-pcie"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(541.7e12, rel=1e-4)


def test_b200_runs_at_its_measured_sustained_rates() -> None:
    # B200: MSMF 1,456.3 bf16 (~994 W, 1,339 MHz) and 2,795.7 fp8: fp8 over bf16 2,795.7 / 1,456.3 = 1.91973
    assert matmul_rate(gpu("b200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1456.3e12)
    assert matmul_rate(gpu("b200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(2795.7e12)
    assert fp8_rate_ratio(gpu("b200")) == pytest.approx(1.91973, rel=1e-5)


def test_gpus_without_a_sustained_rate_keep_their_mamf() -> None:
    # A100 SXM: no MSMF measured for it or its die; its MAMF, 271.2
    assert matmul_rate(gpu("a100-80gb"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(271.2e12)
    assert "MAMF 271.2 TFLOP/s" in rate_note(gpu("a100-80gb"), None)


def test_the_gb200_takes_the_b200s_sustained_rate_scaled_by_its_burst() -> None:
    # the B200's die: the B200's 1,456.3 times the bursts' 1,822.0 / 1,745.0 = 1.04413: 1,520.6 TFLOP/s (its own
    # burst is 1,822.0); fp8: the B200's 2,795.7 times 3,615.6 / 3,432.5 = 1.05334: 2,944.8
    assert matmul_rate(gpu("gb200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1520.6e12, rel=1e-4)
    assert matmul_rate(gpu("gb200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(2944.8e12, rel=1e-4)
    assert "no measured MSMF: b200's sustained rate" in rate_note(gpu("gb200"), None)


def test_a_clusters_own_measured_rates_replace_the_tables() -> None:
    # GPU.matmul_rates: a cluster whose GPUs run other than the table's (torchtitan's 500 W H100s)
    hw = replace(gpu("h100-sxm"), matmul_rates=(585_230 * 10**9, None))
    assert matmul_rate(hw, "bf16", SIDE, SIDE, SIDE) == pytest.approx(585.23e12)
    # fp8 not measured there: the table's fp8 over bf16, 1.7553: 1,027.3
    assert matmul_rate(hw, "fp8", SIDE, SIDE, SIDE) == pytest.approx(1027.3e12, rel=1e-4)
    both = replace(hw, matmul_rates=(585_230 * 10**9, 1_125_510 * 10**9))
    assert matmul_rate(both, "fp8", SIDE, SIDE, SIDE) == pytest.approx(1125.51e12)


def test_the_time_model_names_the_rate_it_uses() -> None:
    assert "sustained rate (MSMF) 708.5 TFLOP/s" in rate_note(gpu("h200"), None)


def test_fp8_without_a_measured_fp8_msmf_keeps_the_bf16_ratio(monkeypatch: pytest.MonkeyPatch) -> None:
    # were the B200's fp8 MSMF not measured: its fp8 MAMF, 3,432.5, times its bf16 sustained over burst, 1,456.3 /
    # 1,745.0 = 0.83456: 2,864.6 TFLOP/s
    monkeypatch.setitem(efficiency.MSMF, "b200", (1456.3, None))
    assert matmul_rate(gpu("b200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(2864.6e12, rel=1e-4)
