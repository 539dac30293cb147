"""Measure the allocated memory of one whole training step of a small transformers model on CPU.

``measure_step`` builds a small ``*ForCausalLM`` from its config class (random weights, no downloads),
runs one warm-up step (optimizer states made), then one measured step: forward with the loss,
``loss.backward()``, the optimizer update and ``zero_grad(set_to_none=True)``.

What is counted: the bytes of every tensor storage alive, exactly. Before the step that is the
parameters, buffers, optimizer states (with their step counts), a master copy when there is one, and
the batch (``input_ids`` and ``labels``). During the step a ``TorchDispatchMode`` sees every ATen call
(forward and backward: the autograd engine runs backward on the calling thread for CPU tensors) and
adds each new storage an output has; a weak reference to the storage (PyTorch keeps a storage's
Python object alive with the storage) subtracts it when it dies. Views add nothing; in-place calls
make no storage. This is what ``torch.cuda.memory_allocated`` counts on a GPU, less the CUDA caching
allocator's rounding of each block to 512 bytes, and less memory kernels take outside ATen (CPU
oneDNN scratch pads, which ``torch.profiler``'s memory events also show, and the 8-byte CPU tensors
that wrap Python scalars: neither is on a GPU).

The recipes are written out as the frameworks run them:

* ``master``: 16-bit model; AdamW over fp32 master copies; before the update each 16-bit gradient is
  copied to an fp32 one and freed (Megatron-LM ``Float16OptimizerWithFloat16Params
  ._copy_model_grads_to_main_grads``), after it the masters are copied into the model;
* ``pure``: 16-bit model and AdamW over it (16-bit states), torchtune's default (``dtype: bf16``);
* ``autocast``: fp32 model, the forward under ``torch.autocast("cpu", torch.bfloat16)``, fp32 AdamW;
* ``in_backward``: one optimizer per parameter stepped from its post-accumulate-grad hook, as
  torchtune's ``register_optim_in_bwd_hooks``;
* ``loss_chunks``: the output layer and the cross-entropy applied per chunk of the sequence, as
  torchtune's ``CEWithChunkedOutputLoss`` with ``num_output_chunks`` (labels shifted as its recipes do).
* ``fp8``: the model's linears converted by torchao (``hf_saved.to_float8``); its ``Float8TrainingTensor``
  is a wrapper subclass, so the tracker runs its dispatch under the mode again (the ATen calls inside
  ``_scaled_mm``'s preprocessing are counted) and counts a wrapper by its inner 8-bit data and fp32 scale.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
import transformers
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.hf_saved import FAMILIES, Shape, to_float8

__all__ = ["StepRecipe", "Measured", "measure_step", "config_for_step"]


@dataclass(frozen=True)
class StepRecipe:
    precision: str = "master"  # master | pure | autocast
    update: str = "foreach"  # foreach | fused | for-loop (torch.optim.AdamW's foreach=True, fused=True, foreach=False)
    in_backward: bool = False
    loss_chunks: int = 1
    fp8: str = "none"  # none | a torchao Float8LinearRecipeName (tensorwise, rowwise, rowwise_with_gw_hp)
    recompute: bool = False  # transformers' activation checkpointing: each decoder layer, non-reentrant


@dataclass
class Measured:
    """Bytes alive before the step (``baseline``), at its high-water mark (``peak``) and the moments."""

    baseline: int
    peak: int
    peak_at: str
    end: int
    moments: list[tuple[str, str, int, int]] = field(default_factory=list)  # (where, op, change, bytes)


class _Tracker(TorchDispatchMode):
    """Adds each new storage an ATen call makes, subtracts it when it dies (see the module docstring)."""

    def __init__(self, known: list[torch.Tensor], base: int) -> None:
        super().__init__()
        self.seen = {t.untyped_storage().data_ptr() for t in known}
        self.refs: dict[int, weakref.ref] = {}
        self.now = self.peak = base
        self.peak_at, self.label = "", ["forward"]
        self.moments: list[tuple[str, str, int, int]] = []

    def _track(self, t: torch.Tensor, func: str) -> None:
        st = t.untyped_storage()
        ptr, size = st.data_ptr(), st.nbytes()
        if ptr in self.seen or size == 0:
            return
        self.seen.add(ptr)
        self._change(func, size)

        def gone(_ref: object, ptr: int = ptr, size: int = size, func: str = func) -> None:
            self.seen.discard(ptr)
            self.refs.pop(ptr, None)
            self._change("free " + func, -size)

        self.refs[ptr] = weakref.ref(st, gone)

    def _change(self, func: str, size: int) -> None:
        self.now += size
        node = torch._C._current_autograd_node()
        where = self.label[-1] if node is None else f"backward {node.name()}"
        self.moments.append((where, func, size, self.now))
        if self.now > self.peak:
            self.peak, self.peak_at = self.now, f"{where}: {func}"

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        wrapper = next((t for t in types if t is not torch.Tensor and hasattr(t, "__tensor_flatten__")), None)
        if wrapper is not None:  # a wrapper subclass (torchao's Float8TrainingTensor): its own dispatch
            with self:  # runs under this mode again, so the ATen calls it makes are counted too
                out = wrapper.__torch_dispatch__(func, types, args, kwargs or {})
        else:
            out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                for inner in _storages_of(t):
                    self._track(inner, func.__name__)
        return out


def _storages_of(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding ``t``'s storage: ``t`` itself, or a wrapper subclass's inner tensors
    (``__tensor_flatten__``: a ``Float8TrainingTensor``'s 8-bit ``_data`` and fp32 ``_scale``)."""
    if type(t) is torch.Tensor or not hasattr(t, "__tensor_flatten__"):
        return [t]
    names, _ = t.__tensor_flatten__()
    return [x for name in names for x in _storages_of(getattr(t, name))]


