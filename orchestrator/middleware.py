"""Middleware of the project itself."""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from orchestrator.lib.api import body_too_large, json_error, method_not_allowed

API_PREFIX = "/api/"


class ApiErrorsAsJson:
    """Every answer under /api/ is JSON, errors included. The API's own views answer JSON; this
    catches what Django answers before or around them as an HTML page: the 404 of a path no URL
    pattern matches (one with a newline in it: the catch-all's `.` stops at a newline), the empty
    405 of `require_http_methods` (its Allow header kept), a body over DATA_UPLOAD_MAX_MEMORY_SIZE
    (Django's 400, here a 413 naming the limit) and the 500 page."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not request.path_info.startswith(API_PREFIX)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        if response.status_code == 405:
            return method_not_allowed(response.get("Allow", ""))
        if response.status_code == 404:
            return json_error(404, f"no API endpoint at {request.path_info[:200]!r}")
        return json_error(response.status_code, response.reason_phrase.lower())

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RequestDataTooBig) and request.path_info.startswith(API_PREFIX):
            return body_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, "DATA_UPLOAD_MAX_MEMORY_SIZE")
        return None


class SyncChain:
    """Last in MIDDLEWARE. Being sync-only, it makes Django run every middleware above it in the
    sync mode they all support. Otherwise, under ASGI, each async-capable middleware crosses from
    the event loop to a worker thread and back for each of its hooks: about 14 crossings per
    request, where this leaves three. Async views still run on the event loop."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)
