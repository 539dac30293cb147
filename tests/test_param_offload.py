"""``--offload-params``: torch FSDP2 with ``CPUOffloadPolicy`` run on CPU (gloo, one rank), each LLaMA layer its own
unit and the model the root, bf16 ``MixedPrecisionPolicy``: the gathered (unsharded) parameters alive at once, seen
at every module's forward and backward hooks, and the host's sharded parameters, gradients and AdamW states after a
step, equal what the estimate derives, to the byte."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import transformers
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

from memderive.derivations.estimate import estimate
from memderive.derivations.options import OptionsError
from tests.hf_saved import FAMILIES

transformers.logging.set_verbosity_error()


def _gathered(model: torch.nn.Module) -> int:
    """Bytes of the unsharded parameters FSDP holds now (a resharded one's storage is resized to 0)."""
    out = 0
    for module in model.modules():
        state = getattr(module, "_get_fsdp_state", None)
        group = state()._fsdp_param_group if state is not None else None
        for p in group.fsdp_params if group is not None else ():
            u = getattr(p, "_unsharded_param", None)
            out += 0 if u is None else u.untyped_storage().nbytes()
    return out


def _storages(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one buffer counted once)."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def _host(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Host bytes after a step: the sharded parameters, their gradients and the optimizer's states."""
    return {"parameters": _storages(p.to_local() for p in model.parameters()),
            "gradients": _storages(p.grad.to_local() for p in model.parameters()),
            "optimizer": _storages(v.to_local() for st in opt.state.values() for k, v in st.items() if k != "step")}


def _pure_run(cls: str, kwargs: dict) -> dict[str, int]:
    """--precision pure: a bf16 model under CPUOffloadPolicy, no MixedPrecisionPolicy; one step's host bytes."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs)).bfloat16()
    for layer in model.model.layers:
        fully_shard(layer, offload_policy=CPUOffloadPolicy(pin_memory=False))
    fully_shard(model, offload_policy=CPUOffloadPolicy(pin_memory=False))
    opt = torch.optim.AdamW(model.parameters())
    ids = torch.randint(0, 128, (1, 8))
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    return _host(model, opt)


def _gathered_peak(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """The most unsharded-parameter bytes alive at any module's forward or backward hook over one step."""
    peak = [0]

    def seen(*_):
        peak[0] = max(peak[0], _gathered(model))

    for module in model.modules():
        module.register_forward_pre_hook(seen)
        module.register_forward_hook(seen)
        module.register_full_backward_pre_hook(seen)
    model(input_ids=ids, labels=ids).loss.backward()
    return peak[0]


def _plain_run(cls: str, kwargs: dict) -> int:
    """FSDP2 without offload (ZeRO-3), bf16 MixedPrecisionPolicy: the gathered peak of one step."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs)).float()
    policy = dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    for layer in model.model.layers:
        fully_shard(layer, **policy)
    fully_shard(model, **policy)
    return _gathered_peak(model, torch.randint(0, 128, (1, 8)))


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/store", rank=0, world_size=1)
    try:
        cls, kwargs = FAMILIES["llama-gqa"]
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(getattr(transformers, cls)(**kwargs)).float()
        policy = dict(mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
                      offload_policy=CPUOffloadPolicy(pin_memory=False))
        for layer in model.model.layers:
            fully_shard(layer, **policy)
        fully_shard(model, **policy)
        opt = torch.optim.AdamW(model.parameters())
        peak = _gathered_peak(model, torch.randint(0, 128, (1, 8)))
        opt.step()
        local = [p.to_local() for p in model.parameters()]
        host = _host(model, opt)
        yield (peak, host, {str(t.device) for t in local}, {t.dtype for t in local}, _pure_run(cls, kwargs),
               _plain_run(cls, kwargs))
    finally:
        dist.destroy_process_group()


def _estimate():
    cls, kwargs = FAMILIES["llama-gqa"]
    return estimate(getattr(transformers, cls)(**kwargs), mode="train", batch=1, seq=8, offload_params=True,
                    implementation="hf")


def test_gathered_weights_on_the_gpu(fsdp_run) -> None:
    peak, _, devices, dtypes, *_ = fsdp_run
    e = _estimate()
    # By hand: the root (embeddings 128 x 64, lm_head 128 x 64, final norm 64: 16,448 parameters) and one layer
    # (q 4,096, k and v 2,048 each, o 4,096, gate, up, down 10,240 each, norms 128: 43,136) in bf16:
    # 2 x (16,448 + 43,136) = 119,168 B.
    assert e.number("model_state_bytes") == peak == 119_168
    assert devices == {"cpu"} and dtypes == {torch.float32}  # sharded parameters: on the host, fp32


def test_zero3_total_holds_the_gathered_root_and_one_layer(fsdp_run) -> None:
    """FSDP2 without offload gathers the same units: the root and one layer at a time, 119,168 B (by hand above),
    which ZeRO-3's total holds beside its 1/d shards (the shards' own bytes do not depend on the gathering)."""
    plain = fsdp_run[5]
    cls, kwargs = FAMILIES["llama-gqa"]
    e = estimate(getattr(transformers, cls)(**kwargs), mode="train", batch=1, seq=8, dp=2, zero=3,
                 implementation="hf")
    gathered = {path: v for path, _, v in e.quantity("total_bytes").term_values(e.values) if path.startswith("zero3/")}
    assert sum(gathered.values()) == plain == 119_168
    assert set(gathered) == {"zero3/gathered_weights/root", "zero3/gathered_weights/layer"}


def test_host_holds_parameters_gradients_and_states(fsdp_run) -> None:
    _, host, *_ = fsdp_run
    terms = {t.path: int(t.expr.evaluate(_estimate().values)) for t in _estimate().quantity("offloaded_bytes")
             .breakdown.terms}
    # 102,720 parameters: fp32 sharded parameters, fp32 gradients, AdamW's two fp32 moments.
    assert host == {"parameters": 4 * 102_720, "gradients": 4 * 102_720, "optimizer": 8 * 102_720}
    assert {k.removeprefix("offload/"): v for k, v in terms.items()} == host


def test_pure_bf16_host_holds_16_bit_parameters_gradients_and_states(fsdp_run) -> None:
    pure = fsdp_run[4]
    cls, kwargs = FAMILIES["llama-gqa"]
    e = estimate(getattr(transformers, cls)(**kwargs), mode="train", batch=1, seq=8, offload_params=True,
                 implementation="hf", precision="pure")
    terms = {t.path.removeprefix("offload/"): int(t.expr.evaluate(e.values))
             for t in e.quantity("offloaded_bytes").breakdown.terms}
    # 102,720 parameters, all bf16 (foreach_reduce casts the gradients to the parameters' dtype, AdamW's moments are
    # zeros_like them): 2 x 102,720 = 205,440 each, 4 x 102,720 = 410,880 for the two moments.
    assert pure == {"parameters": 205_440, "gradients": 205_440, "optimizer": 410_880}
    assert terms == pure


@pytest.mark.parametrize(("options", "says"), [
    (dict(zero=2, dp=2), "--zero 3 or no --zero"),
    (dict(lora_rank=8, lora_targets="q_proj"), "fine-tuning"),
    (dict(optimizer="paged-adamw"), "paged-adamw"),
])
def test_unmodelled_combinations_are_refused(options: dict, says: str) -> None:
    with pytest.raises(OptionsError, match=says):
        estimate("llama-2-7b", mode="train", batch=1, seq=8, offload_params=True, **options)
