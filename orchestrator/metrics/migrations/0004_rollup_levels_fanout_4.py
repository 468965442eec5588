from django.db import migrations


def rebuild_rollups(apps, schema_editor):
    """Rollup levels changed (store.LEVELS): rebuild every run's rollups from its points."""
    if schema_editor.connection.vendor != "postgresql":
        return
    from orchestrator.metrics import store

    with schema_editor.connection.cursor() as cur:
        cur.execute("DELETE FROM metrics_metricrollup")
        cur.execute("SELECT DISTINCT run_id FROM metrics_metricseries")
        run_ids = [row[0] for row in cur.fetchall()]
    for run_id in run_ids:
        store.rebuild_rollups(run_id)


class Migration(migrations.Migration):
    dependencies = [("metrics", "0003_lean_point_indexes")]
    operations = [migrations.RunPython(rebuild_rollups, migrations.RunPython.noop)]
