"""Compile kcoord's hot modules with mypyc, in place, or leave pure Python.

    python native/build.py [--install]

Run by `make serve` and `make test` (`make native`).  The modules below were
chosen by profiling the OffsetCommit, heartbeat (classic and KIP-848) and
replay paths (bench/results/compiled.md).  The request/response codecs,
generated at run time by protocol/codegen.py, are first written ahead of
time as kcoord/protocol/_generated_codecs.py (protocol/codec_source.py;
git-ignored) and compiled as a group of their own.  The .py files
stay the source: the extensions are written beside them with
kcoord/_compiled.json, the sha256 of each source as built, which
kcoord/native_build.py checks at import.  Nothing here may break an install:
any failure removes what was built and prints one warning line, and kcoord
runs pure Python.  --install first installs the pinned compiler (the
`native` extra of pyproject.toml) if this interpreter lacks it.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = ROOT / "build" / "native.log"

MODULES = [
    # the record codec: every appended batch and every replayed record
    "kcoord.protocol.records",
    "kcoord.protocol.record_codec",
    "kcoord.protocol.coordinator_batch",
    # the loader's walk of runs of plain OffsetCommit batches
    "kcoord.protocol.commit_runs",
    # the request header of every frame; the codecs' entry points, and the
    # hot request/response codecs written ahead of time (GENERATED)
    "kcoord.protocol.headers",
    "kcoord.protocol.codec",
    "kcoord.protocol._generated_codecs",
    # OffsetCommit v8-v9 decoded flat (the commit path's tuples)
    "kcoord.protocol.commit_request",
    # the core's commit, heartbeat and replay paths
    "kcoord.coordinator.offsets",
    "kcoord.coordinator.shard",
    "kcoord.coordinator.timers",
    "kcoord.coordinator.classic_group_manager",
    "kcoord.coordinator.consumer_group_manager",
    "kcoord.coordinator.consumer_group",
    "kcoord.coordinator.consumer_members",
    "kcoord.coordinator.consumer_target",
    # the server-side assignors: every target assignment of a KIP-848 group
    "kcoord.coordinator.assignors.uniform",
    "kcoord.coordinator.assignors.range",
    # the network layer: framing, header peek, dispatch and the answer's frame
    # of every request (the largest interpreted share, bench/results/instr_split.md)
    "kcoord.server.dispatch",
    "kcoord.server.network",
    # the transaction coordinator's core and its __transaction_state records
    # (every transactional request's state check, record and batch)
    "kcoord.txn.records",
    "kcoord.txn.coordinator",
    # the server's clock: the write path reads it once per request
    "kcoord.server.clock",
    # the ops of a consumer's OffsetCommit and a steady KIP-848 heartbeat
    # and their cached answers (the interpreted rest of those handler chains)
    "kcoord.server.hot_ops",
    # the replication path: the replica state machine (every follower fetch
    # served, every high watermark), both halves of the followers' fetch
    # sessions and the follower's fetch round (issue 26: a replicated
    # write's rounds are CPU-bound)
    "kcoord.cluster.replica",
    "kcoord.cluster.fetch_session",
    "kcoord.cluster.fetcher",
    "kcoord.broker.fetch_sessions",
]
GROUP = "kcoord._compiled"  # the shared library: kcoord/_compiled__mypyc.*.so
# written by the build, then compiled apart (nothing calls into it natively,
# and one big C file of everything would take the longest to compile)
GENERATED = "kcoord.protocol._generated_codecs"
GENERATED_GROUP = "kcoord._codecs"


def _native_build():
    """kcoord/native_build.py alone (importing kcoord would judge the old build)."""
    spec = importlib.util.spec_from_file_location("_kcoord_native_build",
                                                  ROOT / "kcoord" / "native_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


nb = _native_build()


def pinned_requirements() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]["native"]


def ensure_compiler() -> None:
    """pip-install the pinned extra unless each pin is already met."""
    missing = []
    for req in pinned_requirements():
        name, _, version = req.partition("==")
        name = name.split(">")[0]  # a lower bound: present is enough
        try:
            if version and importlib.metadata.version(name) != version:
                missing.append(req)
        except importlib.metadata.PackageNotFoundError:
            missing.append(req)
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing],
                       check=True, stdout=LOG.open("a"), stderr=subprocess.STDOUT)


def artefacts() -> list[Path]:
    pkg = ROOT / "kcoord"
    return [p for p in pkg.rglob("*.so") if ".cpython-" in p.name or "__mypyc" in p.name]


def clean() -> None:
    nb.MANIFEST.unlink(missing_ok=True)
    nb.source_path(GENERATED).unlink(missing_ok=True)
    for path in artefacts():
        path.unlink()


def up_to_date() -> bool:
    try:
        manifest = json.loads(nb.MANIFEST.read_text())
    except (FileNotFoundError, ValueError):
        return False
    return sorted(manifest["modules"]) == sorted(MODULES) and nb.stale_reason(manifest) is None


def generate_codecs() -> None:
    """Write the codecs module from the schema tables (pure Python, so no
    extension left from an earlier build takes part)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), nb.PURE_ENV: "1"}
    with LOG.open("a") as log:
        subprocess.run([sys.executable, "-m", "kcoord.protocol.codec_source",
                        str(nb.source_path(GENERATED))], cwd=ROOT, env=env, check=True,
                       stdout=log, stderr=subprocess.STDOUT)


