"""Quantities derived from a graph: model states (weights, gradients, optimizer states), inference
memory (weights as served, KV cache, transient buffers)."""

__all__: list[str] = []
