"""Running the external command once: a new session, a timeout, the group killed."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from hwmodels.external.errors import CallFailed, Refused

log = logging.getLogger(__name__)

#: characters of the command's stderr quoted in errors
_STDERR_TAIL_CHARS = 2000
#: seconds to wait for the pipes to close once a timed-out process group is killed
_DRAIN_S = 5.0


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the process group ``proc`` leads (it was started in a new session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def drain(proc: subprocess.Popen) -> tuple[str, str]:
    """Collect what a killed process left in its pipes, without waiting forever."""
    try:
        return proc.communicate(timeout=_DRAIN_S)
    except subprocess.TimeoutExpired:  # a descendant escaped the group and holds a pipe
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        proc.wait()
        return "", ""


def tail(text: str) -> str:
    text = text.strip()
    if len(text) > _STDERR_TAIL_CHARS:
        text = "..." + text[-_STDERR_TAIL_CHARS:]
    return text or "(empty)"


def run_command(
    command: list[str],
    payload: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
) -> str:
    """Run ``command`` once with ``payload`` on stdin and return its stdout.

    The command runs in a new session; on timeout (or when the caller is interrupted)
    its whole process group is killed.

    Raises:
        CallFailed: the command could not start, timed out, or exited non-zero.
    """
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        raise CallFailed(f"could not start: {exc}") from exc
    try:
        out, err = proc.communicate(payload, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        _, err = drain(proc)
        raise CallFailed(
            f"timed out after {timeout_s:g} s (process group killed); stderr tail: {tail(err)}"
        ) from None
    except BaseException:
        kill_group(proc)
        drain(proc)
        raise
    if proc.returncode != 0:
        raise Refused(f"exit code {proc.returncode}{said(out)}; stderr tail: {tail(err)}")
    if err.strip():
        log.debug("external command stderr: %s", tail(err))
    return out


def said(stdout: str) -> str:
    """``", answered with an error: ..."`` when ``stdout`` holds a JSON error answer."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except json.JSONDecodeError:
        return ""
    if isinstance(answer, dict) and "error" in answer:
        return f", answered with an error: {answer['error']}"
    return ""
