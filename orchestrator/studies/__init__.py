"""Staleness studies: seed statistics over a sweep's runs and verdicts on the paper's claims.

Plain functions over numbers (no models, no requests), so the experiment page, the API and the
exports all show the same figures. See statistics.py and claims.py.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, metrics, trainer
"""
