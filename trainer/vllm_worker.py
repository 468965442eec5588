"""vLLM worker extension: load new weights in place inside each vLLM worker.

vLLM's documented RLHF pattern: the engine is created with `worker_extension_cls` naming this
class, whose methods are then mixed into every worker and called through
`LLM.collective_rpc(method, args=...)`. The weights go straight into the running model with the
model's own `load_weights` (which handles fused/renamed parameters); nothing is reloaded from disk.
This module imports nothing from vLLM, so it is importable everywhere.
"""


class WeightLoaderExtension:
    def opl_load_weights(self, named_tensors):
        """Copy (name, tensor) pairs from the trainer's state dict into the served model."""
        device = next(self.model_runner.model.parameters()).device
        self.model_runner.model.load_weights(weights=((name, t.to(device)) for name, t in named_tensors))
        return True
