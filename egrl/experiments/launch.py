"""Moved to :mod:`egrl.aggregate.launch` (this alias goes with the old study modules)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("egrl.aggregate.launch")
