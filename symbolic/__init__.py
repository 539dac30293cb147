"""The engine: dimension symbols, tensors, ops, graphs, derivation, simplification, strategies."""

from symbolic.derive import Breakdown, Term, activations, evaluate, parameters
from symbolic.dtypes import DType, dtype
from symbolic.errors import DerivationError, InvalidLayoutError
from symbolic.graph import Block, Graph, Op
from symbolic.tensor import Tensor

__all__ = ["Block", "Breakdown", "DType", "DerivationError", "Graph", "InvalidLayoutError", "Op", "Tensor",
           "Term", "activations", "dtype", "evaluate", "parameters"]
