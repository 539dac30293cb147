"""Matmuls at the rate a GPU sustains at its power limit (Bekman's MSMF), not the burst it reaches at its boost clock
(MAMF), where the sustained rate is measured (``efficiency.MSMF``): a training step keeps the GPU at its power limit.
Expected figures are the benchmark page's (compute/accelerator/benchmarks/README.md) and hand arithmetic."""

from __future__ import annotations

import pytest

from memderive.derivations.hardware import gpu
from memderive.derivations.quantities.efficiency import fp8_rate_ratio, matmul_rate, rate_note

pytestmark = pytest.mark.fast

SIDE = 8192  # past OpenXLA's 4,096: the shape fraction is 1


def test_h200_matmuls_run_at_its_measured_sustained_rate() -> None:
    # H200 SXM: MSMF 745 TFLOP/s bf16 (five --search auto runs 743-746), where its MAMF burst is 843-850
    assert matmul_rate(gpu("h200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(745e12)
    # fp8: "about 1330" and "about 1337" in the two runs the page states: 1,333.5
    assert matmul_rate(gpu("h200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(1333.5e12)


def test_the_h100_sxm_takes_the_h200s_sustained_rate() -> None:
    # the same GH100 die (dense bf16 peak 989.5 TFLOP/s both) at the same 700 W: 745 / 989.5 x 989.5 = 745; was the
    # MAMF table's burst, 794.5 (6.2% faster: 794.5 / 745 = 1.0664)
    assert gpu("h100-sxm").bf16_flops == gpu("h200").bf16_flops
    assert matmul_rate(gpu("h100-sxm"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(745e12)
    # fp8: the H100's own MAMF, 1,402.6, times the H200's sustained over burst, 1,333.5 / 1,453.4 = 0.91750:
    # 1,286.9 TFLOP/s, 1,286.9 / 745 = 1.7274 the bf16 rate
    assert fp8_rate_ratio(gpu("h100-sxm")) == pytest.approx(1402.6 * 1333.5 / 1453.4 / 745)


def test_the_h100_pcie_takes_the_sxms_fraction_of_peak() -> None:
    # no MAMF or MSMF of its own: the H100 SXM's sustained 745 / 989.5 = 0.75290 of its 756.5 TFLOP/s = 569.57
    assert matmul_rate(gpu("h100-pcie"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(745 / 989.5 * 756.5e12)


def test_b200_bf16_sustained_and_fp8_keeps_the_mamf_ratio() -> None:
    # B200: MSMF 1,424.5 bf16 (five runs 1,421-1,428); no fp8 MSMF stated, so its fp8 keeps the MAMF table's fp8
    # over bf16, 3,432.5 / 1,745.0: 1,424.5 x 1.96705 = 2,802.1
    assert matmul_rate(gpu("b200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1424.5e12)
    assert fp8_rate_ratio(gpu("b200")) == pytest.approx(3432.5 / 1745.0)


def test_gpus_without_a_sustained_rate_keep_their_mamf() -> None:
    # A100 SXM: no MSMF measured for it or its die; its MAMF, 271.2
    assert matmul_rate(gpu("a100-80gb"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(271.2e12)


def test_the_gb200_takes_the_b200s_sustained_over_burst() -> None:
    # the B200's die: its own MAMF 1,822.0 times the B200's 1,424.5 / 1,745.0 = 0.81633: 1,487.4 TFLOP/s (was the
    # burst, 1,822.0); fp8: 3,615.6 x 0.81633 = 2,951.5
    assert matmul_rate(gpu("gb200"), "bf16", SIDE, SIDE, SIDE) == pytest.approx(1822.0 * 1424.5 / 1745.0 * 1e12)
    assert matmul_rate(gpu("gb200"), "fp8", SIDE, SIDE, SIDE) == pytest.approx(3615.6 * 1424.5 / 1745.0 * 1e12)
    assert "no measured MSMF: b200's sustained over burst" in rate_note(gpu("gb200"), None)


def test_the_time_model_names_the_rate_it_uses() -> None:
    assert "sustained rate (MSMF) 745.0 TFLOP/s" in rate_note(gpu("h200"), None)
    assert "no measured MSMF: h200's sustained over burst" in rate_note(gpu("h100-sxm"), None)
    assert "MAMF 271.2 TFLOP/s" in rate_note(gpu("a100-80gb"), None)
