"""Rollups become partial buckets, inserted by each batch and merged by compaction (store.py): the
unique constraint goes, an index on the same columns stays. The run columns of chunks and rollups
lose their own indexes, which the (run, ...) indexes already cover: one index fewer to write per
row."""
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0004_run_parent_lineage'),
        ('metrics', '0007_series_tail_cache'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='metricrollup',
            name='metric_rollup_unique',
        ),
        migrations.AlterField(
            model_name='metricchunk',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='metric_chunks', to='experiments.run'),
        ),
        migrations.AlterField(
            model_name='metricrollup',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='experiments.run'),
        ),
        migrations.AddIndex(
            model_name='metricrollup',
            index=models.Index(fields=['run', 'key', 'width', 'bucket'], name='metric_rollup_bucket'),
        ),
    ]
