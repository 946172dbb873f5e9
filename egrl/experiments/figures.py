"""Moved to :mod:`egrl.aggregate.figures` (this alias goes with the old study modules)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("egrl.aggregate.figures")
