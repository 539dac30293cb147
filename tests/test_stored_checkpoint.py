"""A checkpoint's quantization_config gives its stored weight bytes with no flag (issue 38, item 3).

Expected numbers: FP8 and fbgemm FP8 from transformers' own modules (``replace_with_fp8_linear``,
``replace_with_fbgemm_fp8_linear``) on a tiny LLaMA on the meta device, summing its state dict; the other
methods by hand from the library's module layout, the arithmetic in each comment."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from memderive.derivations.estimate import estimate
from memderive.derivations.models.config import from_config

TINY = dict(model_type="llama", hidden_size=192, num_attention_heads=6, num_key_value_heads=2, num_hidden_layers=2,
            intermediate_size=320, vocab_size=100, head_dim=32)


def _weights(config: dict, **options) -> int:
    est = estimate(from_config(config), mode="infer", batch=1, seq=1, **options)
    return est.number("weight_bytes")


def _transformers_stored(qc, replace) -> int:
    """Bytes of the state dict transformers' quantized LLaMA holds (meta device: no memory)."""
    import torch
    import transformers
    import transformers.integrations.fbgemm_fp8 as fbgemm

    fbgemm.get_quantize_fp8_per_row = lambda: None  # the FBGEMM kernel: not needed to build the modules
    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model = replace(model, modules_to_not_convert=["lm_head"], quantization_config=qc, pre_quantized=True)
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


@pytest.mark.parametrize("quant", [
    {"quant_method": "fp8", "weight_block_size": [128, 128]},
    {"quant_method": "fp8", "weight_block_size": None, "activation_scheme": "static"},
    {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]},
])
def test_fp8_as_transformers_stores_it(quant: dict) -> None:
    import transformers
    from transformers.integrations.fbgemm_fp8 import replace_with_fbgemm_fp8_linear
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    if quant["quant_method"] == "fp8":
        qc = transformers.FineGrainedFP8Config(weight_block_size=quant["weight_block_size"],
                                               activation_scheme=quant.get("activation_scheme", "dynamic"))
        expected = _transformers_stored(qc, replace_with_fp8_linear)
    else:
        expected = _transformers_stored(transformers.FbgemmFp8Config(), replace_with_fbgemm_fp8_linear)
    assert _weights({**TINY, "quantization_config": quant}) == expected


# Per layer of the tiny LLaMA: q (192 x 192), k, v (64 x 192 each), o (192 x 192), gate, up (320 x 192),
# down (192 x 320): 36,864 x 2 + 12,288 x 2 + 61,440 x 3 = 282,624 weights. 16-bit rest: embeddings and head 2 x 100 x 192, norms 5 x 192:
# 39,360 x 2 = 78,720 B.
REST = 78_720


def test_gptq_by_hand() -> None:
    # 4-bit, group 128, per module (out x in): qweight in*out/2, qzeros 4*ceil(in/128)*ceil(out/8),
    # scales 2*ceil(in/128)*out, g_idx 4*in.
    # q: 18432 + 4*2*24 + 2*2*192 + 768 = 20160;  k, v: 6144 + 4*2*8 + 2*2*64 + 768 = 7232 each;
    # o: 20160;  gate, up: 30720 + 4*2*40 + 2*2*320 + 768 = 33088 each;
    # down (in 320: 3 groups): 30720 + 4*3*24 + 2*3*192 + 1280 = 33440.
    # Layer: 2*20160 + 2*7232 + 2*33088 + 33440 = 154,400 B.
    config = {**TINY, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}
    assert _weights(config) == 2 * 154_400 + REST


def test_awq_by_hand() -> None:
    # AWQ GEMM: the GPTQ figures without g_idx (4*in per module, in = 192 for six modules, 320 for down):
    # 154,400 - 4*(6*192 + 320) = 154,400 - 5,888 = 148,512 per layer.
    config = {**TINY, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128,
                                              "version": "gemm", "zero_point": True}}
    assert _weights(config) == 2 * 148_512 + REST


