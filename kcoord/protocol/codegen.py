"""Generate straight-line encode/decode functions for one (schema, version).

The generated code packs runs of fixed-width fields with one precompiled
struct, inlines the one-byte varint case, and never loops over a schema at
run time.  Decoders return (dict, next_pos) and are wrapped so that any
failure surfaces as ProtocolError.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from .errors import ProtocolError
from .schema import Field, Schema

FIXED_FORMATS = {
    "bool": "?", "int8": "b", "int16": "h", "uint16": "H", "int32": "i",
    "uint32": "I", "int64": "q", "float64": "d", "uuid": "16s",
}


def uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """Unsigned varint at pos; returns (value, next_pos)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("varint longer than 5 bytes")


def skip_tagged_fields(buf, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ProtocolError("tagged field past end of buffer")
    return pos


def _truncated():
    return ProtocolError("truncated message")


_RUNTIME = {
    "struct": struct,
    "ProtocolError": ProtocolError,
    "_uvb": uvarint_bytes,
    "_ruv": read_uvarint,
    "_trunc": _truncated,
    "_H16": struct.Struct(">h"),
    "_H32": struct.Struct(">i"),
}


class _Gen:
    """Accumulates the source of one module-like namespace of functions."""

    def __init__(self, version: int, flexible: bool):
        self.v = version
        self.flex = flexible
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.counter = 0

    def const(self, value: Any, prefix: str = "_c") -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.consts[name] = value
        return name

    def struct_const(self, fmt: str) -> str:
        return self.const(struct.Struct(">" + fmt), "_st")

    def fn_name(self, path: str) -> str:
        return path.replace(".", "_")

    # ---------------------------------------------------------------- encode
    def encoder(self, path: str, fields: list[Field]) -> str:
        """Emit `def enc_<path>(m, b)` that appends m's encoding to bytearray b."""
        name = "enc_" + self.fn_name(path)
        present = [fd for fd in fields if self.v in fd.versions]
        plain = [fd for fd in present if fd.tag is None or not self.flex]
        tagged = sorted((fd for fd in present if fd.tag is not None and self.flex),
                        key=lambda fd: fd.tag)
        # nested struct encoders first
        for fd in present:
            if fd.fields is not None:
                self.encoder(f"{path}.{fd.name}", fd.fields)
        body: list[str] = []
        run: list[Field] = []

        def flush_run():
            if run:
                st = self.struct_const("".join(FIXED_FORMATS[x.type] for x in run))
                args = ", ".join(f"m.get({x.name!r}, {self.const(x.default)})" for x in run)
                body.append(f"b += {st}.pack({args})")
                run.clear()

        for fd in plain:
            if fd.type in FIXED_FORMATS:
                run.append(fd)
                continue
            flush_run()
            body.append(f"v = m.get({fd.name!r}, {self.const(fd.default)})")
            body.extend(self.encode_value(fd, path, "v"))
        flush_run()
        if self.flex:
            if not tagged:
                body.append("b.append(0)")
            else:
                body.extend(self.encode_tagged(path, tagged))
        self.lines.append(f"def {name}(m, b):")
        self.lines.extend("    " + line for line in (body or ["pass"]))
        return name

    def encode_tagged(self, path: str, tagged: list[Field]) -> list[str]:
        out = ["tags = []"]
        for fd in tagged:
            d = self.const(fd.default)
            out.append(f"v = m.get({fd.name!r}, {d})")
            # a tagged field equal to its default is left out (empty arrays too)
            if fd.type.startswith("[]") and fd.default is not None:
                cond = "v"
            elif fd.type == "{}":
                # Kafka compares with a default-built struct: all-default means absent
                defs = self.const({x.name: x.default for x in fd.fields if self.v in x.versions})
                cond = f"v is not None and any(v.get(k, dv) != dv for k, dv in {defs}.items())"
            else:
                cond = f"v != {d}"
            out.append(f"if {cond}:")
            out.append("    t = b")
            out.append("    b = bytearray()")
            out.extend("    " + line for line in self.encode_value(fd, path, "v"))
            out.append(f"    tags.append(({fd.tag}, b))")
            out.append("    b = t")
        out.append("b += _uvb(len(tags))")
        out.append("for tag, data in tags:")
        out.append("    b += _uvb(tag)")
        out.append("    b += _uvb(len(data))")
        out.append("    b += data")
        return out

    def encode_len(self, expr: str, null: bool = False) -> list[str]:
        """Length prefix for string/bytes/array (-1/0 for null)."""
        if self.flex:
            if null:
                return ["b.append(0)"]
            return [f"n = {expr} + 1", "if n < 128: b.append(n)", "else: b += _uvb(n)"]
        return ["b += _H32.pack(-1)"] if null else [f"b += _H32.pack({expr})"]

    def encode_value(self, fd: Field, path: str, var: str) -> list[str]:
        nullable = self.v in fd.nullable
        out: list[str] = []
        t = fd.type
        if t in FIXED_FORMATS:  # only reached for tagged fields
            return [f"b += {self.struct_const(FIXED_FORMATS[t])}.pack({var})"]
        if t == "{}":
            sub = "enc_" + self.fn_name(f"{path}.{fd.name}")
            if nullable:
                out.append(f"if {var} is None: b.append(255)")
                out.append("else:")
                out.append("    b.append(1)")
                out.append(f"    {sub}({var}, b)")
            else:
                out.append(f"{sub}({var} if {var} is not None else {{}}, b)")
            return out
        inner: list[str] = []
        if t == "string":
            inner.append(f"{var} = {var}.encode()")
            if self.flex:
                inner.extend(self.encode_len(f"len({var})"))
            else:
                inner.append(f"b += _H16.pack(len({var}))")
            inner.append(f"b += {var}")
            null_line = ["b.append(0)"] if self.flex else ["b += b'\\xff\\xff'"]
        elif t in ("bytes", "records"):
            inner.extend(self.encode_len(f"len({var})"))
            inner.append(f"b += {var}")
            null_line = self.encode_len("", null=True)
        elif t.startswith("[]"):
            inner.extend(self.encode_len(f"len({var})"))
            et = fd.element_type
            if et is None:
                sub = "enc_" + self.fn_name(f"{path}.{fd.name}")
                inner.append(f"for e in {var}: {sub}(e, b)")
            elif et in FIXED_FORMATS:
                fmt = FIXED_FORMATS[et]
                if len(fmt) == 1:
                    inner.append(f"b += struct.pack('>%d{fmt}' % len({var}), *{var})")
                else:  # multi-char formats like 16s cannot take a count prefix
                    inner.append(f"b += struct.pack('>' + '{fmt}' * len({var}), *{var})")
            elif et == "string":
                lens = ["if n < 128: b.append(n)", "else: b += _uvb(n)"]
                inner.append(f"for e in {var}:")
                inner.append("    e = e.encode()")
                if self.flex:
                    inner.append("    n = len(e) + 1")
                    inner.extend("    " + x for x in lens)
                else:
                    inner.append("    b += _H16.pack(len(e))")
                inner.append("    b += e")
            else:
                raise ValueError(f"unsupported array element type {et}")
            null_line = self.encode_len("", null=True)
        else:
            raise ValueError(f"unsupported type {t}")
        if nullable:
            out.append(f"if {var} is None:")
            out.extend("    " + x for x in null_line)
            out.append("else:")
            out.extend("    " + x for x in inner)
        else:
            out.extend(inner)
        return out

    # ---------------------------------------------------------------- decode
    def decoder(self, path: str, fields: list[Field]) -> str:
        """Emit `def dec_<path>(buf, pos)` returning (dict, pos)."""
        name = "dec_" + self.fn_name(path)
        present = [fd for fd in fields if self.v in fd.versions]
        tagged = [fd for fd in present if fd.tag is not None and self.flex]
        plain = [fd for fd in present if fd.tag is None or not self.flex]
        plain_ids = {id(fd) for fd in plain}
        for fd in present:
            if fd.fields is not None:
                self.decoder(f"{path}.{fd.name}", fd.fields)
        body: list[str] = ["blen = len(buf)"]
        run: list[Field] = []
        local = {fd.name: f"f_{i}" for i, fd in enumerate(fields)}

        def flush_run():
            if run:
                fmt = "".join(FIXED_FORMATS[x.type] for x in run)
                st = self.struct_const(fmt)
                targets = ", ".join(local[x.name] for x in run)
                body.append(f"{targets}, = {st}.unpack_from(buf, pos)")
                body.append(f"pos += {struct.calcsize('>' + fmt)}")
                run.clear()

        for fd in plain:
            if fd.type in FIXED_FORMATS:
                run.append(fd)
                continue
            flush_run()
            body.extend(self.decode_value(fd, path, local[fd.name]))
        flush_run()
        for fd in fields:
            if id(fd) not in plain_ids:
                # absent in this version, or tagged: start from the default
                body.append(f"{local[fd.name]} = {self.const(fd.default)}")
        if self.flex:
            body.extend(self.decode_tagged(path, tagged, local))
        items = ", ".join(f"{fd.name!r}: {local[fd.name]}" for fd in fields)
        body.append(f"return {{{items}}}, pos")
        self.lines.append(f"def {name}(buf, pos):")
        self.lines.extend("    " + line for line in body)
        return name

    def decode_tagged(self, path: str, tagged: list[Field], local: dict[str, str]) -> list[str]:
        out = ["ntag = buf[pos]; pos += 1",
               "if ntag > 127: ntag, pos = _ruv(buf, pos - 1)",
               "for _ in range(ntag):",
               "    tag, pos = _ruv(buf, pos)",
               "    size, pos = _ruv(buf, pos)",
               "    tend = pos + size",
               "    if tend > blen: raise _trunc()"]
        first = True
        for fd in tagged:
            kw = "if" if first else "elif"
            first = False
            out.append(f"    {kw} tag == {fd.tag}:")
            out.extend("        " + x for x in self.decode_value(fd, path, local[fd.name]))
        out.append("    pos = tend")
        return out

    def decode_len(self, var: str) -> list[str]:
        """Read a length prefix into var (-1 means null)."""
        if self.flex:
            return [f"{var} = buf[pos]; pos += 1",
                    f"if {var} > 127: {var}, pos = _ruv(buf, pos - 1)",
                    f"{var} -= 1"]
        return [f"{var}, = _H32.unpack_from(buf, pos)", "pos += 4"]

    def decode_value(self, fd: Field, path: str, var: str) -> list[str]:
        nullable = self.v in fd.nullable
        t = fd.type
        out: list[str] = []
        null_err = f"raise ProtocolError('null for non-nullable field {fd.name}')"
        if t in FIXED_FORMATS:  # only reached for tagged fields
            fmt = FIXED_FORMATS[t]
            return [f"{var}, = {self.struct_const(fmt)}.unpack_from(buf, pos)",
                    f"pos += {struct.calcsize('>' + fmt)}"]
        if t == "{}":
            sub = "dec_" + self.fn_name(f"{path}.{fd.name}")
            if nullable:
                out.append("flag = buf[pos]; pos += 1")
                out.append(f"if flag == 255: {var} = None")
                out.append(f"else: {var}, pos = {sub}(buf, pos)")
            else:
                out.append(f"{var}, pos = {sub}(buf, pos)")
            return out
        if t == "string":
            if self.flex:
                out.extend(self.decode_len("n"))
            else:
                out += ["n, = _H16.unpack_from(buf, pos)", "pos += 2"]
            out.append("if n < 0:")
            out.append(f"    {var} = None" if nullable else "    " + null_err)
            out.append("else:")
            out.append("    end = pos + n")
            out.append("    if end > blen: raise _trunc()")
            out.append(f"    {var} = str(buf[pos:end], 'utf-8')")
            out.append("    pos = end")
            return out
        if t in ("bytes", "records"):
            out.extend(self.decode_len("n"))
            out.append("if n < 0:")
            out.append(f"    {var} = None" if nullable or t == "records" else "    " + null_err)
            out.append("else:")
            out.append("    end = pos + n")
            out.append("    if end > blen: raise _trunc()")
            out.append(f"    {var} = bytes(buf[pos:end])")
            out.append("    pos = end")
            return out
        if t.startswith("[]"):
            out.extend(self.decode_len("n"))
            out.append("if n < 0:")
            out.append(f"    {var} = None" if nullable else "    " + null_err)
            out.append("else:")
            # every element takes at least one byte: refuse absurd counts early
            out.append("    if n > blen - pos: raise _trunc()")
            et = fd.element_type
            if et is None:
                sub = "dec_" + self.fn_name(f"{path}.{fd.name}")
                out.append(f"    {var} = []")
                out.append(f"    app = {var}.append")
                out.append("    for _ in range(n):")
                out.append(f"        e, pos = {sub}(buf, pos)")
                out.append("        app(e)")
            elif et in FIXED_FORMATS:
                fmt = FIXED_FORMATS[et]
                size = struct.calcsize(">" + fmt)
                count_fmt = f"'>%d{fmt}' % n" if len(fmt) == 1 else f"'>' + '{fmt}' * n"
                out.append(f"    {var} = list(struct.unpack_from({count_fmt}, buf, pos))")
                out.append(f"    pos += n * {size}")
            elif et == "string":
                out.append(f"    {var} = []")
                out.append("    for _ in range(n):")
                if self.flex:
                    out.extend("        " + x for x in self.decode_len("k"))
                else:
                    out += ["        k, = _H16.unpack_from(buf, pos)", "        pos += 2"]
                out.append("        end = pos + k")
                out.append("        if k < 0 or end > blen: raise _trunc()")
                out.append(f"        {var}.append(str(buf[pos:end], 'utf-8'))")
                out.append("        pos = end")
            else:
                raise ValueError(f"unsupported array element type {et}")
            return out
        raise ValueError(f"unsupported type {t}")


def build_codec(sch: Schema, version: int) -> tuple[Callable, Callable]:
    """Return (encode(msg) -> bytearray, decode(buf, pos=0) -> (msg, pos))."""
    if version not in sch.versions:
        raise ValueError(f"{sch.name} has no version {version}")
    gen = _Gen(version, sch.is_flexible(version))
    root = sch.name
    enc = gen.encoder(root, sch.fields)
    dec = gen.decoder(root, sch.fields)
    source = "\n".join(gen.lines)
    namespace: dict[str, Any] = dict(_RUNTIME)
    namespace.update(gen.consts)
    code = compile(source, f"<kcoord codec {sch.name} v{version}>", "exec")
    exec(code, namespace)
    enc_fn = namespace[enc]
    dec_fn = namespace[dec]

    def encode(msg: dict) -> bytearray:
        b = bytearray()
        enc_fn(msg, b)
        return b

    def decode(buf, pos: int = 0):
        try:
            return dec_fn(buf, pos)
        except ProtocolError:
            raise
        except Exception as exc:  # any malformed input becomes one error type
            raise ProtocolError(f"cannot decode {sch.name} v{version}: {exc!r}") from None

    encode.__name__ = f"encode_{sch.name}_v{version}"
    decode.__name__ = f"decode_{sch.name}_v{version}"
    encode.source = decode.source = source  # handy when debugging generated code
    return encode, decode
