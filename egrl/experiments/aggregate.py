"""Moved to :mod:`egrl.aggregate.aggregate` (this alias goes with the old study modules)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("egrl.aggregate.aggregate")
