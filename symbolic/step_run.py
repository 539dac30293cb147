"""The simulated step: storages with reference counts, the forward, backward and update of PyTorch.

``Run`` executes the calls of ``symbolic.program.flatten`` as PyTorch runs a step (see
``symbolic.timeline`` for the rules) and records every allocation and free as a ``Moment``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.graph import Graph
from memderive.symbolic.kernels import KINDS, VIEW
from memderive.symbolic.program import BASELINE_ROLES, Call, flatten, releases
from memderive.symbolic.tensor import Tensor

__all__ = ["StepRecipe", "Moment", "Run", "Stop", "UPDATES"]

UPDATES = ("foreach", "fused", "for-loop")
FP32 = dtype("fp32")


@dataclass(frozen=True, slots=True)
class StepRecipe:
    """How a step holds its model states, and how its optimizer updates them.

    ``weight``: dtype of the weights the model computes with (their gradients too); ``master``: dtype
    of a master copy the optimizer updates (None: none; its gradients are ``weight`` gradients cast
    up before the update, one parameter at a time, each 16-bit gradient freed once copied, as
    Megatron-LM's ``_copy_model_grads_to_main_grads``); ``states``: the optimizer's state tensors per
    parameter (AdamW: two); ``step_scalars``: a 4-byte step count per parameter on the device (fused
    AdamW, or any AdamW on CPU); ``update``: foreach (``temporaries`` state-sized tensors per
    parameter, all at once: ``_foreach_sqrt`` in ``_multi_tensor_adam``), fused (none) or for-loop
    (``_single_tensor_adam``: a parameter's square root and quotient at once, the quotient held until the next
    parameter's is made); ``in_backward``: the update runs from each
    parameter's post-accumulate-grad hook; ``granularity``: allocation rounding (CUDA: 512 B);
    ``state_shards``: ZeRO-1's d ranks, each holding and updating 1/d of the master copy and states;
    ``recompute``: every decoder layer checkpointed as transformers' activation checkpointing runs it
    (``torch.utils.checkpoint``, ``use_reentrant=False``, early stop): its forward saves nothing but keeps its
    input and what it reads from outside; backward recomputes it at the first node that unpacks a saved
    tensor, up to the last tensor it saves.
    """

    weight: DType = dtype("bf16")
    master: DType | None = FP32
    states: tuple[DType, ...] = (FP32, FP32)
    step_scalars: bool = False
    update: str = "foreach"
    temporaries: int = 1
    in_backward: bool = False
    granularity: int = 1
    state_shards: int = 1  # ZeRO-1: the master copy, the states and the update over d ranks
    recompute: bool = False  # each decoder layer checkpointed (torch.utils.checkpoint, non-reentrant)

    def __post_init__(self) -> None:
        if self.update not in UPDATES:
            raise ValueError(f"update must be one of {', '.join(UPDATES)}, not {self.update!r}")
        if self.granularity < 1:
            raise ValueError("granularity must be a positive number of bytes")


@dataclass(frozen=True, slots=True)
class Moment:
    """One allocation (``change`` > 0) or free (< 0) and the bytes allocated after it."""

    phase: str
    where: str
    bytes: int
    change: int
    tensor: str


class Stop(Exception):
    """Raised to halt a replay at the peak, to read what is alive there."""


@dataclass(slots=True)
class _Storage:
    nbytes: int
    refs: int
    tensor: Tensor
    where: str
    phase: str


@dataclass(slots=True)
class _Frame:
    """A checkpointed layer: its calls' indices, the refs its frame holds (its input, what it reads from
    outside), whether backward has recomputed it, and the index of its first call that saves anything."""

    calls: list[int]
    refs: list[int]
    recomputed: bool = False
    first_saving: int = -1


class Run:
    """One simulated step; ``stop`` halts it after that many moments (to read the live set)."""

    def __init__(self, graph: Graph, values: Mapping[Any, int], recipe: StepRecipe, stop: int | None = None):
        self.graph, self.values, self.recipe, self.stop = graph, values, recipe, stop
        self.sizes: dict[Tensor, int] = {}
        self.store: dict[int, _Storage] = {}
        self.sid: dict[tuple, int] = {}
        self.tensor: dict[tuple, Tensor] = {}
        self.requires: dict[tuple, bool] = {}
        self.grads: dict[tuple, int] = {}
        self.param_grads: dict[tuple, int] = {}
        self.pending: dict[tuple, int] = {}
        self.params: dict[tuple, tuple[Tensor, bool]] = {}
        self.batch: dict[tuple, Tensor] = {}
        self.moments: list[Moment] = []
        self.counter, self.now, self.baseline = 0, 0, 0
        self.phase, self.where = "forward", "before the step"
        self.frames: dict[str, _Frame] = {}  # checkpointed layers by scope

    # --- storages ----------------------------------------------------------------------------
    def nbytes(self, t: Tensor) -> int:
        size = self.sizes.get(t)
        if size is None:
            exact = t.nbytes.evaluate(self.values)
            whole = -(-exact // 1)  # an int4 tensor of odd length takes a whole last byte
            g = self.recipe.granularity
            size = self.sizes[t] = -(-int(whole) // g) * g
        return size

    def alloc(self, key: tuple, t: Tensor, record: bool = True) -> int:
        if record:
            self._halt()
        self.counter += 1
        sid, size = self.counter, self.nbytes(t)
        self.store[sid] = _Storage(size, 1, t, self.where, self.phase)
        self.sid[key], self.tensor[key] = sid, t
        self.now += size
        if record and size:
            self._moment(size, t.name)
        return sid

    def ref(self, sid: int) -> int:
        self.store[sid].refs += 1
        return sid

    def unref(self, sid: int) -> None:
        entry = self.store[sid]
        if entry.refs == 1 and entry.nbytes:
            self._halt()
        entry.refs -= 1
        if entry.refs == 0:
            del self.store[sid]
            self.now -= entry.nbytes
            if entry.nbytes:
                self._moment(-entry.nbytes, entry.tensor.name)

    def _halt(self) -> None:
        """A replay stops before the first change after its ``stop``-th moment."""
        if self.stop is not None and len(self.moments) > self.stop:
            raise Stop

    def _moment(self, change: int, name: str) -> None:
        self.moments.append(Moment(self.phase, self.where, self.now, change, name))

    def category(self, sid: int) -> str:
        """What a live storage is, for the peak's breakdown: weights, master weights, optimizer states,
        gradients (of parameters), activations (made in forward), backward (activation gradients and
        temporaries), update (the optimizer's temporaries), batch and buffers."""
        entry = self.store[sid]
        role = entry.tensor.role
        if role in ("weight", "bias"):
            return "weights"
        if role == "state":
            return "master weights" if self.recipe.master and entry.tensor.name.endswith(":state0") else \
                "optimizer states"
        if role in BASELINE_ROLES:
            return "batch and buffers"
        if sid in self.param_grads.values() or sid in {self.grads.get(k) for k in self.params}:
            return "gradients"
        if entry.phase == "optimizer" or role == "temporary":
            return "update"
        return "activations" if entry.phase == "forward" else "backward"

    def like(self, key: tuple) -> Tensor:
        return self.params[key][0] if key[0] == "param" else self.tensor[key]

    def needs(self, key: tuple) -> bool:
        return self.params[key][1] if key[0] == "param" else self.requires.get(key, False)

    # --- the step ------------------------------------------------------------------------------
    def run(self) -> None:
        calls = flatten(self.graph, self.values, self.recipe.weight, self.params, self.batch)
        self._baseline(calls)
        releases_at = releases(calls)
        loss = next((c.outs[0] for c in reversed(calls) if c.op.kind == "cross_entropy"), calls[-1].outs[0])
        self.calls, self.releases_at = calls, releases_at
        self.index = {id(c): i for i, c in enumerate(calls)}
        for i, call in enumerate(calls):
            frame = self._frame_of(i, call)
            self._forward(call, save=frame is None)
            for key in releases_at.get(i, ()):
                if key != loss:  # the step's ``loss`` variable holds it to the end
                    self.unref(self.sid[key])
        self.phase = "backward"
        self._backward(calls, loss)
        self.phase, self.where = "optimizer", "optimizer step"
        if not self.recipe.in_backward:
            self._update()
        self.where = "end of step"
        self.unref(self.sid[loss])

    def _baseline(self, calls: list[Call]) -> None:
        """Weights, master copy, optimizer states, step counts, buffers and batch, before the step."""
        r = self.recipe
        for key, (w, trainable) in self.params.items():
            self.alloc(key, w, record=False)
            if not trainable:
                continue
            for j, dt in enumerate(([r.master] if r.master else []) + list(r.states)):
                state = self._shard(replace(w, name=f"{w.name}:state{j}", dtype=dt, role="state"))
                self.alloc(("state", j, key), state, False)
            if r.step_scalars:
                self.alloc(("step", key), Tensor(f"{w.name}:step", (), FP32, role="state"), False)
        for call in calls:
            for key, t in zip(call.outs, call.kernel.outputs):
                if t.role in BASELINE_ROLES and key not in self.sid:
                    self.alloc(key, t, record=False)
        for key, t in self.batch.items():
            if any(key in call.ins for call in calls):
                self.alloc(key, t, record=False)
        self.baseline = self.now
        self.moments.append(Moment("forward", "before the step", self.now, 0, ""))

    def _frame_of(self, i: int, call: Call) -> _Frame | None:
        """The checkpoint frame of a call in a decoder layer under ``recompute`` (made at the layer's first
        call: the frame keeps the layer's input, ``_NoopSaveInputs``, and what its calls read from outside
        the layer: the rotary tables, and its keyword arguments position ids and mask, held by the
        checkpointed ``partial`` until the frame goes)."""
        if not self.recipe.recompute or call.scope.rstrip("0123456789") != "layer":
            return None
        frame = self.frames.get(call.scope)
        if frame is None:  # the layer's keyword arguments, held by the checkpointed partial: position ids, mask
            frame = self.frames[call.scope] = _Frame([], [])
            frame.refs += [self.ref(self.sid[key]) for key in (("@", "@position_ids"), ("@", "@mask")) if key in self.sid]
        frame.calls.append(i)
        made = {key for j in frame.calls for key in self.calls[j].outs}
        for key in call.ins:
            if key[0] != "param" and key not in made and key in self.sid:
                frame.refs.append(self.ref(self.sid[key]))
                made.add(key)
        return frame

    def _forward(self, call: Call, save: bool = True) -> None:
        k, rule = call.kernel, KINDS[call.kernel.kind]
        self.where = call.where
        if rule.script is not None:
            self._script(call, rule.script, {})
        for key, t in zip(call.outs, k.outputs):
            if rule.script is not None:
                break
            if t.role in BASELINE_ROLES:
                continue
            if k.alias or (k.kind == "expand_clone" and self.nbytes(t) == self.nbytes(self.like(call.ins[0]))) \
                    or (k.kind == "chunk_copy" and self._contiguous_slice(self.like(call.ins[0]))) \
                    or (k.kind == "matmul_copy" and self._fresh_copy(call)):
                # repeat_kv returns its input when a_kv = a; a contiguous slice is reshaped as a view
                self.sid[key], self.tensor[key] = self.ref(self.sid[call.ins[0]]), t
            else:
                self.alloc(key, t)
        call.rg = rule.differentiable and any(self.needs(key) for key in call.ins)
        for key in call.outs:
            self.requires[key] = call.rg
        if not call.rg:
            return
        if save:
            for key in self._saved_keys(call):
                call.saved.append(self.ref(self.sid[key]))

    def _saved_names(self, call: Call) -> tuple[str, ...]:
        """What the call's node saves, parameters included."""
        k = call.kernel
        names = dict(zip(k.inputs, call.ins)) | {t.name: key for t, key in zip(k.outputs, call.outs)}
        saved = (tuple(x.name for x in call.op.saved) if k.kind == "fused"
                 else KINDS[k.kind].saves(k, lambda name: self.needs(names[name])))
        return tuple(x for x in saved if x in names)

    def _saved_keys(self, call: Call) -> list[tuple]:
        k = call.kernel
        names = dict(zip(k.inputs, call.ins)) | {t.name: key for t, key in zip(k.outputs, call.outs)}
        return list(dict.fromkeys(names[x] for x in self._saved_names(call) if names[x][0] != "param"))

    def _recompute(self, frame: _Frame) -> None:
        """The layer's forward once more, from its first call to the pack of the last tensor it saves
        (early stop: a node packs its inputs before its kernel runs, its outputs after); what Python held
        in the recomputation is freed when it stops."""
        frame.recomputed = True
        saving = [i for i in frame.calls if self.calls[i].rg and self._saved_names(self.calls[i])]
        if not saving:
            return
        frame.first_saving, last = saving[0], saving[-1]
        held: list[tuple] = []
        for i in frame.calls:
            call = self.calls[i]
            if i == last and not self._saves_output(call):  # stops at the pack of its inputs
                for key in self._saved_keys(call):
                    call.saved.append(self.ref(self.sid[key]))
                break
            self._forward(call)
            held += [key for key in call.outs if key in self.sid]
            if i == last:
                break
            for key in self.releases_at.get(i, ()):
                if key in held:
                    held.remove(key)
                    self.unref(self.sid[key])
        for key in held:  # the recomputation's locals, gone with the stop
            self.unref(self.sid[key])

    def _saves_output(self, call: Call) -> bool:
        outs = {t.name for t in call.kernel.outputs}
        return any(x in outs for x in self._saved_names(call))

    def _fresh_copy(self, call: Call) -> bool:
        """Whether ``repeat_kv`` copied the operand (a_kv < a: its output larger than its input; the kernel's
        ``note`` names both), so that matmul reads a contiguous tensor and copies nothing."""
        rep, src = call.kernel.note.split("|")
        return self.nbytes(self.tensor[(call.scope, rep)]) != self.nbytes(self.tensor[(call.scope, src)])

    def _contiguous_slice(self, t: Tensor) -> bool:
        """A slice along axis 1 is contiguous when the axes before it have size 1 (``chunk_copy``)."""
        return int(t.shape[0].evaluate(self.values)) == 1

    def _script(self, call: Call, script: Any, made: dict[str, tuple[tuple, int]]) -> None:
        """An autograd function's calls in order (``Rule.script``): temporaries made and freed, the output
        made (forward) or each input's gradient (backward, into ``made``)."""
        k = call.kernel
        names = dict(zip(k.inputs, call.ins))
        temps: dict[str, int] = {}
        for act, key, t in script(k, lambda name: self.like(names[name])):
            if act == "alloc":
                temps[key] = self.alloc(("tmp", id(call), self.phase, key), t)
            elif act == "free":
                self.unref(temps.pop(key))
            elif act == "output":
                for out, tensor in zip(call.outs, k.outputs):
                    self.alloc(out, tensor)
            else:  # "grad": key is the input's name
                made[key] = (names[key], self.alloc(("grad", call.where, t.name), t))
        if temps:
            raise ValueError(f"{k.kind}: the script leaves {', '.join(temps)} allocated")

    def _backward(self, calls: list[Call], loss: tuple) -> None:
        self.where = "loss.backward()"
        root = self.alloc(("grad", "root"), replace(self.tensor[loss], name="ones_like(loss)"))
        self.grads[loss] = self.ref(root)  # torch.autograd.backward's grad_tensors hold it to the end
        for call in calls:  # AccumulateGrad runs once every use of a parameter has delivered its gradient
            for key in dict.fromkeys(call.ins):
                if call.rg and key[0] == "param" and self.needs(key):
                    self.pending[key] = self.pending.get(key, 0) + 1
        for call in reversed(calls):
            if call.rg:
                self._node(call)
        self.where = "end of backward"
        for key in [key for key in self.grads if key[0] == "param"]:
            self._accumulate(key, self.grads.pop(key))
        self.unref(root)
        for call in calls:  # nodes backward never reached: their saved tensors go with the graph
            for sid in call.saved:
                self.unref(sid)
            call.saved.clear()
        for sid in self.grads.values():
            self.unref(sid)
        self.grads.clear()

    def _node(self, call: Call) -> None:
        got = [(key, self.grads.pop(key)) for key in call.outs if key in self.grads]
        if not got:
            return
        k = call.kernel
        self.where = call.where
        frame = self.frames.get(call.scope) if self.recipe.recompute else None
        if frame is not None and not frame.recomputed and self._saved_names(call):
            self._recompute(frame)
        names = dict(zip(k.inputs, call.ins)) | {t.name: key for t, key in zip(k.outputs, call.outs)}
        rule = KINDS[k.kind]
        made: list[tuple[tuple, int, bool]] = []
        temp_ids: list[int] = []
        if rule.backward_script is not None:  # every gradient is computed; the engine drops the unneeded
            scripted: dict[str, tuple[tuple, int]] = {}
            self._script(call, rule.backward_script, scripted)
            for key, sid in scripted.values():
                if self.needs(key):
                    made.append((key, sid, False))
                else:
                    self.unref(sid)
            grads: tuple = ()
        else:
            temps, grads = rule.backward(k, lambda name: self.like(names[name]), lambda name: self.needs(names[name]))
            temp_ids = [self.alloc(("tmp", call.where, t.name), t) for t in temps]
        incoming = got[0][1]
        for name, g in grads:
            if isinstance(g, str):  # PASS or VIEW: the incoming gradient's storage
                made.append((names[name], self.ref(incoming), g == VIEW))
            else:
                made.append((names[name], self.alloc(("grad", call.where, g.name), g), False))
        for sid in temp_ids:
            self.unref(sid)
        made = [(key, sid if view else self._validate(key, sid), view) for key, sid, view in made]
        for _, sid in got:
            self.unref(sid)
        for sid in call.saved:
            self.unref(sid)
        call.saved.clear()
        if frame is not None and frame.recomputed and self.index[id(call)] == frame.first_saving:
            for sid in frame.refs:  # the frame's last saved tensor is gone: its input and reads go too
                self.unref(sid)
            frame.refs.clear()
        order = {key: i for i, key in enumerate(call.ins)}  # the engine hands gradients on in input order
        for key, sid, view in sorted(made, key=lambda item: order[item[0]]):
            self._deliver(key, sid, view)

    def _validate(self, key: tuple, sid: int) -> int:
        """``validate_outputs``: a gradient is summed to its input's shape and cast to its dtype."""
        target, have = self.like(key), self.store[sid].tensor
        if have.numel != target.numel:
            new = self.alloc(("grad", self.where, f"sum_to({target.name})"),
                             replace(target, name=f"{have.name}:sum_to", dtype=have.dtype, role="gradient"))
            self.unref(sid)
            sid, have = new, self.store[new].tensor
        if have.dtype != target.dtype:
            new = self.alloc(("grad", self.where, f"to({target.name})"),
                             replace(target, name=f"{have.name}:to", role="gradient"))
            self.unref(sid)
            sid = new
        return sid

    def _deliver(self, key: tuple, sid: int, view: bool) -> None:
        if view and key[0] == "param":  # a view's storage is shared: the buffer holds a copy
            copy = self.alloc(("grad", self.where, f"clone({key[-1]})"),
                              replace(self.like(key), name=f"{key[-1]}.grad", role="gradient"))
            self.unref(sid)
            sid = copy
        if key in self.grads:  # a second gradient for one tensor: old + new, a new tensor
            old = self.grads[key]
            self.grads[key] = self.alloc(("grad", self.where, f"sum({key[-1]})"),
                                         replace(self.like(key), name=f"d({key[-1]}):sum", role="gradient"))
            self.unref(old)
            self.unref(sid)
        else:
            self.grads[key] = sid
        if key[0] == "param":
            self.pending[key] -= 1
            if self.pending[key] == 0:
                self._accumulate(key, self.grads.pop(key))

    def _accumulate(self, key: tuple, sid: int) -> None:
        """``AccumulateGrad``: steal a gradient nothing else holds, else copy it; add a second in place."""
        w = self.params[key][0]
        if self.store[sid].refs > 1:
            copy = self.alloc(("grad", self.where, f"clone({w.name})"), replace(w, name=f"{w.name}.grad"))
            self.unref(sid)
            sid = copy
        if key in self.param_grads:
            self.unref(sid)
        else:
            self.param_grads[key] = sid
        if self.recipe.in_backward:
            where, self.where = self.where, f"{self.where}: update of {w.name}"
            self._update_one(key)
            self.where = where

    # --- the update ------------------------------------------------------------------------------
    def _update(self) -> None:
        r = self.recipe
        keys = [key for key in self.params if key in self.param_grads]
        if r.master is not None:
            for key in keys:
                self._to_master(key)
        self._step_increment()
        if r.update == "foreach":
            temps = [self.alloc(("upd", j, key), self._temporary(key, j)) for key in keys for j in range(r.temporaries)]
            for sid in temps:
                self.unref(sid)
        elif r.update == "for-loop":  # _single_tensor_adam: denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
            previous = None
            for key in keys:
                previous = self._denominator(key, previous)
            if previous is not None:
                self.unref(previous)
        self.where = "zero_grad"
        for key in keys:
            self.unref(self.param_grads.pop(key))

    def _step_increment(self) -> None:
        """Steps on the CPU under foreach: ``torch._foreach_add_(device_state_steps, torch.tensor(1.0,
        device="cpu"), alpha=1.0)`` makes a 0-dim fp32 tensor once per ``step()``."""
        if self.recipe.update == "foreach" and self.recipe.step_scalars:
            self.unref(self.alloc(("upd", "one"), Tensor("torch.tensor(1.0)", (), FP32, role="temporary")))

    def _temporary(self, key: tuple, j: int) -> Tensor:
        w, r = self.params[key][0], self.recipe
        dt = r.master or (r.states[0] if r.states else w.dtype)
        return self._shard(replace(w, name=f"{w.name}:update{j}", dtype=dt, role="temporary"))

    def _shard(self, t: Tensor) -> Tensor:
        """One rank's 1/d of a state-like tensor under ZeRO-1 (its first axis split)."""
        if self.recipe.state_shards == 1 or not t.shape:
            return t
        return t.split(0, self.recipe.state_shards)

    def _to_master(self, key: tuple) -> None:
        """``main_param.grad = model_param.grad.float(); model_param.grad = None``."""
        w = self.params[key][0]
        new = self.alloc(("master-grad", key), self._shard(replace(w, name=f"{w.name}.grad:fp32",
                                                                   dtype=self.recipe.master)))
        self.unref(self.param_grads[key])
        self.param_grads[key] = new

    def _denominator(self, key: tuple, previous: Any) -> Any:
        """One parameter of torch's for-loop Adam: ``exp_avg_sq.sqrt()`` and the quotient ``denom`` it gives, the
        square root freed, the previous parameter's ``denom`` freed when the name is rebound; returns ``denom``."""
        if not self.recipe.temporaries:
            return previous
        root = self.alloc(("upd", 0, key), self._temporary(key, 0))
        denom = self.alloc(("upd", 1, key), self._temporary(key, 1))
        self.unref(root)
        if previous is not None:
            self.unref(previous)
        return denom

    def _temporaries(self, key: tuple) -> None:
        temps = [self.alloc(("upd", j, key), self._temporary(key, j)) for j in range(self.recipe.temporaries)]
        for sid in temps:
            self.unref(sid)

    def _update_one(self, key: tuple) -> None:
        """The update of one parameter from its post-accumulate-grad hook, then ``grad = None``."""
        r = self.recipe
        if r.master is not None:
            self._to_master(key)
        self._step_increment()
        if r.update == "for-loop":
            denom = self._denominator(key, None)
            if denom is not None:
                self.unref(denom)
        elif r.update != "fused":
            self._temporaries(key)
        self.unref(self.param_grads.pop(key))