def compile_in_place() -> None:
    """mypyc through setuptools' build_ext --inplace, its output in the log."""
    def path(m: str) -> str:
        return str(Path(*m.split(".")).with_suffix(".py"))
    # the modules compiled are type-checked; the rest of kcoord they import
    # (log/, security/: typed loosely) is read for its types, its errors not reported
    paths = ["--follow-imports=silent", *[path(m) for m in MODULES if m != GENERATED]]
    script = (
        "import sys\n"
        "from setuptools import setup\n"
        "from mypyc.build import mypycify\n"
        f"setup(name='kcoord-compiled', py_modules=[], packages=[],\n"
        f"      ext_modules=mypycify({paths!r}, group_name={GROUP!r},\n"
        f"                           target_dir='build/native')\n"
        f"                + mypycify([{path(GENERATED)!r}], group_name={GENERATED_GROUP!r},\n"
        f"                           target_dir='build/native'),\n"
        "      script_args=['build_ext', '--inplace', '--build-temp', 'build/native/temp'])\n")
    with LOG.open("a") as log:
        subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True,
                       stdout=log, stderr=subprocess.STDOUT)


def check_import() -> None:
    """A fresh interpreter imports every compiled module from its extension."""
    probe = ("import importlib, sys\n"
             "from kcoord import native_build\n"
             "assert native_build.state == 'compiled', native_build.state\n"
             f"for m in {MODULES!r}:\n"
             "    assert native_build.is_compiled(importlib.import_module(m)), m\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KCOORD_PURE_PYTHON", None)
    with LOG.open("a") as log:
        subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, check=True,
                       stdout=log, stderr=subprocess.STDOUT)


def write_manifest(interpreter: str, digests: dict[str, str], inputs: dict[str, str]) -> None:
    tmp = nb.MANIFEST.with_suffix(".tmp")
    tmp.write_text(json.dumps({"interpreter": interpreter, "modules": digests,
                               "inputs": inputs}, indent=1) + "\n")
    tmp.replace(nb.MANIFEST)


def build(install: bool) -> str:
    if up_to_date():
        return "compiled modules up to date"
    clean()
    LOG.parent.mkdir(parents=True, exist_ok=True)
    LOG.write_text("")
    if install:
        ensure_compiler()
    generate_codecs()
    # digests of the sources as the compiler reads them: an edit made during
    # the build shows as stale at the next import
    digests = {m: nb.source_digest(nb.source_path(m)) for m in MODULES}
    inputs = nb.input_digests()
    # until the build is checked, a process that imports kcoord takes the .py
    # files (an interpreter that matches no extension: stale)
    write_manifest("(a build under way)", digests, inputs)
    compile_in_place()
    write_manifest(nb.interpreter_tag(), digests, inputs)
    check_import()
    return f"compiled {len(MODULES)} modules with mypyc"


def main() -> int:
    try:
        print("kcoord: " + build("--install" in sys.argv[1:]))
    except Exception as exc:  # never a broken install: pure Python, one line
        try:
            clean()
        except Exception:  # nothing more to undo
            pass
        what = f"exit status {exc.returncode}" if isinstance(
            exc, subprocess.CalledProcessError) else f"{type(exc).__name__}: {exc}"
        print(f"kcoord: compiled modules not built ({what}, see build/native.log); "
              f"running pure Python", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
