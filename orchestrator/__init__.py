"""The Django project: settings.py, urls.py, asgi.py, celery.py and the middleware of every
request. It sits on top of every app: urls.py includes their URLs by name, settings.py checks
CLUSTER_BACKEND against cluster's registry at startup, api_methods.py reads web's OpenAPI
document, and no app imports these modules.

Import contract (kept by tests/unit/test_import_layers.py):
May import: cluster, lib, web
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
