"""Metric points: the one write path (pipeline.py over store.py), series reads, charts and the
registry (ingest_hooks.py) through which alerts hear about new points without metrics importing them.

It sits on experiments (runs) and is beside cluster. The chart views read the saved views of
workspace, which itself reads metrics' schemas: that upward read is named below.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, trainer
Upward: views, templatetags.metrics_tags -> workspace
"""
