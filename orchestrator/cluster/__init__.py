"""Backends that run jobs (local processes, Slurm's REST API), job specs and their recovery.

It acts on the run state machine that experiments owns (and hears about cancels through its
signals), so it imports experiments and never the other way round.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, experiments, launchers, trainer
"""
