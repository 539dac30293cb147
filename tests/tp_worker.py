"""One rank of a real tensor-parallel load (run by ``python -m torch.distributed.run``, gloo on CPU): transformers'
``from_pretrained(path, tp_plan="auto")`` shards the checkpoint at ``path`` by the model's own tp_plan; prints this
rank's parameter elements (a DTensor's local shard) as JSON."""

import json
import sys

import torch
import torch.distributed as dist
import transformers

if __name__ == "__main__":
    path, vision = sys.argv[1], sys.argv[2] == "vision"
    dist.init_process_group("gloo")
    transformers.logging.set_verbosity_error()
    cls = transformers.AutoModelForImageTextToText if vision else transformers.AutoModelForCausalLM
    model = cls.from_pretrained(path, tp_plan="auto", dtype=torch.bfloat16)
    local = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in model.parameters())
    print(json.dumps({"rank": dist.get_rank(), "params": local}))
    dist.destroy_process_group()
