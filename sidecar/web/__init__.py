"""The run page: served live by the sidecar (``GET /``, ``GET /runs/{run_id}``) and written as one
self-contained HTML file (``report --html``, ``health-check --html``, the demo).

Page rendering (:mod:`sidecar.web.page`), its data (:mod:`sidecar.web.data`) and the file writers
(:mod:`sidecar.web.saved`) never import the server; only :mod:`sidecar.web.routes` does, and this
package's ``__init__`` imports none of them, so ``health-check --html`` stays HTTP-free.
"""
