"""The JSON API's authentication.

API views authenticate either with the browser session (CSRF enforced) or with
`Authorization: Bearer <personal token>` (no cookies, so no CSRF). They answer 401 in JSON
instead of redirecting to the login page.
"""

import functools

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponseNotAllowed
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from orchestrator.accounts.services import api_token_lookup
from orchestrator.lib.api import bearer_token, body_too_large, json_error, method_not_allowed, nul_in_url


def _csrf_failure(request: HttpRequest):
    check = CsrfViewMiddleware(lambda req: None)
    check.process_request(request)
    return check.process_view(request, None, (), {})


def api_view(view):
    """Authenticate an API view by session or personal token; set request.user."""

    @csrf_exempt
    @login_not_required
    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        token = bearer_token(request)
        if token is not None:
            api_token = api_token_lookup(token)
            if api_token is None:
                return json_error(401, "invalid or expired API token")
            if api_token.read_only and request.method not in ("GET", "HEAD", "OPTIONS"):
                return json_error(403, "this API token is read-only: it may only read (GET)")
            request.user = api_token.user
        elif not request.user.is_authenticated:
            return json_error(401, "authentication required: log in or send Authorization: Bearer <token>")
        elif request.method not in ("GET", "HEAD", "OPTIONS") and _csrf_failure(request):
            return json_error(403, "CSRF check failed")
        if bad := nul_in_url(request):
            return bad
        try:
            response = view(request, *args, **kwargs)
        except Http404 as exc:
            return json_error(404, str(exc) or "not found")
        except PermissionDenied as exc:
            return json_error(403, str(exc) or "permission denied")
        except RequestDataTooBig:
            return body_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "DATA_UPLOAD_MAX_MEMORY_SIZE")
        if isinstance(response, HttpResponseNotAllowed):
            return method_not_allowed(response["Allow"])
        return response

    return wrapper
