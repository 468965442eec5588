from django.urls import path

from orchestrator.launchers import api, views

urlpatterns = [
    path("launchers/", views.launcher_list, name="launcher-list"),
    path("launchers/<slug:name>/run", views.launcher_run_new, name="launcher-run-new"),
    path("api/v1/launchers", api.launchers, name="api-launchers"),
    path("api/v1/launchers/<slug:name>/runs", api.launcher_runs, name="api-launcher-runs"),
]
