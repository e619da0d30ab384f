"""docs/PERFORMANCE.md rendered from bench/results/*.json; bench/render.py is its CLI.

`core` holds the names, paths and formats every section shares; `sections/`
one module a group of sections; `headlines` the table of figures and goals;
`plotting`, `figures` and `figures_restart` the plots; `document` puts the
page together. Imports run in that order (tests/test_import_cycles.py).
"""

from .core import CASES, DOC, RESULTS, TOOLS, Lines, Result
from .document import NAMES, load, markdown, plots
from .sections.faults import fault_goals, faults_section
from .sections.scale import job_scale

__all__ = [
    "CASES",
    "DOC",
    "NAMES",
    "RESULTS",
    "TOOLS",
    "Lines",
    "Result",
    "fault_goals",
    "faults_section",
    "job_scale",
    "load",
    "markdown",
    "plots",
]
