from django.db import migrations


def drop_rollups(apps, schema_editor):
    """Rollup levels changed (store.LEVELS); 0005 rebuilds every run's rollups."""
    with schema_editor.connection.cursor() as cur:
        cur.execute("DELETE FROM metrics_metricrollup")


class Migration(migrations.Migration):
    dependencies = [("metrics", "0003_lean_point_indexes")]
    operations = [migrations.RunPython(drop_rollups, migrations.RunPython.noop)]
