"""Middleware of the project itself."""


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