@pytest.mark.parametrize("double, per_layer", [
    # 7 modules; n and 64-blocks: q 36864 (576), k, v 12288 (192), o 36864 (576), gate, up, down 61440 (960):
    # codes n/2 = 141,312 in all; quant_map 16 fp32 = 64 B per module (448).
    # Without double quantization: fp32 absmax, 4 x 4,416 blocks = 17,664.
    (False, 141_312 + 17_664 + 448),
    # With it: uint8 absmax 4,416, nested fp32 absmax per 256 blocks 4 x (3+1+1+3+4+4+4) = 80, nested code
    # 256 fp32 = 1,024 per module (7,168).
    (True, 141_312 + 4_416 + 80 + 7_168 + 448),
])
def test_bitsandbytes_nf4_by_hand(double: bool, per_layer: int) -> None:
    config = {**TINY, "quantization_config": {"quant_method": "bitsandbytes", "_load_in_4bit": True,
                                              "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": double,
                                              "llm_int8_skip_modules": None}}
    assert _weights(config) == 2 * per_layer + REST


def test_compressed_tensors_w4a16_by_hand() -> None:
    # pack-quantized int4, groups of 64, symmetric: weight_packed int32 (out, in/8) = n/2 bytes (141,312),
    # weight_shape int64 x 2 = 16 B per module (112), weight_scale bf16 (out, in/64):
    # 2 x (192*3 + 64*3*2 + 192*3 + 320*3*2 + 192*5) = 2 x 4,416 = 8,832.
    config = {**TINY, "dtype": "bfloat16", "quantization_config": {
        "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "strategy": "group", "group_size": 64, "symmetric": True}}}}}
    assert _weights(config) == 2 * (141_312 + 112 + 8_832) + REST


def test_modelopt_fp8_and_nvfp4_by_hand() -> None:
    """NVIDIA ModelOpt's unified checkpoint (vLLM's ModelOptFp8Config / ModelOptNvFp4Config read these tensors), its
    quantization_config as ModelOpt 0.31 writes it (quant_algo, producer; no quant_method). FP8: each of the 7
    modules an fp8 weight and fp32 weight_scale and input_scale: 282,624 + 7 x 8 = 282,680 B per layer. NVFP4, groups
    of 16: weights two a byte, 141,312; an fp8 weight_scale per 16 inputs, 282,624 / 16 = 17,664; fp32 weight_scale_2
    and input_scale per module, 7 x 8 = 56: 159,032 per layer. Its exclude_modules patterns are shell-style: with
    "*mlp*" the MLP stays bf16 (3 x 61,440 x 2 = 368,640 per layer) and the attention in FP8: 2 x 36,864 + 2 x
    12,288 + 4 x 8 = 98,336."""
    producer = {"producer": {"name": "modelopt", "version": "0.31.0"}, "ignore": ["lm_head"]}
    assert _weights({**TINY, "quantization_config": {"quant_algo": "FP8", **producer}}) == 2 * 282_680 + REST
    nvfp4 = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}
    assert _weights({**TINY, "quantization_config": nvfp4}) == 2 * 159_032 + REST
    mlp = {"quant_method": "modelopt", "quant_algo": "FP8", "exclude_modules": ["lm_head", "*mlp*"]}
    assert _weights({**TINY, "quantization_config": mlp}) == 2 * (98_336 + 368_640) + REST
    # hf_quant_config.json's nesting, a lower-case algorithm, the two lists together: the same bytes
    nested = {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "fp8", "exclude_modules": ["*mlp*"],
                                                                 "ignore": ["lm_head"]}}
    assert _weights({**TINY, "quantization_config": nested}) == 2 * (98_336 + 368_640) + REST


def test_skipped_modules_stay_16_bit() -> None:
    from transformers.quantizers.quantizers_utils import should_convert_module

    skip = [r"model.layers.\d+.mlp"]  # transformers' own matcher leaves the MLP and only it
    assert not should_convert_module("model.layers.1.mlp.up_proj", skip)
    assert should_convert_module("model.layers.1.self_attn.q_proj", skip)
    # fbgemm FP8 with the MLP left alone: attention as stored (q, o 192*192 + 4*192; k, v 64*192 + 4*64),
    # 2 x (37,632 + 12,544) = 100,352; MLP in bf16: 3 x 61,440 x 2 = 368,640 per layer.
    config = {**TINY, "quantization_config": {"quant_method": "fbgemm_fp8", "modules_to_not_convert": skip}}
    assert _weights(config) == 2 * (100_352 + 368_640) + REST


