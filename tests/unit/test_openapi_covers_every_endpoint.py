"""Every /api/v1 route is in the OpenAPI document: what is not documented is neither fuzzed by
schemathesis (tests/security/test_schemathesis.py) nor known to a client generated from it."""

import re

from django.urls import URLPattern, URLResolver, get_resolver

from orchestrator.web.openapi import document

NOT_DOCUMENTED = {"/api/v1/openapi.json"}  # the document itself


def _routes(patterns, prefix: str = ""):
    for pattern in patterns:
        route = getattr(pattern.pattern, "_route", None)
        if route is None:  # a regex pattern: the JSON 404 catch-all under /api/
            continue
        if isinstance(pattern, URLResolver):
            yield from _routes(pattern.url_patterns, prefix + route)
        elif isinstance(pattern, URLPattern):
            yield prefix + route


def api_paths() -> set[str]:
    return {
        "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
        for route in _routes(get_resolver().url_patterns)
        if route.startswith("api/v1/")
    }


def test_every_api_route_is_documented():
    documented = set(document()["paths"])
    missing = api_paths() - documented - NOT_DOCUMENTED
    assert not missing, f"routes missing from the OpenAPI document: {sorted(missing)}"


def test_the_document_names_no_route_that_does_not_exist():
    assert set(document()["paths"]) - api_paths() == set()
