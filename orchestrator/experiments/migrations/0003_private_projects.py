"""Projects become private with roles: the plain members table gains a model (Membership) and a
role column, without copying rows; each existing project's earliest member becomes its owner."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def first_member_owns(apps, schema_editor):
    Membership = apps.get_model("experiments", "Membership")
    Project = apps.get_model("experiments", "Project")
    for project_id in Project.objects.values_list("id", flat=True):
        first = Membership.objects.filter(project_id=project_id).order_by("id").first()
        if first is not None:
            Membership.objects.filter(pk=first.pk).update(role="owner")


def safe_project_names(apps, schema_editor):
    """Names now go into URLs unquoted: rename any older name outside the safe pattern."""
    import re

    Project = apps.get_model("experiments", "Project")
    safe = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
    taken = set(Project.objects.values_list("name", flat=True))
    for project in Project.objects.all():
        if safe.match(project.name):
            continue
        base = (re.sub(r"[^A-Za-z0-9_.\-]", "_", project.name).lstrip("_.-") or "project")[:90]
        name, n = base, 2
        while name in taken:
            name, n = f"{base}-{n}", n + 1
        taken.add(name)
        Project.objects.filter(pk=project.pk).update(name=name)


class Migration(migrations.Migration):

    dependencies = [
        ("experiments", "0002_queue_tags_limits"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("project", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="experiments.project")),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="opl_memberships", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "experiments_project_members", "unique_together": {("project", "user")}},
                ),
                migrations.AlterField(
                    model_name="project",
                    name="members",
                    field=models.ManyToManyField(blank=True, related_name="opl_projects", through="experiments.Membership", to=settings.AUTH_USER_MODEL),
                ),
            ],
            database_operations=[],
        ),
        migrations.AddField(
            model_name="membership",
            name="role",
            field=models.CharField(choices=[("owner", "Owner"), ("member", "Member"), ("viewer", "Viewer")], default="member", max_length=16),
        ),
        migrations.AddField(
            model_name="project",
            name="personal_for",
            field=models.OneToOneField(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="personal_project", to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name="project",
            name="description",
            field=models.TextField(blank=True, max_length=2000),
        ),
        migrations.RunPython(first_member_owns, migrations.RunPython.noop),
        migrations.RunPython(safe_project_names, migrations.RunPython.noop),
    ]
