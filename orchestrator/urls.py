from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path

from orchestrator.experiments import api as exp_api
from orchestrator.experiments import views as exp_views
from orchestrator.metrics import views as metrics_views

urlpatterns = [
    path("", exp_views.run_list, name="exp-run-list"),
    path("runs/<int:run_id>/", exp_views.run_detail, name="exp-run-detail"),
    path("runs/<int:run_id>/cancel", exp_views.run_cancel, name="exp-run-cancel"),
    path("experiments/new/", exp_views.experiment_new, name="exp-experiment-new"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # JSON API
    path("api/v1/experiments", exp_api.experiments_create, name="api-experiments"),
    path("api/v1/runs/<int:run_id>", exp_api.run_detail, name="api-run-detail"),
    path("api/v1/runs/<int:run_id>/cancel", exp_api.run_cancel, name="api-run-cancel"),
    path("api/v1/runs/<int:run_id>/metrics", metrics_views.run_metrics, name="metrics-ingest"),
    path("api/v1/runs/<int:run_id>/heartbeat", metrics_views.run_heartbeat_view, name="metrics-heartbeat"),
]
