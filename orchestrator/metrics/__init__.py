"""Metric points: the one write path (pipeline.py over store.py), series reads, charts and the
registry (ingest_hooks.py) through which alerts hear about new points without metrics importing them.

It sits on experiments (runs) and is beside cluster. The pages that show charts with the saved
views of workspace (the compare page, the chart partials' template tags) are web's.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, trainer
"""
