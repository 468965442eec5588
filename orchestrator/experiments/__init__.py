"""Projects, experiments, sweeps and runs: the run state machine (run_status.py, signals.py that
announce what the cluster must do), configs, forks, checkpoints, the queue and its limits, the
project pages and the logging SDK's API.

The layer above accounts: cluster and metrics build on it, and it imports none of the apps above
it; what reads runs together with their points, alerts or studies lives in web.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, trainer
"""
