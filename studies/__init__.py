"""The project's studies: each a plan (``configs/study/NAME.yaml``), an analysis and a
rendering of its section of ``docs/results.md``, all run by :mod:`studies.runner`.

This package sits beside the installed ones and is not installed: run it from the
checkout, ``python -m studies run NAME`` / ``python -m studies report NAME``.

The layout is flat: one module per study, named after its plan (``mcm-study`` ->
``mcm_study.py``), and beside them the modules the studies share, listed in
:data:`SHARED`. A study imports shared modules only, never another study, so that a
study can be read, changed or removed alone; what two studies have in common moves to a
shared module. The shared modules stay flat beside the studies rather than in a
sub-package because the benchmarks and the tests import ``studies.render`` and
``studies.stats`` by those names; the list below, checked by the test suite, is what
tells the two kinds apart. Every study reads run directories through
:class:`egrl.rundir.RunDir` (or :mod:`egrl.runs`, which reads through it).
"""

#: the modules every study may import (none of them imports a study): the runner and its
#: command line, the page's markdown and figures, the statistics, the cells of a study of
#: agents and screens, the runs of a study of agents alone, the solved prior's map read
#: once, and the curves of the multi-chip study
SHARED = (
    "__main__",
    "runner",
    "render",
    "stats",
    "cells",
    "agent_runs",
    "prior_map",
    "mcm_curves",
)
