"""Keep freed memory in the process instead of handing it back to the kernel (glibc).

glibc's ``malloc`` serves every block above its mmap threshold (32 MiB at most) with
fresh pages from ``mmap`` and unmaps them on ``free``; the next such block is faulted in
again, page by page, as it is first written. A learner update on a large decision graph
allocates and frees gigabytes of such blocks: the critic's activations and gradients are
``[N, S, hidden]`` float tensors, about 130 MB each for the 10,536 buffers of the TPU
study's ``bert-large-op-x8`` with a minibatch of ``S = 24``. On this project's
development machine faulting their pages in was most of the update's time (system time
12 s of a 16 s update). :func:`keep_freed_memory` makes ``malloc`` serve large blocks from
its heap too and keep what is freed there, so later updates reuse pages already in
memory. The process keeps its peak footprint; the numbers computed do not change.

``egrl-train`` calls it for every run (:func:`egrl.cli.train.run`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

#: ``mallopt`` parameters (glibc's ``malloc.h``)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4

_applied = False


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and never trim it (glibc ``mallopt``:
    ``M_MMAP_MAX=0``, ``M_TRIM_THRESHOLD=-1``), once per process.

    Returns whether the setting is in force: False where the C library is not glibc
    (another platform, musl), where nothing is changed.
    """
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, -1)):
        log.debug("mallopt refused M_MMAP_MAX / M_TRIM_THRESHOLD; freed memory is returned")
        return False
    _applied = True
    log.debug("malloc keeps freed memory (M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1)")
    return True
