"""What an estimate adds on a named GPU (``--gpu``), as ``estimate --json`` reports it: the time model's keys
(``timing``), the runtime's allocated, reserved and device bytes (``runtime``) and vLLM's start-up
(``serving``). ``Estimate.to_json`` and the text and Markdown reports import this module only with a GPU named: a
plain estimate skips the three (their imports are about a sixth of a cold ``estimate``'s time)."""

from __future__ import annotations

from typing import Any

from memderive.derivations.quantities.runtime import runtime, runtime_json
from memderive.derivations.quantities.serving import vllm_json, vllm_refusal, vllm_startup
from memderive.derivations.quantities.timing import time_json, time_of

__all__ = ["gpu_json", "time_of", "time_json", "runtime", "vllm_refusal", "vllm_startup"]


def gpu_json(est: Any) -> dict[str, Any]:
    """The keys of ``est`` (an ``Estimate`` with a ``--gpu``) on its GPU, in the order ``estimate --json`` prints."""
    out: dict[str, Any] = {}
    out.update(time_json(est))  # step_time_s, tokens_per_s, mfu / prefill and decode times
    out.update(runtime_json(est))  # allocated, reserved and device bytes on the --gpu, with their terms
    out.update(vllm_json(est))  # vLLM's KV blocks and concurrency (with --framework vllm)
    return out
