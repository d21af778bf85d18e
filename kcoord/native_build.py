"""Which kcoord modules run compiled: the mypyc build, used only when it
matches the sources.

`make serve` and `make test` compile a few hot modules with mypyc
(native/build.py) into extension modules beside their .py files and write
_compiled.json: each compiled module's sha256 of the source it was built
from.  The .py files stay the source of truth.  This module, imported by
kcoord/__init__.py before anything else, decides per process:

- no manifest: nothing was built (or the build failed): pure Python;
- KCOORD_PURE_PYTHON=1: the .py files, the extensions skipped;
- a compiled module's source, or any module of coordinator/ or protocol/
  (whose types the compiled code holds), changed since the build (a
  developer's edit), or the build is for another interpreter: the .py files, with one warning
  line.  All or nothing: compiled modules call each other natively, so one
  stale module cannot be swapped out alone.
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).parent
MANIFEST = PACKAGE_DIR / "_compiled.json"
PURE_ENV = "KCOORD_PURE_PYTHON"

# what this process runs: "compiled", "pure" (asked for, or nothing built)
# or "stale" (built from other sources: pure)
state = "pure"
# the modules the build compiled (dotted names), whichever way they run here
built: tuple[str, ...] = ()


def source_path(module: str) -> Path:
    """kcoord.a.b -> kcoord/a/b.py"""
    return PACKAGE_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")


def source_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def interpreter_tag() -> str:
    """The build is for this interpreter only (its extension suffix)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


# the compiled code also holds the types it was checked against: every module of
# these packages (a compiled module's imports) counts as a source of the build
INPUT_PACKAGES = ("coordinator", "protocol")


def input_digests() -> dict[str, str]:
    """kcoord-relative path -> sha256 of every .py the build depends on."""
    return {p.relative_to(PACKAGE_DIR).as_posix(): source_digest(p)
            for pkg in INPUT_PACKAGES for p in sorted((PACKAGE_DIR / pkg).rglob("*.py"))}


def stale_reason(manifest: dict) -> str | None:
    """Why the built extensions must not run here, or None."""
    if manifest.get("interpreter") != interpreter_tag():
        return f"built for {manifest.get('interpreter')}, this is {interpreter_tag()}"
    for module, digest in manifest["modules"].items():
        path = source_path(module)
        if not path.exists() or source_digest(path) != digest:
            return f"{path.name} changed since the build"
    inputs = manifest.get("inputs", {})
    now = input_digests()
    for rel in sorted(set(inputs) | set(now)):
        if inputs.get(rel) != now.get(rel):
            return f"{rel} changed since the build"
    return None


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the listed modules as their .py files (the default finder would
    take the extension module beside them)."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname, _path=None, _target=None):
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def install() -> None:
    """Pick compiled or pure for this process (once, before any kcoord
    submodule is imported)."""
    global state, built
    try:
        manifest = json.loads(MANIFEST.read_text())
    except FileNotFoundError:
        return
    except ValueError:  # a cut manifest: its extensions are not trusted
        manifest = {"interpreter": None, "modules": {}}
    built = tuple(manifest["modules"])
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        state = "pure"
    else:
        why = stale_reason(manifest)
        if why is None:
            state = "compiled"
            return
        state = "stale"
        sys.stderr.write(f"kcoord: compiled modules not used ({why}; rebuild with "
                         f"`make native`): running pure Python\n")
    sys.meta_path.insert(0, _SourceFirst(built))


def is_compiled(module) -> bool:
    """The module object came from an extension, not from its .py."""
    return not str(getattr(module, "__file__", "")).endswith(".py")
