"""The HTTP surface and the service behind it: routes, handlers, bodies, the server."""
