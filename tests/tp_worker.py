"""One rank of a real tensor-parallel run (``python -m torch.distributed.run``, gloo on CPU): transformers'
``from_pretrained(path, tp_plan="auto")`` shards the checkpoint at ``path`` by the model's own tp_plan; prints this
rank's parameter elements (its DTensors' local shards) and, given ``bxs``, the bytes autograd holds for backward at
the end of a bf16 eager training forward of b x s random tokens (each storage once, the rank's parameters and
buffers excluded: as ``tests/hf_saved.py`` counts an unsharded model), given ``cache:bxs`` the bytes of the keys and
values its ``DynamicCache`` holds after a prefill of s tokens and one decode step, as JSON."""

import json
import sys
import weakref

import torch
import torch.distributed as dist
import transformers
from torch.distributed.tensor import DTensor


class _Held:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _saved(model: torch.nn.Module, b: int, s: int) -> int:
    owned = {_local(t).untyped_storage().data_ptr() for t in (*model.parameters(), *model.buffers())}
    held: list[weakref.ref] = []

    def pack(t: torch.Tensor) -> _Held:
        box = _Held(t)
        held.append(weakref.ref(box))
        return box

    torch.manual_seed(0)
    ids = torch.randint(0, model.config.get_text_config().vocab_size, (b, s))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda box: box.tensor):
        loss = model(input_ids=ids, labels=ids).loss
    seen: dict[int, int] = {}
    for ref in held:
        box = ref()
        if box is not None:
            storage = _local(box.tensor).untyped_storage()
            if storage.data_ptr() not in owned:
                seen.setdefault(storage.data_ptr(), storage.nbytes())
    loss.backward()  # the graph is a real one
    return sum(seen.values())


def _cache(model: torch.nn.Module, b: int, s: int) -> int:
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.get_text_config().vocab_size, (b, s))
    model.eval()
    with torch.no_grad():
        cache = model(input_ids=ids, use_cache=True).past_key_values
        cache = model(input_ids=ids[:, -1:], past_key_values=cache, use_cache=True).past_key_values
    model.train()
    return sum(_local(layer.keys).untyped_storage().nbytes() + _local(layer.values).untyped_storage().nbytes()
               for layer in cache.layers)


if __name__ == "__main__":
    path, vision = sys.argv[1], sys.argv[2] == "vision"
    dist.init_process_group("gloo")
    transformers.logging.set_verbosity_error()
    cls = transformers.AutoModelForImageTextToText if vision else transformers.AutoModelForCausalLM
    model = cls.from_pretrained(path, tp_plan="auto", dtype=torch.bfloat16, attn_implementation="eager").train()
    out = {"rank": dist.get_rank(), "params": sum(_local(p).numel() for p in model.parameters())}
    for shape in sys.argv[3:]:
        b, s = map(int, shape.removeprefix("cache:").split("x"))
        out[shape] = _cache(model, b, s) if shape.startswith("cache:") else _saved(model, b, s)
    print(json.dumps(out), flush=True)
    dist.barrier()  # neither rank tears gloo down while the other is still in a collective (an abort at exit)
    dist.destroy_process_group()
