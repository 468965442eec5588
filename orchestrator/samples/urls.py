from django.urls import path

from orchestrator.samples import views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/samples", views.run_samples_api, name="samples-api"),
    path("runs/<int:run_id>/samples/", views.run_samples_fragment, name="samples-run"),
    path("runs/<int:run_id>/samples/newer/", views.run_samples_newer, name="samples-newer"),
    path("compare/samples/", views.compare_samples_fragment, name="samples-compare"),
    path("runs/<int:run_id>/samples/corrections/", views.run_corrections_fragment, name="samples-run-corrections"),
    path("compare/samples/corrections/", views.compare_corrections_fragment, name="samples-compare-corrections"),
]
