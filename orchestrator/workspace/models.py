from django.conf import settings
from django.db import models

from orchestrator.experiments.models import Project


class SavedView(models.Model):
    """A named chart layout of a project: panels, grouping, smoothing, filters and the chosen runs
    or experiments (`state`, checked by schemas.ViewState). `page` is where it was saved from
    ("run:12", "compare", "experiment:3"), the page its URL opens. At most one view per project is
    its default, which run pages of that project apply when no view is asked for."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="saved_views")
    owner = models.ForeignKey(  # a view stays with its project when its author leaves
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="saved_views"
    )
    name = models.CharField(max_length=100)
    page = models.CharField(max_length=40, blank=True)
    state = models.JSONField(default=dict)
    is_default = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="saved_view_unique_name"),
            models.UniqueConstraint(
                fields=["project"], condition=models.Q(is_default=True), name="saved_view_one_default"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} / {self.name}"

    def to_summary(self) -> dict:
        """What a project's list of views answers: enough to choose one, without its state."""
        return {
            "id": self.pk,
            "name": self.name,
            "owner": self.owner.get_username() if self.owner else None,
            "page": self.page,
            "default": self.is_default,
            "panels": len(self.state.get("panels") or []) if isinstance(self.state, dict) else 0,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }

    def to_dict(self) -> dict:
        return {
            "id": self.pk,
            "project": self.project.name,
            "name": self.name,
            "owner": self.owner.get_username() if self.owner else None,
            "page": self.page,
            "default": self.is_default,
            "state": self.state,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }
