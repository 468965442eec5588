from django.urls import path

from orchestrator.accounts import views

urlpatterns = [
    path("account/tokens/", views.tokens, name="accounts-tokens"),
    path("account/tokens/<int:token_id>/delete", views.token_delete, name="accounts-token-delete"),
]
