"""OffPolicy Lab's bundled trainer: stale-k and asynchronous off-policy RL (M2PO and baselines).

Run `python -m trainer run --config FILE.yaml --run-dir DIR [--resume]`. This package never
imports the dashboard; a run is a RunConfig in, metrics and checkpoints out.
"""
