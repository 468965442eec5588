"""SDK client ids are unique per user, not across the lab: each external run records its run's
owner, and (owner, client_id) is the unique pair."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def owners_from_runs(apps, schema_editor):
    ExternalRun = apps.get_model("experiments", "ExternalRun")
    Run = apps.get_model("experiments", "Run")
    ExternalRun.objects.update(
        owner_id=models.Subquery(Run.objects.filter(pk=models.OuterRef("run_id")).values("owner_id")[:1])
    )


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0006_external_runs"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="externalrun",
            name="owner",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="external_runs",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.RunPython(owners_from_runs, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="externalrun",
            name="owner",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="external_runs",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AlterField(
            model_name="externalrun",
            name="client_id",
            field=models.CharField(max_length=64),
        ),
        migrations.AddConstraint(
            model_name="externalrun",
            constraint=models.UniqueConstraint(fields=("owner", "client_id"), name="external_run_client_id_per_user"),
        ),
    ]
