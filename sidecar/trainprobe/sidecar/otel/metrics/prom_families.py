"""Every trainprobe metric family on every Prometheus scrape, data or not.

OpenTelemetry's Prometheus exporter writes a family only once it has a data
point: before the first report (or incident) a scrape got an empty 200, so a
scraper could not tell a sidecar with nothing to say from one that exports
nothing, and dashboards had no metadata to offer. This registry adds, after
what the exporter yields, an empty family (HELP and TYPE, no samples) for
each instrument that has none yet, named and typed as the exporter names
them once data arrives.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from opentelemetry.exporter.prometheus._mapping import map_unit, sanitize_full_name
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from trainprobe.sidecar.otel.metrics.measures import InstrumentSpec

#: The family the exporter makes of each kind (an observable up-down counter is
#: a cumulative non-monotonic sum, which Prometheus gets as a gauge).
_FAMILY = {
    "histogram": HistogramMetricFamily,
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "updown": GaugeMetricFamily,
}


def empty_family(spec: InstrumentSpec) -> Metric:
    """The family the exporter would write for ``spec``, without samples."""
    factory = _FAMILY[spec.kind]
    return factory(
        sanitize_full_name(spec.name), spec.description, labels=[], unit=map_unit(spec.unit)
    )


class FamiliesRegistry(CollectorRegistry):
    """A private registry whose scrapes always carry ``instruments``' families."""

    def __init__(self, instruments: Iterable[InstrumentSpec]) -> None:
        super().__init__(auto_describe=True)
        self._empty = [empty_family(spec) for spec in instruments]

    def collect(self) -> Iterator[Metric]:
        seen = set()
        for family in super().collect():
            seen.add(family.name)
            yield family
        for family in self._empty:
            if family.name not in seen:
                yield family
