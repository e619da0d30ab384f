"""Relay mode: node sidecars forward their workers' streams, in batches, to
one upstream sidecar that judges them all.

Public API (imported on first use):

- :class:`RelayNode`: a node sidecar run with ``--relay-to`` (no rules).
- :class:`RelayUpstream`: serves ``Relay`` streams as sessions on the upstream.
- :class:`RelayBuffer`: the node's bounded buffer (pure).
"""

from trainprobe.sidecar.core.lazy import lazy_exports

__all__ = ["RelayBuffer", "RelayNode", "RelayUpstream"]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {"RelayBuffer": "buffer", "RelayNode": "node", "RelayUpstream": "upstream"},
)
