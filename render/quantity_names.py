"""Quantity names on the command line (``memderive derive NAME``) and the estimate keys they name.

>>> QUANTITIES["activations"]
('train', 'activation_bytes_per_layer')
"""

__all__ = ["QUANTITIES"]

#: quantity name on the command line -> (mode it needs, quantity key)
QUANTITIES = {
    "params": ("params", "parameters"),
    "params-per-layer": ("params", "parameters_per_layer"),
    "activations": ("train", "activation_bytes_per_layer"),
    "activations-total": ("train", "activation_bytes"),
    "model-states": ("train", "model_state_bytes"),
    "train-total": ("train", "total_bytes"),
    "kv-cache": ("infer", "kv_cache_bytes"),
    "weights": ("infer", "weight_bytes"),
    "infer-total": ("infer", "total_bytes"),
}
