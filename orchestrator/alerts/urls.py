from django.urls import path

from orchestrator.alerts import page_views, views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/alerts", views.run_alerts, name="api-run-alerts"),
    path("api/v1/projects/<str:name>/alerts", views.project_alerts, name="api-project-alerts"),
    path("runs/<int:run_id>/alerts/rules", page_views.run_rule_save, name="alerts-run-rule-save"),
    path("runs/<int:run_id>/alerts/rules/test", page_views.run_rule_test, name="alerts-run-rule-test"),
    path("projects/<str:name>/alerts/", page_views.project_alerts_page, name="alerts-project"),
    path("projects/<str:name>/alerts/rules", page_views.project_rule_save, name="alerts-project-rule-save"),
    path("projects/<str:name>/alerts/rules/test", page_views.project_rule_test, name="alerts-project-rule-test"),
]
