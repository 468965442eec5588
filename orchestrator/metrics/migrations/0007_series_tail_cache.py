"""A series' tail mean cached for the revision of its points it was computed at (summaries.py).
Then fills the columns 0006 added for stored data, and rebuilds every run's summaries and rollups
from its chunks (moved here from 0005: the live store writes columns its tables lack)."""
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

    # The live store writes today's columns: a later migration that adds columns it writes must
    # move this rebuild after them, as this one moved it here from 0005.
    from orchestrator.metrics import store

    for run_id in Chunk.objects.values_list("run_id", flat=True).distinct():
        store.rebuild_series(run_id)
        if schema_editor.connection.vendor == "postgresql":
            store.rebuild_rollups(run_id)


class Migration(migrations.Migration):

    dependencies = [
        ("metrics", "0006_summary_counts_and_chunk_sums"),
    ]

    operations = [
        migrations.AddField(model_name="metricseries", name="revision", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="metricseries", name="tail_mean", field=models.FloatField(null=True)),
        migrations.AddField(model_name="metricseries", name="tail_revision", field=models.BigIntegerField(null=True)),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
