"""What pulls several apps together for the browser and the JSON API: the run and experiment pages,
the runs table and its query language (selectors.py, runquery.py, run_columns.py), the
experiment form, the JSON API of experiments, runs and projects, and the OpenAPI document.

The top layer: nothing imports it (the project's urls.py includes its urls). Its views stay thin
and call the services and selectors of the apps below.

Import contract (kept by tests/unit/test_import_layers.py):
May import: accounts, alerts, cluster, experiments, launchers, lib, metrics, samples, studies, workspace, trainer
"""
