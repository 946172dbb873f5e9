"""The project's studies: each a plan (``configs/study/NAME.yaml``), an analysis and a
rendering of its section of ``docs/results.md``, all run by :mod:`studies.runner`.

This package sits beside the installed ones and is not installed: run it from the
checkout, ``python -m studies run NAME`` / ``python -m studies report NAME``.
"""
