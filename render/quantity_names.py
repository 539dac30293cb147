"""Quantity names on the command line (``memderive derive NAME``) and the estimate keys they name.

>>> QUANTITIES["activations"]
('train', 'activation_bytes_per_layer')
"""

__all__ = ["QUANTITIES", "GROUPS"]

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
    "flops": ("train", "model_flops"),
    "flops-forward": ("train", "forward_flops"),
    "flops-hardware": ("train", "hardware_flops"),
    "flops-per-token": ("train", "model_flops_per_token"),
    "flops-per-gpu": ("train", "hardware_flops_per_gpu"),
    "prefill-flops": ("infer", "prefill_flops"),
    "decode-flops": ("infer", "decode_flops_per_token"),
}
#: names that print several quantities in text (``derive flops``: forward, model and hardware FLOPs)
GROUPS = {"flops": ("forward_flops", "model_flops", "hardware_flops")}