def test_weight_dtype_overrides_and_says_so() -> None:
    config = {**TINY, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}
    est = estimate(from_config(config), mode="infer", batch=1, seq=1, weight_dtype="bf16")
    assert est.number("weight_bytes") == (282_624 * 2) * 2 + REST
    assert any("overrides the checkpoint's quantization_config: gptq 4-bit" in n
               for n in est.quantity("weight_bytes").assumptions)


def _cli(tmp_path, quant) -> subprocess.CompletedProcess:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, "quantization_config": quant}))
    return subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", str(path), "--mode", "infer",
                           "--batch", "1", "--seq", "1"], capture_output=True, text=True)


def test_unmodelled_method_is_one_line(tmp_path) -> None:
    run = _cli(tmp_path, {"quant_method": "hqq", "nbits": 4})
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "quant_method 'hqq' is not modelled" in run.stderr and "--weight-dtype" in run.stderr


def test_per_layer_skip_is_refused(tmp_path) -> None:
    run = _cli(tmp_path, {"quant_method": "fp8", "modules_to_not_convert": ["model.layers.0.mlp"]})
    assert run.returncode == 2 and "some layers only" in run.stderr and "Traceback" not in run.stderr


def test_cli_names_the_declared_quantization(tmp_path) -> None:
    run = _cli(tmp_path, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert run.returncode == 0, run.stderr
    assert "weight dtype as stored (fp8)" in run.stdout and "weight_scale_inv per 128x128 block" in run.stdout


def test_safetensors_folder_to_the_byte(tmp_path) -> None:
    """transformers' own save_pretrained writes the folder; the stored bytes are the file less its header."""
    import torch
    import transformers
    import struct

    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path)
    data = (tmp_path / "model.safetensors").read_bytes()
    header = struct.unpack("<Q", data[:8])[0]
    est = estimate(str(tmp_path), mode="infer", batch=1, seq=1)
    stored = est.model.checkpoint
    assert stored.total == len(data) - 8 - header  # 2 x 282,624 x 2 + 78,720 = 1,209,216 B of bf16
    assert stored.total == est.number("weight_bytes") == 1_209_216
    assert any(n.startswith("checkpoint as stored (safetensors headers of 1 file): 21 tensors, 1,209,216 B")
               for n in est.notes())


def _gguf(path, tensors) -> int:
    """A GGUF v3 file by hand (ggml docs/gguf.md): one string metadata pair, tensor infos, aligned data."""
    import struct

    def string(s: str) -> bytes:
        return struct.pack("<Q", len(s)) + s.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + string("general.architecture") + struct.pack(
        "<I", 8) + string("llama")
    offset, infos, blobs = 0, b"", []
    for name, dims, kind, nbytes in tensors:
        infos += string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, kind, offset)
        blobs.append(bytes(nbytes) + bytes(-nbytes % 32))
        offset += nbytes + (-nbytes % 32)
    body = head + infos
    path.write_bytes(body + bytes(-len(body) % 32) + b"".join(blobs))
    return sum(n for *_, n in tensors)


def test_gguf_header_k_quants(tmp_path) -> None:
    from memderive.derivations.models.checkpoint_files import read_checkpoint

    # Q4_K 4096 x 4096: 65,536 blocks of 256 x 144 B; Q6_K 4096 x 32000: 512,000 x 210 B;
    # Q8_0 4096 x 1024: 131,072 blocks of 32 x 34 B; F32 norm 4096 x 4 B (ggml's type table, gguf-py).
    tensors = [("blk.0.attn_q.weight", (4096, 4096), 12, 65_536 * 144),
               ("output.weight", (4096, 32000), 14, 512_000 * 210),
               ("blk.0.attn_k.weight", (4096, 1024), 8, 131_072 * 34),
               ("blk.0.attn_norm.weight", (4096,), 0, 4096 * 4)]
    expected = _gguf(tmp_path / "model.gguf", tensors)
    stored = read_checkpoint(tmp_path)
    assert stored.total == expected == 121_430_016
    assert dict((d, b) for d, _, b in stored.by_dtype) == {"Q6_K": 107_520_000, "Q4_K": 9_437_184,
                                                            "Q8_0": 4_456_448, "F32": 16_384}


