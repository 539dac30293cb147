"""Matmuls at the rate a GPU sustains at its power limit (Bekman's MSMF), not the burst it reaches at its boost clock
(MAMF), where the sustained rate is measured (``efficiency.MSMF``): a training step keeps the GPU at its power limit.
Expected figures are the page's table (compute/accelerator/README.md at 082816f: MAMF and MSMF columns) and hand
arithmetic."""

from __future__ import annotations

import pytest

from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.efficiency import fp8_rate_ratio, matmul_rate, rate_note

pytestmark = pytest.mark.fast

SIDE = 8192  # past OpenXLA's 4,096: the shape fraction is 1


def test_h200_matmuls_run_at_its_measured_sustained_rate() -> None:
    # H200 SXM: MSMF 708.5 TFLOP/s bf16 (@ 8192x8448x20480, ~693 W, 1,465 MHz), where its MAMF burst is 841.9
    assert matmul_rate(gpu("h200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(708.5e12)
    # fp8: MSMF 1,288.7 (MAMF 1,491.9)
    assert matmul_rate(gpu("h200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(1288.7e12)


def test_the_h100_sxm_takes_the_h200s_sustained_over_burst() -> None:
    # the same GH100 die (dense bf16 peak 989.5 TFLOP/s both) at the same 700 W: the H100's own MAMF, 794.5, times the
    # H200's 708.5 / 841.9 = 0.84155: 668.6 TFLOP/s (the burst, 794.5, is 18.8% faster)
    assert gpu("h100-sxm").bf16_flops == gpu("h200").bf16_flops
    assert matmul_rate(gpu("h100-sxm"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(668.6e12, rel=1e-4)
    # fp8: the H100's MAMF, 1,402.6, times the H200's fp8 sustained over burst, 1,288.7 / 1,491.9 = 0.86380:
    # 1,211.6 TFLOP/s, 1,211.6 / 668.6 = 1.8121 the bf16 rate
    assert matmul_rate(gpu("h100-sxm"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(1211.6e12, rel=1e-4)
    assert fp8_rate_ratio(gpu("h100-sxm")) == pytest.approx(1.8121, rel=1e-4)


def test_the_h100_pcie_takes_the_sxms_fraction_of_peak() -> None:
    # no MAMF or MSMF of its own: the H100 SXM's burst 794.5 / 989.5 = 0.80293 of its 756.5 TFLOP/s = 607.41, times
    # the H200's 708.5 / 841.9: 511.2
    assert matmul_rate(gpu("h100-pcie"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(511.2e12, rel=1e-4)


def test_b200_runs_at_its_measured_sustained_rates() -> None:
    # B200: MSMF 1,456.3 bf16 (~994 W, 1,339 MHz) and 2,795.7 fp8: fp8 over bf16 2,795.7 / 1,456.3 = 1.91973
    assert matmul_rate(gpu("b200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1456.3e12)
    assert matmul_rate(gpu("b200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(2795.7e12)
    assert fp8_rate_ratio(gpu("b200")) == pytest.approx(1.91973, rel=1e-5)


def test_gpus_without_a_sustained_rate_keep_their_mamf() -> None:
    # A100 SXM: no MSMF measured for it or its die; its MAMF, 271.2
    assert matmul_rate(gpu("a100-80gb"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(271.2e12)


def test_the_gb200_takes_the_b200s_sustained_over_burst() -> None:
    # the B200's die: its own MAMF 1,822.0 times the B200's 1,456.3 / 1,770.9 = 0.82235: 1,498.3 TFLOP/s (the burst
    # is 1,822.0); fp8: 3,615.6 times the B200's fp8 2,795.7 / 3,435.2 = 0.81384: 2,942.5
    assert matmul_rate(gpu("gb200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1498.3e12, rel=1e-4)
    assert matmul_rate(gpu("gb200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(2942.5e12, rel=1e-4)
    assert "no measured MSMF: b200's sustained over burst" in rate_note(gpu("gb200"), None)


def test_the_time_model_names_the_rate_it_uses() -> None:
    assert "sustained rate (MSMF) 708.5 TFLOP/s" in rate_note(gpu("h200"), None)
