"""The mypyc build (native/build.py, kcoord/native_build.py): the compiled
modules are the ones running when built from the current sources, the .py
files under KCOORD_PURE_PYTHON=1 or when a source changed since the build,
and a failed build leaves pure Python with one warning line."""
from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kcoord import native_build

from tests.support import load_script

ROOT = Path(__file__).resolve().parent.parent
PROBE = ("import importlib, sys\n"
         "from kcoord import native_build as nb\n"
         "m = importlib.import_module(sys.argv[1])\n"
         "print(nb.state, m.__file__)\n")


def build_modules() -> list[str]:
    """native/build.py's list, read without running its module-level code."""
    text = (ROOT / "native" / "build.py").read_text()
    block = text.split("MODULES = [", 1)[1].split("]", 1)[0]
    return [line.strip().strip('",') for line in block.splitlines()
            if line.strip().startswith('"')]


def probe(tree: Path, module: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != native_build.PURE_ENV}
    full.update(env, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-c", PROBE, module], env=full, cwd=tree,
                          capture_output=True, text=True, timeout=120)


def test_compiled_modules_in_use():
    """`make test` sets KCOORD_EXPECT_COMPILED=1: the build must be there and running."""
    expected = os.environ.get("KCOORD_EXPECT_COMPILED") == "1"
    if native_build.state != "compiled" and not expected:
        pytest.skip(f"no current compiled build here ({native_build.state}); `make native`")
    if os.environ.get(native_build.PURE_ENV, "") not in ("", "0"):
        pytest.skip("this run asked for pure Python")
    assert native_build.state == "compiled"
    assert sorted(native_build.built) == sorted(build_modules())
    for name in native_build.built:
        assert native_build.is_compiled(importlib.import_module(name)), name


def test_pure_env_runs_the_py_files():
    for module in build_modules()[:3] + ["kcoord.coordinator.shard"]:
        out = probe(ROOT, module, KCOORD_PURE_PYTHON="1")
        assert out.returncode == 0, out.stderr
        state, path = out.stdout.split()
        assert state == "pure" and path == str(native_build.source_path(module))
        assert out.stderr == ""


@pytest.fixture
def tree_copy(tmp_path) -> Path:
    """kcoord (with whatever was built) and the builder, copied."""
    shutil.copytree(ROOT / "kcoord", tmp_path / "kcoord",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "native", tmp_path / "native")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def test_a_changed_source_is_not_run_compiled(tree_copy):
    """A build whose recorded digest no longer matches the .py (a developer's
    edit): every module from its .py, and one warning line."""
    manifest = tree_copy / "kcoord" / "_compiled.json"
    built = manifest.exists() and json.loads(manifest.read_text()).get(
        "interpreter") == native_build.interpreter_tag()
    if built:  # the real build: edit a compiled module's source
        source = tree_copy / "kcoord" / "coordinator" / "offsets.py"
        source.write_text(source.read_text() + "\n# edited after the build\n")
    else:  # no build here: a manifest that says offsets.py was built from other bytes
        manifest.write_text(json.dumps({
            "interpreter": native_build.interpreter_tag(),
            "modules": {"kcoord.coordinator.offsets": "0" * 64}}))
    out = probe(tree_copy, "kcoord.coordinator.offsets")
    assert out.returncode == 0, out.stderr
    state, path = out.stdout.split()
    assert state == "stale" and path.endswith("kcoord/coordinator/offsets.py")
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "offsets.py changed since the build" in lines[0], out.stderr


def test_a_failed_build_leaves_pure_python(tree_copy):
    """A module the compiler rejects: exit 0, one warning line, nothing built left."""
    headers = tree_copy / "kcoord" / "protocol" / "headers.py"
    headers.write_text(headers.read_text() + "\ndef broken(:\n")
    for stale in (tree_copy / "kcoord").rglob("*.so"):
        stale.unlink()
    (tree_copy / "kcoord" / "_compiled.json").unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "native/build.py"], cwd=tree_copy,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and "running pure Python" in lines[0], out.stderr
    assert not (tree_copy / "kcoord" / "_compiled.json").exists()
    assert not list((tree_copy / "kcoord").rglob("*.so"))


def test_no_compiled_module_awaits_in_an_except_or_finally_block():
    """mypyc loses a cancellation in flight through a finally block that
    awaits (the replica fetcher's stop hung so, and the node's exit)."""
    lint = load_script(ROOT / "lint" / "compiled_async.py", "compiled_async")
    assert lint.compiled_modules(ROOT) == build_modules()
    assert lint.main(ROOT) == 0
    sample = ("async def f(call):\n"
              "    try:\n        await call\n"
              "    except ValueError:\n        await call\n"
              "    finally:\n        await call\n")
    assert [line.split(": ", 1)[1].split(" block")[0] for line in lint.findings(sample, "m")] == [
        "await in a finally", "await in an except"]
