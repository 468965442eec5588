"""Admin-defined launchers: a command with typed parameters and resources that users queue runs of,
into the same queue and quotas as the trainer's runs; the cluster turns such a run into its job.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments
"""
