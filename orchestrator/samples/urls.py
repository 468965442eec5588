from django.urls import path

from orchestrator.samples import views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/samples", views.run_samples_api, name="samples-api"),
    path("runs/<int:run_id>/samples/", views.run_samples_fragment, name="samples-run"),
    path("compare/samples/", views.compare_samples_fragment, name="samples-compare"),
]
