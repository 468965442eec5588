"""The API answers the methods its OpenAPI document lists for each path, and a 405 naming them
for any other (TRACE, or POST where only GET is documented), before any view reads the request:
a view that branches on GET and takes everything else as a write would otherwise answer them."""

import functools
import re

from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve

from orchestrator.lib.api import method_not_allowed

API_PREFIX = "/api/"
CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


@functools.cache
def documented_methods() -> dict[str, frozenset[str]]:
    """OpenAPI path -> the methods it lists (HEAD with GET)."""
    from orchestrator.web.openapi import document

    out = {}
    for path, operations in document()["paths"].items():
        methods = {m.upper() for m in operations if m.isalpha()}
        out[path] = frozenset(methods | ({"HEAD"} if "GET" in methods else set()))
    return out


def methods_for(path_info: str) -> frozenset[str] | None:
    """The methods documented for the URL pattern that `path_info` matches; None when it matches
    no documented one (the view or the JSON 404 answers)."""
    try:
        route = resolve(path_info).route
    except Resolver404:
        return None
    return documented_methods().get("/" + CONVERTER.sub(r"{\1}", route))


class ApiMethodsAsDocumented:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(API_PREFIX):
            allowed = methods_for(request.path_info)
            if allowed is not None and request.method not in allowed:
                return method_not_allowed(", ".join(sorted(allowed - {"HEAD"})))
        return self.get_response(request)
