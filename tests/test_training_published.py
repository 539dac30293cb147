"""Training memory against the published numbers: korthikanti-2022, rajbhandari-2020, dao-2022 and dao-2023.

Every expected value below is copied from a paper or worked out by hand in a comment; none
comes from our code. The graph side always goes through ``derivations.estimate.estimate`` with
the default ``korthikanti`` profile (LayerNorm statistics and token ids neglected, korthikanti-2022 §4).
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import sympy as sp

from memderive.derivations.models.architectures import GPT
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.model_states import states_breakdown
from memderive.derivations.models.model import Model
from memderive.symbolic.derive import evaluate
from memderive.symbolic.dims_sympy import V, a, b, d, h, l, p, s, t
from memderive.symbolic.simplify import closed_form

STEP = {"mode": "train", "batch": 1, "seq": 2048, "attention": "eager"}  # Korthikanti et al.: the scores saved
#: Korthikanti et al. 2022 Table 3: MT-NLG 530B (a=128, h=20480, L=105, v=51200)
MT_NLG = Model("mt-nlg-530b", GPT, {"h": 20480, "a": 128, "l": 105, "V": 51200, "n_ctx": 2048})
SBH = 2048 * 1 * 12288  # GPT-3, s=2048, b=1: 25,165,824


def per_layer(model="gpt3-175b", **options) -> tuple[sp.Expr, int]:
    """Closed form (relations applied) and exact value of the activation bytes of one layer."""
    e = estimate(model, **{**STEP, **options})
    q = e.quantity("activation_bytes_per_layer")
    return sp.expand(closed_form(q.breakdown.total, q.relations)), e.number("activation_bytes_per_layer")


def total_activations(model="gpt3-175b", **options) -> tuple[sp.Expr, int | Fraction]:
    e = estimate(model, **{**STEP, **options})
    q = e.quantity("activation_bytes")
    return sp.expand(closed_form(q.breakdown.total, q.relations)), evaluate(q.breakdown.total, e.values)


# --- korthikanti-2022, Table 2, symbolically ------------------------------------------------
TABLE_2 = [  # (row, options, bytes per layer as printed)
    ("no parallelism", {}, s * b * h * (34 + 5 * a * s / h)),
    ("tensor parallel (Eq. 2)", {"tp": 8}, s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    ("tensor + sequence parallel (Eq. 4)", {"tp": 8, "sp": True}, s * b * h / t * (34 + 5 * a * s / h)),
    ("tensor parallel + selective", {"tp": 8, "recompute": "selective"}, s * b * h * (10 + 24 / t)),
    ("tensor + sequence parallel + selective", {"tp": 8, "sp": True, "recompute": "selective"}, s * b * h * 34 / t),
    ("full recompute", {"recompute": "full"}, 2 * s * b * h),
    ("full recompute, tensor parallel", {"tp": 8, "recompute": "full"}, 2 * s * b * h),
]


@pytest.mark.parametrize(("row", "options", "printed"), TABLE_2, ids=[r[0] for r in TABLE_2])
def test_table_2_row_is_an_identity(row: str, options: dict, printed: sp.Expr) -> None:
    ours, _ = per_layer(**options)
    assert sp.expand(ours - printed) == 0, f"{row}: ours {ours}"


def test_eq_1_blocks_match_the_derivation_table() -> None:
    """§4.1, Eq. 1: attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorm inputs 4sbh."""
    e = estimate("gpt3-175b", **STEP)
    q = e.quantity("activation_bytes_per_layer")
    groups = {term.path: sp.expand(closed_form(term.expr, q.relations)) for term in q.breakdown.grouped(2).terms}
    assert groups == {"layer/norm1": 2 * s * b * h, "layer/attn": 11 * s * b * h + 5 * a * s**2 * b,
                      "layer/norm2": 2 * s * b * h, "layer/mlp": 19 * s * b * h}


def test_tensor_parallel_splits_24_of_34() -> None:
    """§4.2.1: 10sbh stays on every rank (LN inputs 4, QKV and fc1 inputs 2 + 2, two dropout
    masks 1 + 1), 24sbh is split (Q, K 4, V 2, out-proj input 2, GeLU input 8, fc2 input 8)."""
    ours, _ = per_layer(tp=8, recompute="selective")
    assert sp.expand(ours.coeff(t, 0)) == 10 * s * b * h
    assert sp.expand(ours.coeff(t, -1)) == 24 * s * b * h


# --- korthikanti-2022's formulas on GPT-3 175B, by hand (s = 2048, b = 1, t = 8; sbh = 25,165,824)
GPT3_ROWS = [
    # 5as/h = 5*96*2048/12288 = 80; sbh*(34 + 80) = 25,165,824 * 114
    ("Eq. 1, t = 1", {}, 2_868_903_936),
    # sbh*(10 + 24/8 + 80/8) = 23 sbh
    ("Eq. 2", {"tp": 8}, 578_813_952),
    # sbh*(34 + 80)/8 = 14.25 sbh
    ("TP + SP", {"tp": 8, "sp": True}, 358_612_992),
    # sbh*(10 + 3) = 13 sbh
    ("TP + selective", {"tp": 8, "recompute": "selective"}, 327_155_712),
    # 34 sbh / 8 = 4.25 sbh
    ("TP + SP + selective", {"tp": 8, "sp": True, "recompute": "selective"}, 106_954_752),
    # 2 sbh
    ("full recompute", {"tp": 8, "recompute": "full"}, 50_331_648),
]


@pytest.mark.parametrize(("row", "options", "expected"), GPT3_ROWS, ids=[r[0] for r in GPT3_ROWS])
def test_gpt3_per_layer_bytes(row: str, options: dict, expected: int) -> None:
    assert per_layer(**options)[1] == expected


def test_selective_recompute_savings_as_published() -> None:
    """§5: selective recompute saves 70% for GPT-3 (80/114) and 65% for MT-NLG (64/98)."""
    for model, saving, printed in (("gpt3-175b", Fraction(80, 114), 0.70), (MT_NLG, Fraction(64, 98), 0.65)):
        full, sel = per_layer(model, tp=8, sp=True)[1], per_layer(model, tp=8, sp=True, recompute="selective")[1]
        assert Fraction(full - sel, full) == saving
        assert round(float(saving), 2) == printed  # printed as a percentage, two digits


def test_five_times_claim() -> None:
    """Abstract "5x": Eq. 2 over Eq. 6 for GPT-3 is 23 sbh / 4.25 sbh = 92/17 = 5.4118 (4 places)."""
    eq2, eq6 = per_layer(tp=8)[1], per_layer(tp=8, sp=True, recompute="selective")[1]
    assert Fraction(eq2, eq6) == Fraction(92, 17)


def test_mt_nlg_attention_ratio() -> None:
    """5as/h = 5*128*2048/20480 = 64 for MT-NLG: one layer is sbh*(34 + 64) = 41,943,040 * 98."""
    assert per_layer(MT_NLG)[1] == 4_110_417_920


# --- pipeline parallelism: first stage (korthikanti-2022 §4.2.3, §4.3) -------------------------
def test_first_stage_is_eq_5_plus_embedding_dropout() -> None:
    """Eq. 5: the first 1F1B stage holds p micro-batches of L/p layers = sbhL/t (34 + 5as/h);
    §4.3 adds the embedding dropout mask, sbh/t (SP) per micro-batch in flight: sbhp/t."""
    ours, value = total_activations(tp=8, sp=True, pp=8)
    assert sp.expand(ours - (s * b * h * l / t * (34 + 5 * a * s / h) + s * b * h * p / t)) == 0
    # 358,612,992 * 96 = 34,426,847,232; + 25,165,824 * 8 / 8 = 34,452,013,056
    assert value == 34_452_013_056


def test_first_stage_with_selective_is_eq_6_plus_embedding_dropout() -> None:
    """Eq. 6: 34 sbhL/t; plus sbhp/t. 106,954,752 * 96 = 10,267,656,192; + 25,165,824."""
    ours, value = total_activations(tp=8, sp=True, pp=8, recompute="selective")
    assert sp.expand(ours - (34 * s * b * h * l / t + s * b * h * p / t)) == 0
    assert value == 10_292_822_016


def test_single_stage_extras_are_section_4_3() -> None:
    """p = 1: the extras are sbhL/t (p/L + 4/L (1 + v/h)) = sbh/t + 4sbh/t (1 + v/h): embedding
    dropout mask, final-LN input, output-projection input, fp32 logits 4sbv/t."""
    ours, _ = total_activations(tp=8, sp=True)
    layers = l * s * b * h / t * (34 + 5 * a * s / h)
    assert sp.expand(ours - layers - (s * b * h / t + 4 * s * b * h / t * (1 + V / h))) == 0


@pytest.mark.parametrize(("model", "pp", "factor"), [
    ("gpt3-175b", 8, Fraction(31, 24)),  # 1 + 7/24 = 1.29167, by hand
    (MT_NLG, 35, Fraction(139, 105)),  # 1 + 34/105 = 1.32381
], ids=["gpt3-p8", "mt-nlg-p35"])
def test_interleaved_schedule_factor(model, pp: int, factor: Fraction) -> None:
    """§4.2.3: the interleaved schedule (m = 3 model chunks per device) multiplies the first
    stage by 1 + (p - 1)/(p m)."""
    _, plain = total_activations(model, tp=8, sp=True, pp=pp)
    _, interleaved = total_activations(model, tp=8, sp=True, pp=pp, virtual_stages=3)
    assert Fraction(interleaved) == factor * Fraction(plain)  # evaluate: exact int/Fraction
    assert round(float(factor), 5) == {8: 1.29167, 35: 1.32381}[pp]


# --- FlashAttention (dao-2022, dao-2023) ---------------------------------------------------
@pytest.mark.parametrize(("options", "expected"), [
    ({}, 34 * s * b * h + 4 * b * a * s),
    ({"tp": 8}, s * b * h * (10 + 24 / t) + 4 * b * a * s / t),
], ids=["t=1", "tp"])
def test_flash_attention_drops_s_squared_and_keeps_fp32_logsumexp(options: dict, expected: sp.Expr) -> None:
    """FA-2 §3.1.1: O and the row-wise logsumexp L (one fp32 per (b, a, row): 4bas) are saved; the
    s x s scores are not. O is the out-projection input, already among the 34sbh."""
    ours, _ = per_layer(**{**options, "attention": "flash"})
    assert sp.Poly(ours, s).degree() == 1
    assert sp.expand(ours - expected) == 0


# --- ZeRO, rajbhandari-2020 ----------------------------------------------------------------
Psi = sp.Symbol("Psi", positive=True)  # the paper's parameter count (test-local letter)


def zero_bytes(params: sp.Expr, stage: int, n_d: sp.Expr) -> sp.Expr:
    return states_breakdown(params, "bf16", "adamw", stage, n_d).total


def test_model_states_16_psi_and_stage_formulas() -> None:
    """§3.1: (2 + 2 + K)Psi with K = 12; §5: 4Psi + KPsi/N_d, 2Psi + 14Psi/N_d, 16Psi/N_d."""
    expected = [16 * Psi, 4 * Psi + 12 * Psi / d, 2 * Psi + 14 * Psi / d, 16 * Psi / d]
    assert [sp.expand(zero_bytes(Psi, stage, d) - e) for stage, e in enumerate(expected)] == [0] * 4


def test_model_states_of_an_estimate_are_16_bytes_per_parameter() -> None:
    e = estimate("gpt2", **{**STEP, "seq": 1024})  # GPT-2 has 1,024 positions
    assert e.number("model_state_bytes") == 16 * e.number("parameters")  # 16 * 124,439,808


def test_zero_stage_3_of_an_estimate_divides_by_n_d() -> None:
    e = estimate("gpt2", **{**STEP, "seq": 1024}, dp=64, zero=3)
    assert e.number("model_state_bytes") * 64 == 16 * e.number("parameters")


GB = 10**9


@pytest.mark.parametrize(("stage", "exact", "printed"), [
    (0, Fraction(120), "120"),  # 16 * 7.5e9
    (1, Fraction("31.40625"), "31.4"),  # 4 * 7.5 + 12 * 7.5 / 64 = 30 + 1.40625
    (2, Fraction("16.640625"), "16.6"),  # 2 * 7.5 + 14 * 7.5 / 64 = 15 + 1.640625
    (3, Fraction("1.875"), "1.9"),  # 16 * 7.5 / 64
])
def test_zero_figure_1(stage: int, exact: Fraction, printed: str) -> None:
    """Figure 1 / §5.1-5.3: Psi = 7.5B, N_d = 64, K = 12, in GB (1e9 bytes)."""
    ours = zero_bytes(sp.Integer(7_500_000_000), stage, 64) / GB
    assert Fraction(int(ours.p), int(ours.q)) == exact
    assert _within_last_digit(exact, printed)


def _within_last_digit(value: Fraction, printed: str) -> bool:
    """Table 1's tolerance: 1 in the last printed digit (the paper truncates some, rounds others)."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return abs(value - Fraction(printed)) <= Fraction(1, 10**decimals)


