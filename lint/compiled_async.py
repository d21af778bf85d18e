"""No await inside an except or finally block of a module mypyc compiles.

mypyc (native/build.py's MODULES) mishandles the exception in flight when
a handler or finally block of a compiled coroutine awaits: a finally that
awaits loses it (a cancellation too: the task runs on, and whoever waits
for its end hangs), and a handler that awaits and then re-raises can
crash the process.  Do the cleanup after the try statement instead (catch
into a variable, await, re-raise).  Run by `make lint`; prints each
finding and exits 1 if there is any.

    python lint/compiled_async.py [project-root]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

_ASYNC = (ast.Await, ast.AsyncFor, ast.AsyncWith)


def compiled_modules(root: Path) -> list[str]:
    """native/build.py's MODULES, read without running the build script."""
    text = (root / "native" / "build.py").read_text()
    block = text.split("MODULES = [", 1)[1].split("]", 1)[0]
    return [line.strip().strip('",') for line in block.splitlines()
            if line.strip().startswith('"')]


def findings(source: str, name: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Try, ast.TryStar)):
            continue
        blocks = [("a finally", node.finalbody)]
        blocks += [("an except", handler.body) for handler in node.handlers]
        for kind, body in blocks:
            for stmt in body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, _ASYNC):
                        out.append(f"{name}:{sub.lineno}: await in {kind} block of a "
                                   f"compiled module (mypyc loses the exception in flight)")
    return out


def main(root: Path) -> int:
    found = []
    for module in compiled_modules(root):
        path = root / (module.replace(".", "/") + ".py")
        if path.exists():   # (the generated codecs are written by the build)
            found += findings(path.read_text(), str(path.relative_to(root)))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent.parent))
