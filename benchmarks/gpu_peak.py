"""Every ``--framework`` preset run on a CUDA GPU, measured beside memderive's derivation (a benchmark, not a test).

    python benchmarks/gpu_peak.py [--model llama-3-8b] [--layers 2] [--batch 1] [--seq 2048] [--steps 2]
                                  [--only torchtune] [--gpu NAME]

Each preset runs in a fresh process (so that the CUDA context and the caching allocator start empty):
the training presets build the transformers model of a bundled config (``--layers`` keeps its first
layers; random weights, nothing downloaded) with the preset's settings that plain PyTorch can express
(dtype, activation checkpointing as ``gradient_checkpointing_enable``, attention kernel, dropout) and take
``--steps`` optimizer steps with ``torch.optim.AdamW``; the derivation runs ``estimate`` with the same
framework, options and GPU. Printed, for each preset: ``torch.cuda.max_memory_allocated``,
``max_memory_reserved`` and the device memory in use at the end (``cudaMemGetInfo`` total - free, what
nvidia-smi shows for this process), beside ``allocated_bytes``, ``reserved_bytes`` and ``device_bytes``.
What a preset runs that plain PyTorch does not (FSDP sharding, paged 8-bit optimizers, fused kernels) is
overridden on both sides and said so. The vllm preset runs vLLM itself when it is installed (dummy
weights, no tokenizer) and prints its KV blocks beside ``kv_cache_blocks``.

Without CUDA it says so and exits 0: nothing here is needed by the tests.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memderive.derivations.estimate import estimate
from memderive.derivations.frameworks import FRAMEWORKS
from memderive.derivations.models.presets import PRESETS
from memderive.derivations.options import Options
from memderive.derivations.quantities.runtime import runtime
from memderive.derivations.quantities.serving import vllm_startup
from memderive.symbolic.lazy import lazy

torch = lazy("torch")
transformers = lazy("transformers")
vllm = lazy("vllm")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30
#: How each training preset runs in plain PyTorch: options overridden on both sides (what plain PyTorch
#: cannot run as the framework does), and why.
OVERRIDES: dict[str, tuple[dict[str, Any], str]] = {
    "hf-trainer": ({}, "the Trainer's defaults are plain PyTorch already"),
    "torchtune": ({"optimizer": "adamw"}, "torch.optim.AdamW for bitsandbytes' PagedAdamW8bit (not installed)"),
    "torchtitan": ({"dp": 1, "implementation": "hf", "recompute": "full"}, "one GPU: FSDP has nothing to shard; "
                   "transformers' layers with whole-layer checkpointing for torchtitan's op-level selective"),
    "megatron": ({"implementation": "hf"}, "transformers' layers for Megatron's fused ones (Megatron not installed)"),
    "deepspeed": ({}, "ZeRO stage 0 on one GPU is plain data parallelism of one"),
}
#: torch.cuda.get_device_name() fragments -> derivations.hardware names (first match wins).
DEVICE_NAMES: tuple[tuple[str, str | None], ...] = (
    ("GH200", None), ("H200", "h200"), ("H800 PCIe", None), ("H800", "h800"), ("A800-SXM4-80GB", "a800-80gb"),
    ("A800", None),
    ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"), ("A100-SXM4-80GB", "a100-80gb"),
                ("A100 80GB", "a100-80gb"), ("A100", "a100-40gb"), ("B200", "b200"), ("L40S", "l40s"), ("L4", "l4"),
                ("A10", "a10"), ("RTX A6000", "a6000"), ("RTX 4090", "rtx-4090"), ("RTX 3090", "rtx-3090"),
                ("T4", "t4"), ("V100-SXM2-32GB", "v100-32gb"), ("V100", "v100-16gb"), ("MI325X", "mi325x"),
                ("MI300X", "mi300x"))


def table_gpu(device_name: str) -> str | None:
    """The GPU table's name for a CUDA device name (None when the table has no such GPU).

    >>> table_gpu("NVIDIA H100 80GB HBM3"), table_gpu("NVIDIA A100-SXM4-40GB"), table_gpu("Tesla T4")
    ('h100-sxm', 'a100-40gb', 't4')
    >>> table_gpu("NVIDIA A800-SXM4-80GB"), table_gpu("NVIDIA A800 40GB PCIe"), table_gpu("NVIDIA H800 PCIe")
    ('a800-80gb', None, None)
    """
    return next((name for fragment, name in DEVICE_NAMES if fragment in device_name), None)


def runs(model: str, layers: int, batch: int, seq: int) -> list[dict[str, Any]]:
    """One run per preset: the framework, the options both sides use, and what is overridden."""
    out = []
    for name, framework in FRAMEWORKS.items():
        mode = framework.mode
        override, why = OVERRIDES.get(name, ({}, "vLLM itself, dummy weights"))
        options = {"mode": mode, "batch": batch, "seq": seq, "framework": name, **override}
        out.append({"framework": name, "model": model, "layers": layers, "options": options, "why": why})
    return out


def _config(name: str, layers: int) -> dict[str, Any]:
    config = dict(PRESETS[name])
    for key in ("num_hidden_layers", "n_layer"):
        if key in config and layers:
            config[key] = layers
    return config


def derived(run: dict[str, Any], gpu: str) -> dict[str, Any]:
    """memderive's numbers for a run on ``gpu``."""
    est = estimate(_config(run["model"], run["layers"]), gpu=gpu, **run["options"])
    r = runtime(est)
    out = {"allocated": r.allocated_bytes, "reserved": r.reserved_bytes, "device": r.device_bytes,
           "options": est.inputs()}
    v = vllm_startup(est)
    if v is not None:
        out["kv_cache_blocks"] = v.kv_cache_blocks
    return out


def _train(run: dict[str, Any], steps: int) -> dict[str, int]:
    """The run in plain PyTorch: the preset's dtype, checkpointing, attention and dropout."""
    o = Options.from_keywords(run["options"])
    config = transformers.AutoConfig.for_model(**_config(run["model"], run["layers"]))
    config._attn_implementation = o.attention_kernel if o.attention_kernel != "flash" else "sdpa"
    if not o.dropout:
        for key in ("attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
            if hasattr(config, key):
                setattr(config, key, 0.0)
    torch.manual_seed(0)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[o.dtype]
    model = transformers.AutoModelForCausalLM.from_config(config).to("cuda", dtype).train()
    if o.recompute == "full":
        model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(0, config.vocab_size, (o.batch, o.seq), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    for _ in range(steps):  # the second step has the optimizer states allocated
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return {"allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved(),
            "device": total - free}


def _vllm(run: dict[str, Any]) -> dict[str, int] | str:
    """vLLM's engine on a local config with dummy weights: its KV blocks (or why nothing was measured)."""
    try:
        engine = vllm.LLM  # the first read imports vLLM
    except ImportError:
        return "vllm is not installed: nothing measured for the vllm preset"
    o = run["options"]
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "config.json").write_text(json.dumps({**_config(run["model"], run["layers"]),
                                                           "torch_dtype": "bfloat16"}))
        llm = engine(model=folder, load_format="dummy", skip_tokenizer_init=True, max_model_len=o["seq"],
                       gpu_memory_utilization=0.9)
        cache = llm.llm_engine.vllm_config.cache_config
        free, total = torch.cuda.mem_get_info()
        return {"kv_cache_blocks": int(cache.num_gpu_blocks), "device": total - free,
                "allocated": torch.cuda.max_memory_allocated(), "reserved": torch.cuda.max_memory_reserved()}


def measure_one(run: dict[str, Any], steps: int) -> dict[str, Any]:
    gpu = table_gpu(torch.cuda.get_device_name())
    measured = _vllm(run) if run["framework"] == "vllm" else _train(run, steps)
    return {"gpu": gpu, "device_name": torch.cuda.get_device_name(), "measured": measured}


def _row(label: str, measured: int, derived_bytes: int) -> str:
    ratio = measured / derived_bytes if derived_bytes else float("nan")
    return f"    {label:<10} measured {measured / GIB:9.3f} GiB   memderive {derived_bytes / GIB:9.3f} GiB   ratio {ratio:.3f}"


def report(run: dict[str, Any], result: dict[str, Any], gpu: str) -> list[str]:
    lines = [f"{run['framework']}: {run['model']} ({run['layers']} layers), {run['why']}"]
    measured = result["measured"]
    if isinstance(measured, str):
        return lines + [f"    {measured}"]
    ours = derived(run, gpu)
    for key in ("allocated", "reserved", "device"):
        lines.append(_row(key, measured[key], ours[key]))
    if "kv_cache_blocks" in measured:
        lines.append(f"    KV blocks  measured {measured['kv_cache_blocks']:,}   memderive {ours['kv_cache_blocks']:,}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="llama-3-8b")
    parser.add_argument("--layers", type=int, default=2, help="keep this many layers (0: all)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--only", help="run this preset only")
    parser.add_argument("--gpu", help="the GPU table's name, if the device name does not say it")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: one run, JSON out
    args = parser.parse_args(argv)
    try:
        cuda = torch.cuda.is_available()  # the first read imports torch
    except ImportError:
        print("gpu_peak: torch is not installed; nothing measured")
        return 0
    if not cuda:
        print("gpu_peak: no CUDA device; nothing measured (this benchmark needs a GPU)")
        return 0
    plans = [r for r in runs(args.model, args.layers, args.batch, args.seq) if args.only in (None, r["framework"])]
    if args.one:
        print(json.dumps(measure_one(next(r for r in plans if r["framework"] == args.one), args.steps)))
        return 0
    gpu = args.gpu or table_gpu(torch.cuda.get_device_name())
    if gpu is None:
        print(f"gpu_peak: {torch.cuda.get_device_name()} is not in the GPU table; give --gpu NAME")
        return 2
    print(f"gpu_peak: {torch.cuda.get_device_name()} as {gpu}, b={args.batch}, s={args.seq}, {args.steps} steps")
    for run in plans:
        child = subprocess.run([sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]),
                                "--one", run["framework"]], capture_output=True, text=True)
        if child.returncode != 0:
            print(f"{run['framework']}: failed: {child.stderr.strip().splitlines()[-1:]}")
            continue
        print("\n".join(report(run, json.loads(child.stdout.strip().splitlines()[-1]), gpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
