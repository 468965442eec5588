from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from orchestrator.lib.api import not_found as api_not_found

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    # what a browser asks for on its own (an image, a JSON answer): the page's icon, without a login
    path("favicon.ico", login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True))),
    path("", include("orchestrator.accounts.urls")),
    path("", include("orchestrator.experiments.urls")),
    path("", include("orchestrator.web.urls")),
    path("", include("orchestrator.metrics.urls")),
    path("", include("orchestrator.cluster.urls")),
    path("", include("orchestrator.studies.urls")),
    path("", include("orchestrator.alerts.urls")),
    path("", include("orchestrator.samples.urls")),
    path("", include("orchestrator.workspace.urls")),
    path("", include("orchestrator.launchers.urls")),
    re_path(r"^api/(?P<path>.*)$", api_not_found, name="api-not-found"),  # last: JSON 404s under /api/
]
