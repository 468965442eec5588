"""vLLM worker extension: replace the served weights in place, inside each vLLM worker.

The engine is created with `worker_extension_cls` naming this class; vLLM mixes its methods into
every worker, and the trainer calls them through `LLM.collective_rpc(method, args=...)`.

Why a file path and not tensors: with vLLM's default multiprocessing engine an RPC's arguments are
decoded without type information, so a tensor arrives as a plain list (`['float32', [299, 128], 1]`).
The trainer therefore writes the state dict as one safetensors file (in /dev/shm where there is one)
and sends only its path; each worker reads it back as real tensors.

Why `reload_weights` and not `model.load_weights`: vLLM's CPU backend repacks linear weights after
loading and replaces the original parameters, so the model's own `load_weights` fails there.
`Worker.reload_weights(weights_iterator=..., is_checkpoint_format=True)` is vLLM's in-place reload
(restore the loading layout, load, re-run the post-load processing) in both the CPU build (0.32)
and the GPU worker (0.33). This module imports nothing from vLLM, so it is importable everywhere.
"""


class WeightLoaderExtension:
    def opl_reload_weights(self, path: str) -> int:
        """Load every tensor of the safetensors file at `path`; returns how many were loaded."""
        from safetensors.torch import load_file

        weights = load_file(path)
        self.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
        return len(weights)
