"""Implementation of :mod:`sidecar.demo.synthetic` (private; import from ``sidecar.demo.synthetic``)."""
