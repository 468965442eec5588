"""Run summaries: a point count per series (and the widest chunk span, which bounds overlap
checks) and, per chunk, the sum and count of its finite values
(a summary's tail mean adds whole chunks without unpacking them). 0007 fills them for stored
data."""
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("metrics", "0005_points_in_chunks"),
    ]

    operations = [
        migrations.AddField(model_name="metricchunk", name="sum_value", field=models.FloatField(default=0.0)),
        migrations.AddField(model_name="metricchunk", name="n_finite", field=models.IntegerField(default=0)),
        migrations.AddField(model_name="metricseries", name="count", field=models.BigIntegerField(default=0)),
        migrations.AddField(model_name="metricseries", name="max_span", field=models.BigIntegerField(default=0)),
    ]
