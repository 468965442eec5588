"""Projects, experiments, sweeps and runs: the run state machine (run_status.py, signals.py that
announce what the cluster must do), configs, forks, checkpoints, and the experiment pages and API.

The layer above accounts: cluster and metrics build on it. Its HTTP surface (api.py,
experiment_views.py, the runs table's query and columns) composes the apps above it and says so
module by module; nothing else in it imports upward.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, lib, trainer
Upward: api, run_columns, runquery -> metrics
Upward: runquery, selectors -> alerts
Upward: api, experiment_form, experiment_views, management.commands.submit_experiment -> studies
"""
