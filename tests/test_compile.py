"""``--compile``: what torch.compile's min-cut partitioner saves, derived, against the CPU measurement.

``symbolic.compile_partition`` runs the partitioner's rules on memderive's graph of transformers' code;
``tests/hf_compile.measure_compiled`` compiles the same small model (no dropout) with Inductor on CPU and
counts what ``saved_tensors_hooks`` see (storages once, parameters and buffers excluded).

``MEASURED`` holds the bytes Inductor's compiled step saved, as ``python -m tests.hf_compile`` prints them
(torch 2.13.0+cpu, transformers 5.24, gcc); the fast tests compare the derivation with them, the slow ones
measure again (compiling takes 20-60 s a case on two cores).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.implementations import hf_layers
from memderive.derivations.models.resolve import resolve_model
from memderive.derivations.options import Options, OptionsError
from memderive.symbolic.compile_partition import saved_by_partitioner
from memderive.symbolic.dims import b, s
from tests.hf_saved import Shape
from tests.hf_step import config_for_step

#: (family, attention, dtype, b, s) -> bytes saved by the Inductor-compiled step (``python -m tests.hf_compile``).
MEASURED = {
    ("llama-gqa", "eager", "bf16", 2, 24): 257_108, ("llama-gqa", "eager", "bf16", 3, 40): 704_188,
    ("llama-gqa", "sdpa", "bf16", 2, 24): 206_420, ("llama-gqa", "sdpa", "bf16", 3, 40): 516_028,
    ("llama-gqa", "eager", "fp32", 2, 24): 469_076, ("llama-gqa", "eager", "fp32", 3, 40): 1_234_108,
    ("llama-gqa", "sdpa", "fp32", 2, 24): 409_172, ("llama-gqa", "sdpa", "fp32", 3, 40): 1_022_908,
    ("gpt2", "eager", "bf16", 2, 24): 245_012, ("gpt2", "eager", "bf16", 3, 40): 640_508,
    ("gpt2", "sdpa", "bf16", 2, 24): 252_692, ("gpt2", "sdpa", "bf16", 3, 40): 628_988,
}
#: Cases the derivation does not yet reach: GPT-2's fp32 eager step (see test_gpt2_fp32_eager).
GPT2_FP32_EAGER = {("gpt2", "eager", "fp32", 2, 24): 481_556, ("gpt2", "eager", "fp32", 3, 40): 1_275_868}
_TORCH = {"bf16": "bfloat16", "fp32": "float32"}


def derived(family: str, attention: str, dt: str, bsz: int, seq: int) -> int:
    """The partitioner's saved bytes on memderive's graph of the same config (CPU kernels)."""
    model = resolve_model(config_for_step(family, attention))
    graph = hf_layers(model, attention, "cpu")(model.graph(dt, dropout=False))
    return sum(x.nbytes for x in saved_by_partitioner(graph, {**model.values(), b: bsz, s: seq}, dt))


@pytest.mark.parametrize("case", list(MEASURED), ids=lambda c: "-".join(map(str, c)))
def test_derived_equals_inductor_measurement(case) -> None:
    assert derived(*case) == MEASURED[case]


@pytest.mark.parametrize("case", list(GPT2_FP32_EAGER), ids=lambda c: "-".join(map(str, c)))
@pytest.mark.xfail(strict=True, reason="GPT-2's fp32 eager step: Inductor saves 7,104 B (b2s24) and 1,920 B "
                   "(b3s40) less than the derived cut: at 2 x 24, the position embeddings (s h fp32, 6,144 B: it "
                   "keeps the embedding sum, not both embeddings) and each LayerNorm's fp32 mean (b s fp32, 5 x "
                   "192 B: it keeps rstd alone); its fp32 LayerNorm graph is not traced yet")
def test_gpt2_fp32_eager(case) -> None:
    assert derived(*case) == GPT2_FP32_EAGER[case]


@pytest.mark.parametrize("case", list(GPT2_FP32_EAGER), ids=lambda c: "-".join(map(str, c)))
def test_gpt2_fp32_eager_bound(case) -> None:
    """Until then: the derived cut is at most 2% above what Inductor saves, never below."""
    got, want = derived(*case), GPT2_FP32_EAGER[case]
    assert want <= got <= want * 1.02


def test_estimate_equals_measurement() -> None:
    """``estimate --compile`` on the config itself gives the measured bytes (LLaMA saves the same on CPU and
    CUDA kernels: no LayerNorm statistics, the same SDPA tensors)."""
    config = config_for_step("llama-gqa", "sdpa").to_dict()
    est = estimate(config, mode="train", batch=2, seq=24, implementation="hf-sdpa", compile=True)
    assert est.number("activation_bytes") == MEASURED[("llama-gqa", "sdpa", "bf16", 2, 24)]
    assert est.timeline() is None and "torch.compile" in est.peak_note()


@pytest.mark.parametrize(("given", "fragment"), [
    (dict(mode="train", batch=1, seq=8, compile=True), "add --implementation hf"),
    (dict(mode="train", batch=1, seq=8, compile=True, implementation="hf", recompute="full"), "--recompute full"),
    (dict(mode="train", batch=1, seq=8, compile=True, implementation="hf", loss_chunks=2), "--loss-chunks"),
])
def test_refused_options(given, fragment) -> None:
    with pytest.raises(OptionsError, match=fragment.replace("-", r"\-")):
        Options(**given)


def test_cli_refusal_is_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "llama-3-8b", "--mode",
                             "train", "--batch", "1", "--seq", "8", "--compile"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "add --implementation hf" in result.stderr


def test_no_program_is_refused() -> None:
    """GPT-2 with dropout (its default) has no ATen program: refused, with the way out."""
    with pytest.raises(OptionsError, match="without dropout"):
        estimate("gpt2", mode="train", batch=1, seq=8, implementation="hf", compile=True).number("activation_bytes")


# --- measured again (slow: each compiles) -------------------------------------------------------------------
LIVE = [("llama-gqa", "eager", "bf16", 2, 24), ("llama-gqa", "sdpa", "bf16", 3, 40),
        ("gpt2", "eager", "bf16", 3, 40), ("gpt2", "sdpa", "bf16", 2, 24)]


@pytest.mark.slow
@pytest.mark.parametrize("case", LIVE, ids=lambda c: "-".join(map(str, c)))
def test_measured_again_with_inductor(case) -> None:
    from tests.hf_compile import measure_compiled

    family, attention, dt, bsz, seq = case
    got = measure_compiled(family, attention, Shape(bsz, seq), _TORCH[dt], "inductor")
    assert got.nbytes == MEASURED[case]
    assert set(got.ctx_saved) == set(got.storages)  # the hooks see exactly what the compiled nodes saved


@pytest.mark.slow
def test_aot_eager_partition_differs_by_the_labels() -> None:
    """``aot_eager_decomp_partition`` (same partitioner, no Inductor passes) saves the masked labels (int64) and
    their mask (bool), 9 b s bytes, where Inductor saves the padded labels, 8 b (s + 1): b (s - 8) more, 32 B
    at 2 x 24 (by hand: 9*48 - 8*50 = 32)."""
    from tests.hf_compile import measure_compiled

    got = measure_compiled("llama-gqa", "eager", Shape(2, 24), "bfloat16", "aot_eager_decomp_partition")
    assert got.nbytes - MEASURED[("llama-gqa", "eager", "bf16", 2, 24)] == 32