@pytest.mark.parametrize("content, message", [
    (b"\x05\x00", "too short for a safetensors file"),
    (b"\xff" * 8 + b"{}", "does not fit the file"),
    (b"\x10\x00\x00\x00\x00\x00\x00\x00" + b'{"a": {"dtype"}}', "header is not JSON"),
])
def test_bad_safetensors_is_one_line(tmp_path, content: bytes, message: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "model.safetensors").write_bytes(content)
    run = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", str(tmp_path), "--mode", "params"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr and message in run.stderr, run.stderr


def test_fp8_experts_as_transformers_stores_them() -> None:
    """Mixtral's routed experts (FP8Experts: gate_up_proj and down_proj with block scales) and router (left in
    bf16) as transformers builds them on the meta device."""
    import torch
    import transformers
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear

    sizes = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, num_hidden_layers=2,
                 intermediate_size=384, num_local_experts=4, num_experts_per_tok=2, vocab_size=100)
    with torch.device("meta"):
        model = transformers.MixtralForCausalLM(transformers.MixtralConfig(**sizes)).to(torch.bfloat16)
    model = replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"], pre_quantized=True,
                                    quantization_config=transformers.FineGrainedFP8Config(weight_block_size=[128, 128]))
    expected = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    config = {"model_type": "mixtral", **sizes, "quantization_config": {"quant_method": "fp8",
                                                                         "weight_block_size": [128, 128]}}
    assert _weights(config) == expected == 2_862_240


def test_bitsandbytes_prefill_holds_a_dequantized_weight() -> None:
    # Linear4bit.forward: a prompt of several tokens goes through MatMul4Bit, which dequantizes the whole weight
    # to the activations' dtype: the largest (gate, up, down: 320 x 192 = 61,440 weights) in bf16 is 122,880 B,
    # more than any activation of a 2-token prompt of the tiny LLaMA.
    config = {**TINY, "quantization_config": {"quant_method": "bitsandbytes", "_load_in_4bit": True,
                                              "bnb_4bit_quant_type": "nf4"}}
    est = estimate(from_config(config), mode="infer", batch=1, seq=2)
    assert est.number("activation_bytes") == 122_880
    assert estimate(from_config(TINY), mode="infer", batch=1, seq=2).number("activation_bytes") < 122_880


def test_sharded_safetensors_by_their_index(tmp_path) -> None:
    """transformers' save_pretrained with a small max_shard_size writes shards and model.safetensors.index.json;
    the stored bytes are each shard less its header, summed, and the index's own total_size."""
    import torch
    import transformers
    import struct

    config = transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"})
    transformers.LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(tmp_path, max_shard_size="300KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1
    body = 0
    for shard in shards:
        data = shard.read_bytes()
        body += len(data) - 8 - struct.unpack("<Q", data[:8])[0]
    stored = estimate(str(tmp_path), mode="params").model.checkpoint
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert stored.total == body == index["metadata"]["total_size"] == 1_209_216
    assert stored.files == len(shards) and stored.tensors == 21


def test_a_checkpoint_file_as_model_is_one_line(tmp_path) -> None:
    path = tmp_path / "model.gguf"
    _gguf(path, [("output.weight", (256,), 0, 1024)])
    run = subprocess.run([sys.executable, "-m", "memderive", "estimate", "--model", str(path)], capture_output=True,
                         text=True)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "give the folder" in run.stderr, run.stderr


def test_gpt_oss_mxfp4_config_as_its_flag() -> None:
    # gpt-oss-20b's quantization_config (mxfp4; attention, router, embeddings and head left alone) gives what
    # --weight-dtype mxfp4 gives (the routed experts' 4-bit blocks and e8m0 scales, the rest bf16).
    from dataclasses import replace

    from memderive.derivations.models.presets import preset
    from memderive.derivations.models.quantization import read_quantization

    model = preset("gpt-oss-20b")
    q = read_quantization({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})
    stored = estimate(replace(model, quantization=q), mode="infer", batch=1, seq=8).number("weight_bytes")
    assert stored == estimate(model, mode="infer", batch=1, seq=8, weight_dtype="mxfp4").number("weight_bytes")
