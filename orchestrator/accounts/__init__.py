"""Users' API tokens and the login pages: the bottom layer, which every other app may use.

Import contract (kept by tests/unit/test_import_layers.py):
May import: lib
"""
