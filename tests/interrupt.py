"""Killing a run mid-way, as a crash or an out-of-memory kill would, for resume tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kill_after_checkpoints(
    script: str, args: list[str], run_dir: Path, checkpoints: int = 2, timeout_s: float = 120
) -> None:
    """Run ``python -c script *args`` and ``kill -9`` it once ``run_dir/checkpoints`` holds
    ``checkpoints`` checkpoints; fail if the run ends first (it was too short to kill)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-c", script, *args]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    deadline = time.time() + timeout_s
    try:
        while time.time() < deadline and proc.poll() is None:
            found = list((run_dir / "checkpoints").glob("gen_??????")) if run_dir.exists() else []
            if len(found) >= checkpoints:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run finished before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
