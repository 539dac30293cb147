"""--fp8-keep-output: torchao's Float8 conversion with the output layer filtered out, as torchtitan's December 2024
benchmarks ran (torchtitan 9dec370 torchtitan/float8.py L99: ``convert_to_float8_training(model, config=...,
module_filter_fn=lambda mod, fqn: fqn != "output")``). Expected numbers by hand below."""

from __future__ import annotations

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.quantities.timing import float8_flops

#: Llama 3 8B (h 4,096, vocab 128,256, untied output layer), b 1, s 2,048, torchtitan FSDP on 8 GPUs, tensorwise.
RUN = {"mode": "train", "batch": 1, "seq": 2048, "framework": "torchtitan", "dp": 8, "zero": 3, "flash": True,
       "fp8": "tensorwise"}


def test_the_output_layer_runs_its_three_matmuls_in_16_bits_by_hand() -> None:
    """Without the flag the output layer is a Float8Linear: its forward, input-gradient and (tensorwise) weight-
    gradient matmuls, 2 M V h each with M = 2,048 tokens, run as scaled 8-bit matmuls; with it they do not:
    3 x 2 x 2,048 x 128,256 x 4,096 = 6,455,335,845,888 FLOPs fewer in fp8, the layers' unchanged. Its weight leaves
    the graph's Float8 set, the layers' linears stay."""
    converted, kept = (estimate("llama-3-8b", **RUN, fp8_keep_output=keep) for keep in (False, True))
    assert float8_flops(converted) - float8_flops(kept) == 6_455_335_845_888
    assert {w.split("/")[0] for w in converted.graph.float8} == {"layer", "head"}
    assert {w.split("/")[0] for w in kept.graph.float8} == {"layer"}
    assert "the output layer by --fp8-keep-output" in " ".join(kept.graph.assumptions)


def test_refused_without_a_torchao_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["estimate", "--model", "llama-3-8b", "--mode", "train", "--batch", "1", "--seq", "2048"]
    assert main(base + ["--fp8-keep-output"]) == 2
    err = capsys.readouterr().err.strip()
    assert "give --fp8 tensorwise" in err and "\n" not in err and "Traceback" not in err
