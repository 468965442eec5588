"""Under ASGI the whole middleware chain runs in one worker thread.

Without orchestrator.middleware.SyncChain last in MIDDLEWARE, Django runs each async-capable
middleware on the event loop and crosses to a thread for every one of its hooks. That cost
single-writer metric ingestion over HTTP about a quarter of its rate (benchmarks/metrics.py)."""

from asgiref.sync import AsyncToSync, SyncToAsync
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler


def chain_layout(node) -> list[str]:
    """The ASGI handler's chain from the top: middleware class names and each crossing."""
    layout = []
    while True:
        if isinstance(node, SyncToAsync):
            layout.append("loop -> thread")
            node = node.func
        elif isinstance(node, AsyncToSync):
            layout.append("thread -> loop")
            node = node.awaitable
        elif hasattr(node, "__wrapped__"):  # convert_exception_to_response around a middleware
            node = node.__wrapped__
        elif hasattr(node, "get_response"):
            layout.append(type(node).__name__)
            node = node.get_response
        else:
            return layout


def test_the_asgi_middleware_chain_crosses_to_a_thread_once_and_back_once_at_the_view():
    names = [path.rsplit(".", 1)[1] for path in settings.MIDDLEWARE]
    assert chain_layout(ASGIHandler()._middleware_chain) == ["loop -> thread", *names, "thread -> loop"]
