"""The learning rule: the policy objectives (M2PO, its Algorithm 1 reference, baselines, corrections),
advantages, the marks other corrections would make, and the per-update off-policy diagnostics."""
