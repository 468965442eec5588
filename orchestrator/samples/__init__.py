"""Rollout samples (prompts, responses, rewards, token ratios) logged by runs, and their pages.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, metrics, trainer
"""
