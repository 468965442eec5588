import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from orchestrator.launchers.definition import Definition, DefinitionError, parse_definition


class Launcher(models.Model):
    """A command that staff allow users to run on the lab's queue, with typed parameters and the
    resources each run asks for. Checked by definition.Definition (clean() and every service);
    only staff create or change one, since it runs as the cluster's service account."""

    name = models.SlugField(max_length=63, unique=True)
    description = models.TextField(blank=True, max_length=2000)
    enabled = models.BooleanField(default=True)
    python = models.CharField(max_length=500, blank=True, help_text="A venv's interpreter, filled in for {python}")
    container = models.CharField(max_length=500, blank=True, help_text="An OCI bundle path (Slurm's --container)")
    command = models.JSONField(help_text='An argument list, e.g. ["{python}", "/opt/train.py", "--lr", "{lr}"]')
    parameters = models.JSONField(
        default=list, blank=True, help_text='In order: [{"name": "lr", "type": "float", "default": 0.001, "min": 0}]'
    )
    resources = models.JSONField(default=dict, blank=True, help_text='{"gpus": 1, "cpus": 4, "mem_gb": 16}')
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="launchers"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def definition_data(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "enabled": self.enabled,
            "python": self.python,
            "container": self.container,
            "command": self.command,
            "parameters": self.parameters,
            "resources": self.resources,
        }

    def definition(self) -> Definition:
        return parse_definition(self.definition_data())  # DefinitionError names each bad field

    def clean(self) -> None:
        try:
            parse_definition(self.definition_data())
        except DefinitionError as exc:
            by_field: dict[str, list[str]] = {}
            for e in exc.errors:
                top = re.split(r"[.\[]", e["field"], maxsplit=1)[0]
                top = top if top in FIELDS else "__all__"
                by_field.setdefault(top, []).append(f"{e['field']}: {e['message']}")
            raise ValidationError(by_field) from None


FIELDS = ("name", "description", "python", "container", "command", "parameters", "resources")
