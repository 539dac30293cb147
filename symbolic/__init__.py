"""The engine: dimension symbols, tensors, ops, graphs, derivation, simplification, strategies."""

from memderive.symbolic.derive import Breakdown, Term, activations, evaluate, parameters
from memderive.symbolic.dtypes import DType, dtype
from memderive.symbolic.errors import DerivationError, InvalidLayoutError
from memderive.symbolic.graph import Block, Graph, Op
from memderive.symbolic.tensor import Tensor

__all__ = ["Block", "Breakdown", "DType", "DerivationError", "Graph", "InvalidLayoutError", "Op", "Tensor",
           "Term", "activations", "dtype", "evaluate", "parameters"]
