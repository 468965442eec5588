"""Alert rules over a run's metrics, checked as points arrive (registered with metrics'
ingest_hooks), and their notifications.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, metrics, trainer
"""
