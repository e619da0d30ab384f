"""Metrics: ``measures`` (instrument names, units and values), ``histograms``
(explicit-bucket histograms folded in plain Python), ``prom_families`` (every
family on every scrape) and ``folded_export`` (the folded histograms and
gauges handed to each reader's collection, the one module here that imports
the SDK).

It may import ``traces/``. Its public names are re-exported by
``trainprobe.sidecar.otel``.
"""

__all__: list[str] = []
