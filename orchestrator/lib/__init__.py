"""General helpers with no models and no requests of their own: the limits on what a user may
send (bounds.py) and the JSON API's answers (api.py). The bottom of the layers: every app may use it.

Import contract (kept by tests/unit/test_import_layers.py):
May import: none
"""
