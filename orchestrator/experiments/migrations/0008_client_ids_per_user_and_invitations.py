"""SDK client ids are unique per user, not across the lab: each external run records its run's
owner, and (owner, client_id) is the unique pair. Project invitations: an owner offers a role,
the user joins by accepting it."""

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
        ("experiments", "0007_logging_token_made_with"),
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
        migrations.CreateModel(
            name="ProjectInvitation",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "role",
                    models.CharField(
                        choices=[("owner", "Owner"), ("member", "Member"), ("viewer", "Viewer")],
                        default="member",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "invited_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="invitations",
                        to="experiments.project",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="opl_invitations",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"unique_together": {("project", "user")}},
        ),
    ]
