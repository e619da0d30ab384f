"""``python -m trainprobe.sidecar``: the same as ``trainprobe-sidecar``."""

import sys

from trainprobe.sidecar.cli.sidecar import main

sys.exit(main())
