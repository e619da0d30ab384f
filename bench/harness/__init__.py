"""Harness code the benchmarks and probes share, none of it a benchmark itself.

- ``common``: statistics, /proc readings, result files with their provenance,
  the sidecar's command line and environment for an A/B run.
- ``sim_worker``, ``loadgen``, ``relay_loadgen``: simulated workers over real
  gRPC, on direct streams or as relay nodes (the last two also run as files).
- ``scale_level``: one load level of bench_scale.py; ``sidecar_memory``: what
  bench_session_cost.py injects into the sidecar; ``summary_load``: the
  simulated nodes of bench_summary_sync.py.
- ``detect_jobs``, ``fault_jobs``, ``fault_worker``: the jobs (and the worker
  script) of bench_detection.py and bench_faults.py under each tool;
  ``anchors``: bench_cost.py's comparisons; ``ft_local``, ``ft_ray``:
  bench_torchft.py's trials.

Imported as ``harness.<module>`` with bench/ on ``sys.path`` (a bench script's
own folder; probes/_bench.py puts it there for a probe).
"""

__all__: list[str] = []