def config_for_step(family: str, attention: str) -> transformers.PretrainedConfig:
    """A family's small config (``hf_saved.FAMILIES``) without dropout (``--no-dropout``)."""
    cls_name, kwargs = FAMILIES[family]
    extra = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0) if cls_name == "GPT2Config" else {}
    config = getattr(transformers, cls_name)(**kwargs, **extra)
    config._attn_implementation = attention
    return config


def _chunked_loss(model: torch.nn.Module, ids: torch.Tensor, labels: torch.Tensor, chunks: int) -> torch.Tensor:
    """torchtune: ``TransformerDecoder`` with ``num_output_chunks`` (the output projection per chunk of
    the sequence) and ``CEWithChunkedOutputLoss.forward`` (``cross_entropy(logits.float(), labels,
    reduction="sum")`` per chunk, summed, divided by the number of labelled tokens)."""
    hidden = model.base_model(input_ids=ids).last_hidden_state
    logits = [model.lm_head(chunk) for chunk in hidden.chunk(chunks, dim=1)]
    total_elements = (labels != -100).sum()
    labels_chunks = [target.reshape(-1) for target in labels.chunk(chunks, dim=1)]
    logits = [chunk.reshape(-1, chunk.size(-1)) for chunk in logits]
    total_loss = 0.0
    for logits_chunk, labels_chunk in zip(logits, labels_chunks):
        total_loss += F.cross_entropy(logits_chunk.float(), labels_chunk, ignore_index=-100, reduction="sum")
    return total_loss / total_elements


