"""Run pytest on a project as a user would: a subprocess with the plugin
loaded by name (`-p kcoord.testing.plugin`) and this tree on the path."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(project: Path, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:kcoord", "-p", "kcoord.testing.plugin", "-p", "no:cacheprovider",
         "-q", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
