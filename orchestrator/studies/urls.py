from django.urls import path

from orchestrator.studies import views

urlpatterns = [
    path("experiments/<int:experiment_id>/statistics", views.experiment_statistics, name="study-statistics"),
    path(
        "experiments/<int:experiment_id>/statistics.<str:fmt>",
        views.experiment_statistics_export,
        name="study-statistics-export",
    ),
]
