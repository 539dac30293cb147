"""Measured CUDA memory beside memderive's estimate under the matching implementation (a benchmark, not a test).

    python benchmarks/gpu_peak.py [--model llama-2-7b] [--layers 4] [--batch 1] [--seq 2048]
                                  [--new-tokens 128] [--attention sdpa]

Builds the transformers model of a bundled config (``--layers`` keeps its first layers so it fits one GPU;
random weights, nothing downloaded) and measures, with ``torch.cuda.memory_allocated`` /
``max_memory_allocated``:

1. saved activations: a bf16 model's training-mode forward, allocated after minus before (what autograd
   holds for backward, plus the loss; the caching allocator rounds each block up to 512 bytes), beside
   ``activation_bytes`` of ``--implementation hf-<attention> --profile exact`` (CUDA kernels modelled);
2. a training step under ``torch.autocast(bfloat16)`` with AdamW on fp32 weights: the peak, beside
   memderive's ``total_bytes`` for the same step. Autocast differs from the graph's recipe (bf16 weights and
   gradients with an fp32 master copy): it keeps fp32 weights and gradients, saves bf16 copies of the
   weights for backward and an fp32 residual stream; the difference is printed, not hidden;
3. a prefill of ``--seq`` tokens and ``--new-tokens`` greedy decode steps of the bf16 model: the peak
   beside memderive's inference ``total_bytes``.

Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

GB = 10**9


def _config(name: str, layers: int | None) -> dict[str, Any]:
    from memderive.derivations.models.presets import PRESETS

    config = dict(PRESETS[name])
    for key in ("num_hidden_layers", "n_layer"):
        if key in config and layers:
            config[key] = layers
    return config


def _estimate(config: dict[str, Any], **options: Any) -> Any:
    from memderive.derivations.estimate import estimate

    return estimate(config, **options)


def _row(label: str, measured: int, derived: int) -> str:
    ratio = measured / derived if derived else float("nan")
    return f"  {label:<44} measured {measured / GB:9.3f} GB   memderive {derived / GB:9.3f} GB   ratio {ratio:.4f}"


def _activations(torch: Any, model: Any, ids: Any) -> int:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss = model(input_ids=ids, labels=ids).loss
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() - before
    loss.backward()
    model.zero_grad(set_to_none=True)
    return held


def _train_step_peak(torch: Any, model: Any, ids: Any) -> int:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):  # the second step has the optimizer states allocated
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def _generate_peak(torch: Any, model: Any, ids: Any, new_tokens: int) -> int:
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--layers", type=int, default=4, help="keep this many layers (0: all)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--attention", choices=("eager", "sdpa"), default="sdpa")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_peak: torch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("gpu_peak: no CUDA device; nothing measured (this benchmark needs a GPU)")
        return 0
    import transformers

    config = _config(args.model, args.layers)
    hf_config = transformers.AutoConfig.for_model(**config)
    hf_config._attn_implementation = args.attention
    ids = torch.randint(0, hf_config.vocab_size, (args.batch, args.seq), device="cuda")
    common = dict(batch=args.batch, seq=args.seq)
    impl = f"hf-{args.attention}"
    print(f"gpu_peak: {args.model} ({args.layers or 'all'} layers), b={args.batch}, s={args.seq}, {impl}, "
          f"{torch.cuda.get_device_name()}")

    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config).to("cuda", torch.bfloat16).train()
    acts = _estimate(config, mode="train", implementation=impl, profile="exact", **common)
    print(_row("saved activations, bf16 forward", _activations(torch, model, ids), acts.number("activation_bytes")))

    model = model.float()  # fp32 weights, bf16 autocast: the usual mixed-precision recipe
    train = _estimate(config, mode="train", implementation=impl, profile="exact", **common)
    print(_row("training step peak, autocast + AdamW", _train_step_peak(torch, model, ids),
               train.number("total_bytes")))
    print("    (memderive: bf16 weights and gradients + fp32 master and Adam moments = 16 bytes per parameter;\n"
          "     autocast: fp32 weights, fp32 gradients, Adam moments = 16, plus bf16 weight copies saved for\n"
          "     backward and an fp32 residual stream, which the graph does not model)")

    model = model.to(torch.bfloat16).eval()
    infer = _estimate(config, mode="infer", new_tokens=args.new_tokens, **common)
    print(_row(f"prefill + {args.new_tokens} decode steps peak", _generate_peak(torch, model, ids, args.new_tokens),
               infer.number("total_bytes")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
