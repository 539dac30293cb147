"""Measure what a ``torch.compile``d transformers model saves for backward.

``measure_compiled`` builds a small ``*ForCausalLM`` (``tests/hf_step.config_for_step``: no dropout),
casts it to ``dtype``, wraps it in ``torch.compile(model, backend=...)`` and runs ``model(ids,
labels=ids)`` under ``torch.autograd.graph.saved_tensors_hooks``: AOTAutograd's compiled
``autograd.Function`` saves what the min-cut partitioner chose through ``ctx.save_for_backward``, which
the pack hook sees. Storages are counted once, parameters and buffers excluded (as
``tests/hf_saved.measure_config``). The first call compiles; the second call is measured (the cached
graphs). ``partitioned`` also records the partitioner's own choice: the forward graph's outputs past
the model's (``min_cut_rematerialization_partition`` wrapped), so a test can check the hooks saw them.

Backends: ``aot_eager_decomp_partition`` (Inductor's decompositions and partitioner, eager kernels) and
``inductor`` (C++ codegen on CPU: gcc).

``python -m tests.hf_compile`` prints, per case, the bytes each backend saves.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field

import torch
import transformers

from tests.hf_saved import Shape
from tests.hf_step import config_for_step

__all__ = ["Compiled", "measure_compiled", "BACKENDS", "FAMILIES", "SHAPES"]

BACKENDS = ("aot_eager_decomp_partition", "inductor")
FAMILIES = ("llama-gqa", "gpt2")
SHAPES = (Shape(2, 24), Shape(3, 40))


@dataclass
class Compiled:
    """Saved storages (data_ptr -> (bytes, dtype, shape)) and the partitioner's saved values (name, bytes)."""

    storages: dict[int, tuple[int, torch.dtype, tuple[int, ...]]] = field(default_factory=dict)
    ctx_saved: dict[int, int] = field(default_factory=dict)  # the compiled nodes' saved_tensors: data_ptr -> bytes
    partitioned: list[tuple[str, int, str, tuple[int, ...]]] = field(default_factory=list)
    graphs: int = 0

    @property
    def nbytes(self) -> int:
        return sum(size for size, _, _ in self.storages.values())


def _capture(result: Compiled):  # noqa: ANN202
    """Wrap the min-cut partitioner: record the forward graph's saved outputs (the last ones)."""
    import torch._functorch.partitioners as partitioners
    original = partitioners.min_cut_rematerialization_partition

    def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        fw, bw = original(*args, **kwargs)
        result.graphs += 1
        bw_inputs = {n.name for n in bw.graph.nodes if n.op == "placeholder"}
        out = next(n for n in fw.graph.nodes if n.op == "output")
        for node in out.args[0]:
            val = node.meta.get("val") if hasattr(node, "meta") else None
            if node.name in bw_inputs and isinstance(val, torch.Tensor):
                result.partitioned.append((node.name, val.numel() * val.element_size(), str(val.dtype),
                                           tuple(val.shape)))
        return fw, bw
    return partitioners, original, wrapped


@functools.cache
def measure_compiled(family: str, attention: str, shape: Shape, dtype: str = "bfloat16",
                     backend: str = "aot_eager_decomp_partition") -> Compiled:
    torch.manual_seed(0)
    torch._dynamo.reset()
    config = config_for_step(family, attention)
    model = transformers.AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype)).train()
    owned = {t.untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    result = Compiled()
    module, original, wrapped = _capture(result)
    module.min_cut_rematerialization_partition = wrapped
    try:
        compiled = torch.compile(model, backend=backend)
        ids = torch.randint(0, config.vocab_size, (shape.b, shape.s))
        compiled(input_ids=ids, labels=ids).loss.backward()  # compiles
    finally:
        module.min_cut_rematerialization_partition = original

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in owned:
            result.storages.setdefault(storage.data_ptr(), (storage.nbytes(), tensor.dtype, tuple(tensor.shape)))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = compiled(input_ids=ids, labels=ids).loss
    for node in _nodes(loss.grad_fn):  # what ctx.save_for_backward holds, read off the compiled nodes
        if "CompiledFunction" in type(node).__name__:
            for t in node.saved_tensors:
                storage = t.untyped_storage()
                if storage.data_ptr() not in owned:
                    result.ctx_saved[storage.data_ptr()] = storage.nbytes()
    loss.backward()
    return result


def _nodes(root):  # noqa: ANN001, ANN202
    seen, todo = set(), [root]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        yield node
        todo += [n for n, _ in node.next_functions]


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    families = argv or list(FAMILIES)
    for family in families:
        for attention in ("eager", "sdpa"):
            for dtype in ("bfloat16", "float32"):
                for shape in SHAPES:
                    got = [measure_compiled(family, attention, shape, dtype, backend) for backend in BACKENDS]
                    parts = "  ".join(f"{b_}={g.nbytes}" for b_, g in zip(BACKENDS, got))
                    print(f"{family}-{attention}-{dtype}-b{shape.b}s{shape.s}  {parts}  graphs={got[0].graphs}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
