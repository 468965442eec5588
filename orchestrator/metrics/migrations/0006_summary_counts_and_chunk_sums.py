"""Run summaries: a point count per series (and the widest chunk span, which bounds overlap
checks) and, per chunk, the sum and count of its finite values
(a summary's tail mean adds whole chunks without unpacking them). Fills both for stored data, then
rebuilds every run's summaries and rollups from its chunks (moved here from 0005, whose tables
lack these columns)."""
import numpy as np
from django.db import migrations, models


def fill(apps, schema_editor):
    Chunk = apps.get_model("metrics", "MetricChunk")
    todo = Chunk.objects.only("pk", "values", "specials")
    batch = []
    for chunk in todo.iterator(chunk_size=2000):
        values = np.frombuffer(chunk.values, "<f8")
        finite = np.frombuffer(chunk.specials, "i1") == 0
        chunk.sum_value, chunk.n_finite = float(values[finite].sum()), int(finite.sum())
        batch.append(chunk)
        if len(batch) >= 2000:
            Chunk.objects.bulk_update(batch, ["sum_value", "n_finite"])
            batch = []
    Chunk.objects.bulk_update(batch, ["sum_value", "n_finite"])

    from orchestrator.metrics import store  # the current rebuilds, for the current columns

    for run_id in Chunk.objects.values_list("run_id", flat=True).distinct():
        store.rebuild_series(run_id)
        if schema_editor.connection.vendor == "postgresql":
            store.rebuild_rollups(run_id)


class Migration(migrations.Migration):

    dependencies = [
        ("metrics", "0005_points_in_chunks"),
    ]

    operations = [
        migrations.AddField(model_name="metricchunk", name="sum_value", field=models.FloatField(default=0.0)),
        migrations.AddField(model_name="metricchunk", name="n_finite", field=models.IntegerField(default=0)),
        migrations.AddField(model_name="metricseries", name="count", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="metricseries", name="max_span", field=models.BigIntegerField(default=0)),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
