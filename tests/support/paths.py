"""The repository's root and this interpreter."""

from __future__ import annotations

import sys
from pathlib import Path

#: the repository's root
ROOT = Path(__file__).resolve().parents[2]
#: this interpreter (for a command run in a new process)
PY = sys.executable
