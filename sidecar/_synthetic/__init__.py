"""Implementation of :mod:`sidecar.synthetic` (private; import from ``sidecar.synthetic``)."""
