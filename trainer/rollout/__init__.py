"""Rollouts: the batch, generation with the hf and vllm engines (stale_k, async, partial), rewards
and demonstrations."""
