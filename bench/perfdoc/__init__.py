"""docs/PERFORMANCE.md rendered from bench/results/*.json; bench/render.py is its CLI.

One module a group of sections; `core` holds the names, paths and formats
they share, `document` puts the page together.
"""

from .core import CASES, DOC, RESULTS, TOOLS, Lines, Result
from .document import NAMES, load, markdown, plots
from .faults import fault_goals, faults_section
from .scale import job_scale

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
