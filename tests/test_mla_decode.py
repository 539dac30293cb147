"""Multi-head latent attention's decode step: absorbed by default (vLLM's ``_forward_decode``, module docstring of
vllm/v1/attention/backends/mla/common.py: ql_nope = q_nope W_UK, MQA over [kv_c, k_pe] with values kv_c,
o = spda_o W_UV), transformers' expanded form with ``--mla-decode expanded``; inference FLOPs cited as Kaplan's
forward pass (2N), not 6N."""

from __future__ import annotations

import subprocess
import sys

from memderive.derivations.estimate import estimate

# DeepSeek-V3 (config.json): h 7168, a 128, l 61 (3 dense), V 129280, f 18432, d_h 128, d_hR 64, d_v 128,
# d_c 512, d_cq 1536, E 256, k 8, f_e 2048, f_s 2048 (one shared expert).
# One decode token at L = s + n = 4096 cached positions, per layer (2 FLOPs per multiply-add):
#   q_a 2*7168*1536 = 22,020,096; q_b 2*1536*128*192 = 75,497,472; kv_a 2*7168*576 = 8,257,536
#   W_UK 2*128*128*512 = 16,777,216; scores 2*128*576*4096 + context 2*128*512*4096 = 1,140,850,688
#   W_UV 2*128*512*128 = 16,777,216; o_proj 2*128*128*7168 = 234,881,024      -> 1,515,061,248 x 61 layers
#   = 92,418,736,128
# dense MLP 6*7168*18432 = 792,723,456 x 3 = 2,378,170,368
# MoE layer: router 2*7168*256 = 3,670,016 + 8 experts 6*7168*2048*8 = 704,643,072 + shared 6*7168*2048
#   = 88,080,384 -> 796,393,472 x 58 = 46,190,821,376
# LM head 2*129280*7168 = 1,853,358,080
# total 92,418,736,128 + 2,378,170,368 + 46,190,821,376 + 1,853,358,080 = 142,841,085,952
ABSORBED_4096 = 142_841_085_952
# Expanded (transformers): kv_b over every cached latent, 2*512*128*256*4096 = 137,438,953,472 per layer, and
# MHA 2*128*192*4096 + 2*128*128*4096 = 335,544,320 in place of W_UK, the latent MQA and W_UV
# (16,777,216 + 1,140,850,688 + 16,777,216): 136,600,092,672 more per layer, x 61 = 8,332,605,652,992.
EXPANDED_4096 = ABSORBED_4096 + 8_332_605_652_992


def _decode(**more: object) -> object:
    return estimate("deepseek-v3", mode="infer", batch=1, seq=4096, **more)


def test_deepseek_v3_decode_absorbed_by_hand() -> None:
    est = _decode()
    assert est.number("decode_flops_per_token") == ABSORBED_4096
    q = est.quantity("decode_flops_per_token")
    assert "2N" in q.citation.locus and "6N" not in q.citation.locus
    assert any("absorbed" in note for note in q.assumptions)


def test_deepseek_v3_decode_expanded_by_hand() -> None:
    """The expanded form is what main printed before absorption was modelled (8,475,446,738,944 at s = 4096)."""
    assert _decode(mla_decode="expanded").number("decode_flops_per_token") == EXPANDED_4096 == 8_475_446_738_944


def test_absorption_keeps_parameters_bytes_and_prefill() -> None:
    """W_UK and W_UV are views of kv_b: the same parameters, weights, cache and prefill FLOPs either way."""
    one, other = _decode(), _decode(mla_decode="expanded")
    for key in ("parameters", "weight_bytes", "kv_cache_bytes", "total_bytes", "prefill_flops"):
        assert one.number(key) == other.number(key), key


def test_absorbed_decode_under_tensor_parallelism_by_hand() -> None:
    """tp 8 divides the heads; q_a and kv_a are replicated (each rank runs them whole), as are the router and
    the dense ops of neither kind: per layer 22,020,096 + 8,257,536 = 30,277,632 whole, the rest of the attention
    (1,484,783,616) / 8 = 185,597,952; 61 x 215,875,584 = 13,168,410,624. MLPs: dense 792,723,456 / 8 x 3 =
    297,271,296; MoE layer router 3,670,016 whole + (704,643,072 + 88,080,384) / 8 = 102,760,448, x 58 =
    5,960,105,984; LM head vocab-parallel 1,853,358,080 / 8 = 231,669,760. Sum 19,657,457,664."""
    est = _decode(tp=8)
    assert est.number("decode_flops_per_token_per_gpu") == 19_657_457_664


def test_mla_decode_refused_without_latent_attention() -> None:
    proc = subprocess.run([sys.executable, "-m", "memderive.commands.cli", "estimate", "--model", "llama-2-7b", "--mode",
                           "infer", "--batch", "1", "--seq", "8", "--mla-decode", "expanded"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "latent attention" in proc.stderr
