"""The import graph of kcoord: arrows point down, and no cycle.

Each package has a layer; a package imports only packages of lower layers
(every import counts, a function's lazy ones included).  The modules'
top-level imports form no cycle.  Run by `make lint`; prints each finding
and exits 1 if there is any.

    python lint/import_layers.py [kcoord-dir]
"""
from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

# protocol <- log <- broker/coordinator <- server, as docs/architecture.md draws it
LAYERS = {
    "protocol": 0,
    "log": 1,
    "broker": 2, "coordinator": 2, "security": 2,
    "txn": 3, "share": 3,           # the transaction and share cores: on the group core's pieces
    "cluster": 4, "observe": 4,
    "server": 5,
    "admin": 6,                     # the CLI tools
    "testing": 7,
    "": 8,                          # kcoord/cli.py, kcoord/__init__.py
}
# The pipeline (Spark side) stands apart: the codec and the log reader, plus
# these pure pieces shared with the server, each reached one way.
PIPELINE_MAY_USE = {
    "protocol": None, "log": None,                 # None: the whole package
    "observe": {"burrow_rules"},                   # Burrow's rules, shared with the server's API
    "coordinator": {"partitioner"},                # Kafka's group -> partition hash
    "security": {"client"},                        # the client side of TLS and SASL
    # the share coordinator's record codec and batch combiner (and its StateBatch):
    # __share_group_state replayed as the share coordinator loads it
    "share": {"records", "batch_merge", "persister"},
}
LAYERS["pipeline"] = 6


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, top_only: bool) -> list[tuple[str, int]]:
    """(imported module or package, line) of kcoord imports in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    nodes = tree.body if top_only else ast.walk(tree)
    found = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [(f"{target}.{a.name}", node.lineno) for a in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
    return [(t, line) for t, line in found if t == "kcoord" or t.startswith("kcoord.")]


def resolve(target: str, known: dict[str, Path]) -> str:
    """The module `target` names (`from pkg import name` may name a function)."""
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def package_of(module: str, known: dict[str, Path]) -> str:
    """The package of kcoord a module belongs to ("" for kcoord/cli.py and kcoord itself)."""
    parts = module.split(".")
    if len(parts) >= 2 and known.get(f"kcoord.{parts[1]}", Path()).name == "__init__.py":
        return parts[1]
    return ""


def layer_findings(known: dict[str, Path]) -> list[str]:
    findings = []
    for name, path in sorted(known.items()):
        src = package_of(name, known)
        for target, line in imports(name, path, top_only=False):
            module = resolve(target, known)
            dst = package_of(module, known)
            if dst == src or not dst:
                continue
            if src not in LAYERS or dst not in LAYERS:
                findings.append(f"{path}:{line}: package {src or dst} has no layer in {__file__}")
                continue
            if src == "pipeline":
                allowed = PIPELINE_MAY_USE.get(dst, set())
                leaf = module.split(".")[2] if module.count(".") >= 2 else ""
                if allowed is None or leaf in allowed:
                    continue
                findings.append(f"{path}:{line}: pipeline imports {module} "
                                "(the pipeline uses protocol and log, and the pieces listed)")
            elif LAYERS[dst] >= LAYERS[src]:
                findings.append(f"{path}:{line}: {src or 'kcoord'} (layer {LAYERS[src]}) imports "
                                f"{module} (layer {LAYERS[dst]}): an arrow pointing up")
    return findings


def cycle_findings(known: dict[str, Path]) -> list[str]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for target, _ in imports(name, path, top_only=True):
            module = resolve(target, known)
            if module != name and module in known:
                graph[name].add(module)
    # Tarjan's strongly connected components, iteratively
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    counter = 0
    for root in sorted(known):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return [f"import cycle (top-level imports): {' -> '.join(c)}" for c in cycles]


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "kcoord")
    known = modules(root)
    findings = layer_findings(known) + cycle_findings(known)
    for finding in findings:
        print(finding)
    if findings:
        print("import layers: arrows must point down (lint/import_layers.py says which)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
