"""The sidecar's pure core: plain data in, decisions out.

Nothing here imports anything but the standard library and the core itself,
and every function takes the current time as an argument, so the whole
decision path is unit-testable. Its subpackages follow the flow, and import
one way only (each may import those before it; tests/test_import_cycles.py
checks it):

- :mod:`.session`: what a worker said (model, reports, the registry);
- :mod:`.judge`: rules, evidence, culprits, and the decision to kill or wait;
- :mod:`.job`: a job seen whole across sidecars;
- :mod:`.incident`: findings as incidents, the policy, the actions;
- :mod:`.hang`: a job's hang as one state machine (``hang.machine.step``);
- :mod:`.ray`: Ray's own analyses.

The modules at this level are leaves the subpackages and adapters share:
``text`` (escaping), ``limits`` (every input bound), ``conventions`` (what
the hook and the core agree on), ``lazy`` (PEP 562 exports), ``ring``,
``jobnames`` and ``log_rotation``. Each subpackage's ``__init__`` names its
public API, imported on first use.
"""

__all__: list[str] = []