#: Table 1 as printed: N_d -> {Psi: (P_os, P_os+g, P_os+g+p)} in GB
ZERO_TABLE_1 = {
    1: {"7.5B": ("120", "120", "120"), "128B": ("2048", "2048", "2048"), "1T": ("16000", "16000", "16000")},
    4: {"7.5B": ("52.5", "41.3", "30"), "128B": ("896", "704", "512"), "1T": ("7000", "5500", "4000")},
    16: {"7.5B": ("35.6", "21.6", "7.5"), "128B": ("608", "368", "128"), "1T": ("4750", "2875", "1000")},
    64: {"7.5B": ("31.4", "16.6", "1.88"), "128B": ("536", "284", "32"), "1T": ("4187", "2218", "250")},
    256: {"7.5B": ("30.4", "15.4", "0.47"), "128B": ("518", "263", "8"), "1T": ("4046", "2054", "62.5")},
    1024: {"7.5B": ("30.1", "15.1", "0.12"), "128B": ("513", "257", "2"), "1T": ("4011", "2013", "15.6")},
}
PSI = {"7.5B": 7_500_000_000, "128B": 128 * 10**9, "1T": 10**12}


@pytest.mark.parametrize("n_d", list(ZERO_TABLE_1))
def test_zero_table_1(n_d: int) -> None:
    for model, row in ZERO_TABLE_1[n_d].items():
        for stage, printed in zip((1, 2, 3), row):
            ours = zero_bytes(sp.Integer(PSI[model]), stage, n_d) / GB
            assert _within_last_digit(Fraction(int(ours.p), int(ours.q)), printed), (model, stage, ours)


def test_zero_table_2_max_model_on_32_gb() -> None:
    """Table 2, MP = 1, 64 GPUs (N_d = 64): 2B / 7.6B / 14.4B / 128B fit in 32 GB of model states.
    Psi_max = 32e9 / bytes per parameter: 16, 4 + 12/64, 2 + 14/64, 16/64."""
    printed = ("2", "7.6", "14.4", "128")  # billions of parameters
    for stage, shown in enumerate(printed):
        per_param = zero_bytes(sp.Integer(1), stage, 64)
        billions = sp.Integer(32) / per_param  # 32e9 bytes / per_param, in units of 1e9 parameters
        assert _within_last_digit(Fraction(int(billions.p), int(billions.q)), shown), (stage, billions)


def test_tolerance_rejects_a_wrong_cell() -> None:
    """The tolerance is tight enough to catch K = 8 instead of 12 (P_os at N_d = 4: 45 vs 52.5)."""
    wrong = Fraction(4 * 75, 10) + Fraction(8 * 75, 10 * 4)
    assert not _within_last_digit(wrong, "52.5")
