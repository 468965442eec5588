"""What a run records beside the metrics it computes: the metric log and its pusher, system
metrics, where the time went, observed staleness and the rollout samples."""
