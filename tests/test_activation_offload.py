"""Megatron-Core's CPU activation offloading (--activation-offload-layers, derivations/quantities/activation_offload.py):
the bytes that leave the GPU by hand, the exposed copy time against an event-by-event replay of Transformer Engine's
DefaultOffloadSynchronizer schedule (cpu_offload.py, written out here), the refusals and the CLI round trip."""

from __future__ import annotations

import json
import random

import pytest

from memderive.commands.cli import main
from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError
from memderive.derivations.quantities.activation_offload import exposed_copy_s
from memderive.derivations.quantities.timing import time_of

# llama-3-8b, micro-batch 1 x 4,096 tokens, bf16, Megatron's fused layer with flash attention, per layer
# (2 B x s b = 8,192 B per element of a token's vector): norm1's input, qkv's input, the residual before norm2 and
# fc1's input, 4 x 8,192 x 4,096 = 134,217,728; q, k, v 8,192 x (4,096 + 2 x 1,024) = 50,331,648; the attention
# output (proj's input) 33,554,432 and its fp32 log-sum-exp 4 x 32 heads x 4,096 = 524,288; SwiGLU's input
# 8,192 x 2 x 14,336 = 234,881,024 and fc2's input 8,192 x 14,336 = 117,440,512: 570,949,632 B a layer.
LAYER = 570_949_632
ARGS = dict(mode="train", batch=1, seq=4096, framework="megatron", gpu="h100-sxm")


def test_the_offloaded_layers_bytes_leave_the_gpu() -> None:
    plain = estimate("llama-3-8b", **ARGS)
    off = estimate("llama-3-8b", activation_offload_layers=8, **ARGS)
    assert plain.number("activation_bytes_per_layer") == LAYER
    assert off.number("offloaded_activation_bytes") == 8 * LAYER == 4_567_597_056
    # TE keeps l - N = 24 layers' saved tensors at once: 8 layers' fewer on the GPU, the rest (embedding, loss) as is
    assert plain.number("activation_bytes") - off.number("activation_bytes") == 8 * LAYER
    assert plain.number("total_bytes") - off.number("total_bytes") == 8 * LAYER
    names = off.to_json()["names"]  # the host line has a public name, as every key
    assert names["offloaded_activation_bytes"] == "activations.offloaded"
    assert off.quantity("activations.offloaded") is off.quantity("offloaded_activation_bytes")


def _replay(layers: int, n: int, c: float, f: float) -> float:
    """The compute stream's waits in one pass, TE's schedule step by step: offload i (layers 0..n-1, one at a time
    on the side stream) queued at layer i+1's start, awaited at layer l-n+i's start."""
    t, stream_free, done, waited = 0.0, 0.0, {}, 0.0
    for layer in range(layers):
        if layer >= 1 and layer - 1 < n:  # fwd_step: start_offload of the layer before
            stream_free = max(stream_free, t) + c
            done[layer - 1] = stream_free
        i = layer - (layers - n)  # finish_offload_map[l - n + i] = [i]
        if 0 <= i < n and done[i] > t:
            waited += done[i] - t
            t = done[i]
        t += f
    return waited


@pytest.mark.parametrize("n", [8, 24, 31])
def test_exposed_copies_over_pcie_match_a_replay_of_te_schedule(n: int) -> None:
    # H100 SXM's PCIe Gen5 x16 slot: 128 GB/s both ways, 64 GB/s each (datasheet); a layer's copy 8.92 ms
    e = estimate("llama-3-8b", activation_offload_layers=n, **ARGS)
    st = time_of(e)
    c = LAYER / 64e9
    micro = st.compute_s + st.elementwise_s  # one micro-batch; a layer a third of it over 32 forward, twice backward
    f = micro / 3 / 32
    want = _replay(32, n, c, f) + _replay(32, n, c, 2 * f)
    assert st.activation_offload_s == pytest.approx(want, rel=1e-9)
    assert st.to_json()["act_offload_time_s"] == st.activation_offload_s
    if n == 8:
        assert want == 0  # 8 copies of 8.9 ms behind 30 layers' 3.4 ms: hidden
    if n == 24:  # forward 24 x 8.92 - 30 x 3.50 = 109 ms, backward 24 x 8.92 - 30 x 7.00 = 4 ms
        assert round(want, 3) == 0.113
    plain = time_of(estimate("llama-3-8b", **ARGS))
    assert st.step_s - plain.step_s == pytest.approx(st.activation_offload_s, rel=1e-9)


@pytest.mark.parametrize("more, message", [
    (dict(activation_offload_layers=-1), "--activation-offload-layers must be a whole number that is not negative"),
    (dict(activation_offload_layers=10**16), "--activation-offload-layers = 1.000e\\+16 is past the bound of 10\\^15"),
    (dict(activation_offload_layers=32), "at most 31"),
    (dict(activation_offload_layers=2, framework=None), "add --framework megatron"),
    (dict(activation_offload_layers=2, pp=2), "with --pp is not modelled"),
])
def test_refusals(more: dict, message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        estimate("llama-3-8b", **{**ARGS, **more}).number("activation_bytes")


def test_cli_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["estimate", "--model", "llama-3-8b", "--mode", "train", "--batch", "1", "--seq", "4096", "--framework",
            "megatron", "--gpu", "h100-sxm", "--activation-offload-layers", "8", "--json"]
    assert main(argv) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["inputs"]["activation_offload_layers"] == 8
    assert main(argv[:-3] + ["--activation-offload-layers", "32"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at most 31" in err[0]


def test_the_closed_form_matches_the_replay_over_random_schedules() -> None:
    rng = random.Random(39)
    for _ in range(300):
        layers = rng.randint(2, 40)
        n = rng.randint(1, layers - 1)
        c, f = rng.uniform(0.1, 5.0), rng.uniform(0.1, 5.0)
        assert exposed_copy_s(layers, n, c, f) == pytest.approx(_replay(layers, n, c, f), abs=1e-9)
