"""Experiments end with their last run: the new state, and every active or paused
experiment whose runs have all ended already marked ended."""
from django.db import migrations, models
from django.db.models import Exists, OuterRef

TERMINAL = ("succeeded", "failed", "cancelled", "lost")


def end_finished(apps, schema_editor):
    Experiment, Run = apps.get_model("experiments", "Experiment"), apps.get_model("experiments", "Run")
    unfinished = Run.objects.filter(experiment_id=OuterRef("pk")).exclude(state__in=TERMINAL)
    runs = Run.objects.filter(experiment_id=OuterRef("pk"))
    Experiment.objects.filter(state__in=("active", "paused")).filter(Exists(runs), ~Exists(unfinished)).update(state="ended")


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0004_run_parent_lineage'),
    ]

    operations = [
        migrations.AlterField(
            model_name='experiment',
            name='state',
            field=models.CharField(choices=[('active', 'Active'), ('paused', 'Paused'), ('cancelled', 'Cancelled'), ('ended', 'Ended')], default='active', max_length=16),
        ),
        migrations.RunPython(end_finished, migrations.RunPython.noop),
    ]
