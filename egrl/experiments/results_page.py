"""The machine a study ran on, for the old study scripts that still name it here.

Moved to ``studies.render`` (:func:`~studies.render.machine`, :func:`~studies.render.cpu_model`)
with the results page (``python -m studies run compare``); this module goes with the last
script under ``scripts/`` that imports it.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> str:
    """CPU model, core count, Python version."""
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}"
