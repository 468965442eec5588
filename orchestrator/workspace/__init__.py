"""Saved chart views of a project (panels, grouping, smoothing, filters, chosen runs).

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, metrics
"""
