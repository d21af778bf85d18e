"""The request/response codecs ahead of time: one Python module's source.

codegen.py generates each (schema, version)'s functions at run time, which
mypyc cannot compile.  This writes the same functions (codegen's own
generator, so the two cannot drift) as a module, with typed signatures and
local declarations so that mypyc keeps positions and lengths as C integers:
the strict encoder and the bytes decoder of every version of the hot APIs'
requests and responses (HOT_APIS), identical functions written once.  The lenient encoder and the decoder of
other buffers stay generated at run time on first use (codegen.Codec).

    python -m kcoord.protocol.codec_source OUT.py

`make native` writes kcoord/protocol/_generated_codecs.py and compiles it;
api.py uses it only when it runs compiled (the import-time codecs are the
pure fallback and the reference: tests/protocol/test_codec_source.py).
"""
from __future__ import annotations

import ast
import re
import sys
from typing import Any, Iterable

from .codegen import _ARRAYS, _Gen, decoder_gen
from .messages import APIS, SCHEMAS
from .schema import Schema

# Chosen by profile: the requests of the measured steady paths (produce,
# fetch, OffsetCommit, classic and KIP-848 heartbeats, and a transaction's
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit).  The C
# grows by about 1.7 KB per generated line and its compile time with it, so
# the rest stays generated at run time.
HOT_APIS = (0, 1, 8, 12, 24, 25, 26, 28, 68)

# locals that hold only ints: declared int, so mypyc unboxes them
_INT_LOCALS = re.compile(r"(pos|blen|n|end|k|ntag|size|flag|_|tag\d+|tend\d+|_r\d+)$")
_RANGE_LOOP = re.compile(r"^(\s*)for _ in range\((\w+)\):$")
_CONST = re.compile(r"\b_(?:c|pk|up|pa|pca|ua)\d+\b")


def hot_schemas(keys: Iterable[int] | None = HOT_APIS) -> list[Schema]:
    """The request and response schemas of the APIs `keys`; None: of every
    API, and every standalone schema (coordinator records, embedded protocols)."""
    out: list[Schema] = []
    for key, api in APIS.items():
        if keys is None or key in keys:
            out += [api.request, api.response]
    return out + list(SCHEMAS.values()) if keys is None else out


class _Module:
    """The module's constants and functions, each identical one written once."""

    def __init__(self) -> None:
        self.consts: dict[tuple, str] = {}  # (kind, key) -> global name
        self.const_lines: list[str] = []
        self.functions: dict[str, str] = {}  # canonical source -> function name
        self.function_lines: list[str] = []

    def const(self, value: Any) -> str:
        """The global name of a constant of a generated function."""
        if isinstance(value, tuple) and value and callable(value[0]):  # array structs
            fmt, kind = next((fmt, i) for fmt, triple in _ARRAYS.items()
                             for i, t in enumerate(triple) if t is value)
            return self._global(("array", fmt, kind), f"_arrays({fmt!r})[{kind}]")
        if callable(value):  # a bound pack or unpack_from of a struct
            what = value.__name__
            return self._global((what, value.__self__.format),
                                f"struct.Struct({value.__self__.format!r}).{what}")
        text = repr(value)
        if ast.literal_eval(text) != value:
            raise ValueError(f"constant {value!r} does not round-trip")
        return self._global(("value", type(value).__name__, text), text)

    def _global(self, key: tuple, expr: str) -> str:
        name = self.consts.get(key)
        if name is None:
            name = self.consts[key] = f"_k{len(self.consts)}"
            self.const_lines.append(f"{name}: Final = {expr}")
        return name

    def function(self, gen: _Gen, encoder: bool) -> str:
        """Add the one function gen generated (shared if already there); its name."""
        source = _CONST.sub(lambda m: self.const(gen.consts[m.group(0)]), "\n".join(gen.lines))
        head, body = source.split("\n", 1)
        body = _fixed_counts(body)
        if encoder:
            signature = "(m: dict, b: bytearray) -> None:"
        else:
            signature = "(buf: bytes, pos: int) -> tuple[dict, int]:"
        canonical = signature + "\n" + _declarations(head, body) + body
        name = self.functions.get(canonical)
        if name is None:
            name = self.functions[canonical] = f"{'e' if encoder else 'd'}{len(self.functions)}"
            self.function_lines += ["", "", f"def {name}{canonical}"]
        return name


def _fixed_counts(body: str) -> str:
    """`for _ in range(n)` with n copied first: the body reassigns n (nested
    lengths), and mypyc's loop rereads its bound where Python's range does not."""
    out = []
    for i, line in enumerate(body.split("\n")):
        m = _RANGE_LOOP.match(line)
        if m:
            out += [f"{m.group(1)}_r{i} = {m.group(2)}", f"{m.group(1)}for _ in range(_r{i}):"]
        else:
            out.append(line)
    return "\n".join(out)


def _declarations(head: str, body: str) -> str:
    """`name: int` / `name: Any` for each local the body assigns: mypy then
    checks nothing it cannot, and mypyc unboxes the ints."""
    tree = ast.parse(head + "\n" + body)
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    params = {a.arg for a in fn.args.args}
    names: dict[str, None] = {}
    todo: list[ast.AST] = list(fn.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.DictComp, ast.SetComp)):
            continue  # their own scope
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names[node.id] = None
        todo.extend(ast.iter_child_nodes(node))
    return "".join(f"    {n}: {'int' if _INT_LOCALS.match(n) else 'Any'}\n"
                   for n in sorted(names) if n not in params)


def module_source(schemas: Iterable[Schema] | None = None) -> str:
    """The module: CODECS maps (schema name, version) to (strict encoder, bytes decoder)."""
    mod = _Module()
    table: list[str] = []
    for sch in hot_schemas() if schemas is None else schemas:
        for version in range(sch.versions.low, sch.versions.high + 1):
            flexible = sch.is_flexible(version)
            enc_gen = _Gen(version, flexible, strict=True)
            enc_gen.encoder("enc", sch.fields)
            dec_gen = decoder_gen(sch, version, flexible)
            dec_gen.decoder("dec", sch.fields)
            table.append(f"    ({sch.name!r}, {version}): "
                         f"({mod.function(enc_gen, True)}, {mod.function(dec_gen, False)}),")
    return "\n".join([
        '"""Generated by kcoord/protocol/codec_source.py from kcoord\'s schema tables',
        '(`make native`); do not edit: edit the schemas or the generator."""',
        "# ruff: noqa",
        "from __future__ import annotations",
        "",
        "import struct",
        "from typing import Any, Callable, Final",
        "",
        "from kcoord.protocol.codegen import _array_structs as _arrays",
        "from kcoord.protocol.codegen import _truncated as _trunc",
        "from kcoord.protocol.codegen import read_uvarint as _ruv",
        "from kcoord.protocol.codegen import uvarint_bytes as _uvb",
        "from kcoord.protocol.errors import ProtocolError",
        "",
        "_p16: Final = struct.Struct('>h').pack",
        "_u16: Final = struct.Struct('>h').unpack_from",
        "_p32: Final = struct.Struct('>i').pack",
        "_u32: Final = struct.Struct('>i').unpack_from",
        *mod.const_lines,
        *mod.function_lines,
        "",
        "",
        "CODECS: dict[tuple[str, int], tuple[Callable, Callable]] = {",
        *table,
        "}",
        "",
    ])


def main(argv: list[str]) -> int:
    with open(argv[0], "w") as f:
        f.write(module_source())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