class _Step:
    """One training step of a recipe, callable repeatedly (the first call makes the optimizer states)."""

    def __init__(self, model: torch.nn.Module, recipe: StepRecipe, ids: torch.Tensor, labels: torch.Tensor):
        self.model, self.recipe, self.ids, self.labels = model, recipe, ids, labels
        params = list(model.parameters())
        self.masters = [p.detach().float().requires_grad_() for p in params] if recipe.precision == "master" else []
        targets = self.masters or params
        kind = {"foreach": dict(foreach=True), "fused": dict(fused=True), "for-loop": dict(foreach=False)}[recipe.update]
        if recipe.in_backward:
            self.optimizers = {p: torch.optim.AdamW([t], lr=1e-3, **kind) for p, t in zip(params, targets)}
            for p, t in zip(params, targets):
                p.register_post_accumulate_grad_hook(lambda p, t=t: self._update_one(p, t))
        else:
            self.optimizers = {None: torch.optim.AdamW(targets, lr=1e-3, **kind)}

    def _update_one(self, p: torch.Tensor, master: torch.Tensor) -> None:
        if self.masters:
            master.grad, p.grad = p.grad.float(), None
        opt = self.optimizers[p]
        opt.step()
        opt.zero_grad(set_to_none=True)
        p.grad = None
        if self.masters:
            p.data.copy_(master.data)

    def loss(self) -> torch.Tensor:
        if self.recipe.loss_chunks > 1:
            return _chunked_loss(self.model, self.ids, self.labels, self.recipe.loss_chunks)
        if self.recipe.precision == "autocast":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.model(input_ids=self.ids, labels=self.labels).loss
        return self.model(input_ids=self.ids, labels=self.labels).loss

    def __call__(self, tracker: _Tracker | None = None) -> None:
        loss = self.loss()
        if tracker is not None:
            tracker.label.append("backward")
        loss.backward()
        if tracker is not None:
            tracker.label[-1] = "optimizer"
        if not self.recipe.in_backward:
            self._update()
        del loss

    def _update(self) -> None:
        params = list(self.model.parameters())
        for p, m in zip(params, self.masters):  # Megatron-LM: main_param.grad = model_param.grad.float()
            m.grad, p.grad = p.grad.float(), None
        opt = self.optimizers[None]
        opt.step()
        for p, m in zip(params, self.masters):
            p.data.copy_(m.data)
        opt.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)

    def held(self) -> list[torch.Tensor]:
        states = [v for opt in self.optimizers.values() for st in opt.state.values() for v in st.values()
                  if isinstance(v, torch.Tensor)]
        return [*self.model.parameters(), *self.model.buffers(), *self.masters, *states, self.ids, self.labels]


def measure_step(family: str, attention: str, shape: Shape, recipe: StepRecipe = StepRecipe(),
                 seed: int = 0) -> Measured:
    """The allocated bytes of one steady-state training step (see the module docstring)."""
    torch.manual_seed(seed)
    config = config_for_step(family, attention)
    model = transformers.AutoModelForCausalLM.from_config(config)
    if recipe.fp8 != "none":
        model = to_float8(model, recipe.fp8)
    model = (model if recipe.precision == "autocast" else model.to(torch.bfloat16)).train()
    if recipe.recompute:
        model.activation_checkpointing_enable()  # torch.utils.checkpoint, use_reentrant=False
    ids = torch.randint(0, config.vocab_size, (shape.b, shape.s))
    labels = ids.clone()
    if recipe.loss_chunks > 1:  # torchtune's recipes shift the labels before the loss
        labels = torch.hstack((labels[..., 1:], torch.full((shape.b, 1), -100)))
    step = _Step(model, recipe, ids, labels)
    step()
    held = step.held()
    base = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in held}.values())
    tracker = _Tracker(held, base)
    with tracker:
        step(tracker)
    return Measured(base, tracker.peak, tracker.peak_at, tracker.now, tracker.moments)


if __name__ == "__main__":  # python -m tests.hf_step llama-gqa eager 2 16 [precision] [update]: the moments
    import sys

    family, attention, b, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    recipe = StepRecipe(*sys.argv[5:6], *sys.argv[6:7])
    m = measure_step(family, attention, Shape(b, s), recipe)
    for where, func, change, now in m.moments:
        print(f"{now:>10} {change:>+9} {where:30} {func}")
    print("baseline", m.baseline, "peak", m.peak, "at", m.peak_at, "end", m.end)
