"""What torchtitan's tensor parallelism saves for backward, measured on CPU (a measurement, not a test).

    python benchmarks/titan_tp_saved.py          # both plans, two gloo ranks, a few seconds each

One Llama block (h 128, 4 heads, FFN 320, b 2, s 64) under torchtitan's ``apply_tp`` layer plan (9dec370
torchtitan/parallelisms/parallelize_llama.py): sequence-parallel norms, ``PrepareModuleInput`` (Shard(1) ->
Replicate) on the attention and the feed-forward, wq/wk/wv/w1/w3 column- and wo/w2 row-parallel, over 2 ranks; and
the same with torchao's Float8 plan (``Float8ColwiseParallel``, ``Float8RowwiseParallel``,
``PrepareFloat8ModuleInput``) over ``convert_to_float8_training`` (tensorwise, ``emulate=True``: CPU has no
``_scaled_mm`` of its own). Every tensor autograd saves is recorded once (``saved_tensors_hooks``, by storage); a
Float8 tensor by its 8-bit data (its 0-d fp32 scale not counted). gloo has no float8 dtype: the 8-bit data is moved as
uint8, the bytes NCCL moves. Printed: rank 0's saved tensors by dtype and shape. Measured (torch 2.13, torchao 0.18):
16-bit plan 616,448 B, Float8 plan 571,392 B (-45,056): the two gathered 16-bit inputs (2-d views (128, 128),
32,768 B each) become 8-bit (2, 64, 128), 16,384 B each; w2's 16-bit input (128, 160), 40,960 B, its 8-bit cast
(2, 64, 160), 20,480 B; wo adds its 8-bit input (2, 64, 64), 8,192 B (``tests/test_titan_fp8.py``). Its
8-bit all-gathers: INPUT twice (the attention's and the feed-forward's input, forward), GRAD_OUTPUT twice (wo's and
w2's output gradients, backward); the reduce-scatters move 16-bit tensors.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

from memderive.symbolic.lazy import lazy

# torchao, for the Float8 plan's ranks only (the 16-bit plan's ranks do not import it)
float8 = lazy("torchao.float8")
float8_ops = lazy("torchao.float8.float8_ops")
float8_tp = lazy("torchao.float8.float8_tensor_parallel")
float8_tensor = lazy("torchao.float8.float8_training_tensor")

B, S, H, HEADS, FFN = 2, 64, 128, 4, 320


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(H, H, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = (y.view(b, s, -1, H // HEADS).transpose(1, 2) for y in (self.wq(x), self.wk(x), self.wv(x)))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).contiguous().view(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(H, FFN, bias=False), nn.Linear(FFN, H, bias=False), nn.Linear(
            H, FFN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm, self.attention = nn.RMSNorm(H), Attention()
        self.ffn_norm, self.feed_forward = nn.RMSNorm(H), FeedForward()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


#: The 8-bit all-gathers rank 0 ran, by the gathered tensor's role (torchao's GemmInputRole).
GATHERED: list[str] = []


def _gloo_float8() -> None:
    """torchao's all-gather of a Float8 tensor, its 8-bit data moved as uint8 (gloo has no float8 dtype)."""
    def wrap(data: torch.Tensor, x: float8_tensor.Float8TrainingTensor) -> float8_tensor.Float8TrainingTensor:
        return float8_tensor.Float8TrainingTensor(data, x._scale, x._orig_dtype, x._linear_mm_config, x._gemm_input_role)

    def gather(aten_op, args, kwargs=None):  # noqa: ANN001, ANN202 (torchao's table signature)
        GATHERED.append(args[0]._gemm_input_role.name)
        return wrap(aten_op(args[0]._data.contiguous().view(torch.uint8), *args[1:], **(kwargs or {})), args[0])

    def wait(aten_op, args, kwargs=None):  # noqa: ANN001, ANN202
        x = args[0]
        fp8 = torch.float8_e5m2 if x._gemm_input_role == float8_tensor.GemmInputRole.GRAD_OUTPUT else torch.float8_e4m3fn
        out = aten_op(x._data, *args[1:], **(kwargs or {}))
        return wrap(out.view(fp8) if out.dtype == torch.uint8 else out, x)

    for op, fn in list(float8_ops.FLOAT8_OPS_TABLE.items()):
        if fn is float8_ops.allgather_fp8:
            float8_ops.FLOAT8_OPS_TABLE[op] = gather
        elif fn is float8_ops.wait_tensor_fp8:
            float8_ops.FLOAT8_OPS_TABLE[op] = wait


def _storage(t: torch.Tensor) -> tuple[int, str, int]:
    """(storage key, dtype and shape, bytes) of a saved tensor's local data."""
    if isinstance(t, DTensor):
        t = t.to_local()
    if hasattr(t, "_data") and hasattr(t, "_scale"):  # a Float8 tensor: its 8-bit data
        return t._data.data_ptr(), f"fp8{tuple(t._data.shape)}", t._data.numel()
    return t.data_ptr() or id(t), f"{str(t.dtype)[6:]}{tuple(t.shape)}", t.numel() * t.element_size()


def _run(rank: int, mode: str, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    block = Block().to(torch.bfloat16)
    col, row, prepare = ColwiseParallel, RowwiseParallel, PrepareModuleInput
    if mode == "float8":
        _gloo_float8()
        float8.convert_to_float8_training(block, config=float8.Float8LinearConfig(emulate=True))
        col, row, prepare = (float8_tp.Float8ColwiseParallel, float8_tp.Float8RowwiseParallel,
                             float8_tp.PrepareFloat8ModuleInput)
    parallelize_module(block, mesh, {
        "attention_norm": SequenceParallel(),
        "attention": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "attention.wq": col(), "attention.wk": col(), "attention.wv": col(),
        "attention.wo": row(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": prepare(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": col(), "feed_forward.w2": row(output_layouts=Shard(1)), "feed_forward.w3": col()})
    x = torch.randn(B, S // 2, H, dtype=torch.bfloat16, requires_grad=True)  # this rank's sequence shard
    saved: dict[int, tuple[str, int]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dtype.is_floating_point or hasattr(t, "_data"):
            key, what, nbytes = _storage(t)
            saved.setdefault(key, (what, nbytes))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = block(x)
    (y.to_local() if isinstance(y, DTensor) else y).float().sum().backward()
    if rank == 0:
        print(f"{mode}: {sum(n for _, n in saved.values()):,} B saved on rank 0"
              + (f"; 8-bit all-gathers: {', '.join(GATHERED)}" if GATHERED else ""))
        for what, nbytes in sorted(saved.values(), key=lambda v: (-v[1], v[0])):
            print(f"  {what:24s} {nbytes:8,d}")
    dist.destroy_process_group()


if __name__ == "__main__":
    for mode, port in (("bf16", "29533"), ("float8", "29534")):
        mp.spawn(_run, args=(mode, port), nprocs=2)
    sys.exit(0)
