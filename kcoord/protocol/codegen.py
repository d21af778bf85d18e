"""Generate straight-line encode/decode functions for one (schema, version).

The generated code packs runs of fixed-width fields with one precompiled
struct (bound pack/unpack_from), inlines the one-byte varint case, the
zero-tagged-fields case and every nested struct (one function per message,
no call per array element), uses precompiled structs for arrays of numbers,
and never loops over a schema at run time.  Decoders return (dict,
next_pos) and are wrapped so that any failure surfaces as ProtocolError.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from .codec import Codec
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


_ARRAY_CACHE = 64  # element counts with a precompiled array Struct
_ARRAYS: dict[str, tuple[tuple, tuple, tuple]] = {}  # shared by every codec


def _array_structs(fmt: str) -> tuple[tuple, tuple, tuple]:
    """For k < _ARRAY_CACHE, bound methods of precompiled structs: pack of
    '>{k}{fmt}', pack of '>i{k}{fmt}' (int32 count first) and unpack_from
    of '>{k}{fmt}'."""
    ks = range(_ARRAY_CACHE)
    return (tuple(struct.Struct(f">{k}{fmt}").pack for k in ks),
            tuple(struct.Struct(f">i{k}{fmt}").pack for k in ks),
            tuple(struct.Struct(f">{k}{fmt}").unpack_from for k in ks))


_RUNTIME = {
    "struct": struct,
    "ProtocolError": ProtocolError,
    "_uvb": uvarint_bytes,
    "_ruv": read_uvarint,
    "_trunc": _truncated,
    "_p16": struct.Struct(">h").pack,
    "_u16": struct.Struct(">h").unpack_from,
    "_p32": struct.Struct(">i").pack,
    "_u32": struct.Struct(">i").unpack_from,
}


def _indent(lines: list[str], by: str = "    ") -> list[str]:
    return [by + line for line in lines]


class _Gen:
    """Builds one encode and one decode function for a (schema, version).

    Nested structs and struct arrays are inlined into the one function (no
    call per element); temporaries that live across nested code carry the
    nesting depth in their name, the others are used at once."""

    def __init__(self, version: int, flexible: bool, views: bool = False,
                 strict: bool = False):
        self.v = version
        self.flex = flexible
        self.strict = strict  # encode reads m[name]: faster, KeyError if a field is missing
        self.views = views  # decoding buffers other than bytes (no .decode, slices not bytes)
        self._prefetched = False  # the next compact length's first byte is in n
        self.lines: list[str] = []
        self.consts: dict[str, Any] = {}
        self.counter = 0
        self._arrays: dict[str, tuple[str, str, str]] = {}
        # records decoded as a view of the frame, not copied out (RECORD_VIEWS)
        self.record_views = False

    def const(self, value: Any, prefix: str = "_c") -> str:
        self.counter += 1
        name = f"{prefix}{self.counter}"
        self.consts[name] = value
        return name

    def packer(self, fmt: str) -> str:
        return self.const(struct.Struct(">" + fmt).pack, "_pk")

    def unpacker(self, fmt: str) -> str:
        return self.const(struct.Struct(">" + fmt).unpack_from, "_up")

    def array_structs(self, fmt: str) -> tuple[str, str, str]:
        if fmt not in self._arrays:
            if fmt not in _ARRAYS:
                _ARRAYS[fmt] = _array_structs(fmt)
            pa, pca, ua = _ARRAYS[fmt]
            self._arrays[fmt] = (self.const(pa, "_pa"), self.const(pca, "_pca"),
                                 self.const(ua, "_ua"))
        return self._arrays[fmt]

    def present(self, fields: list[Field]):
        present = [fd for fd in fields if self.v in fd.versions]
        plain = [fd for fd in present if fd.tag is None or not self.flex]
        tagged = sorted((fd for fd in present if fd.tag is not None and self.flex),
                        key=lambda fd: fd.tag or 0)
        return present, plain, tagged

    # ---------------------------------------------------------------- encode
    def encoder(self, name: str, fields: list[Field]) -> str:
        """Emit `def <name>(m, b)` that appends m's encoding to bytearray b."""
        body = self.encode_body(fields, "m", 0)
        self.lines.append(f"def {name}(m, b):")
        self.lines.extend(_indent(body or ["pass"]))
        return name

    def encode_body(self, fields: list[Field], mv: str, d: int) -> list[str]:
        _, plain, tagged = self.present(fields)
        body: list[str] = []
        run: list[Field] = []
        var = f"v{d}"

        def pack_run(extra: str | None = None) -> str:
            """`b += pack(run fields)`, with one more unsigned byte `extra`."""
            fmt = "".join(FIXED_FORMATS[x.type] for x in run)
            args = [self.field(mv, x) for x in run]
            if extra is not None:
                fmt += "B"
                args.append(extra)
            return f"b += {self.packer(fmt)}({', '.join(args)})"

        for fd in plain:
            if fd.type in FIXED_FORMATS:
                run.append(fd)
                continue
            if run and self.counted_array(fd):
                # the array's one-byte count goes out with the fixed fields before it
                body.append(f"{var} = {self.field(mv, fd)}")
                body.append(f"n = len({var})")
                body.append(f"if n < 127: {pack_run('n + 1')}")
                body.append("else:")
                body.append(f"    {pack_run()}")
                body.append("    b += _uvb(n + 1)")
                run.clear()
                body.extend(self.encode_value(fd, var, d, counted=True))
                continue
            if run:
                body.append(pack_run())
                run.clear()
            body.append(f"{var} = {self.field(mv, fd)}")
            body.extend(self.encode_value(fd, var, d))
        if self.flex and not tagged:
            # no tagged fields: the empty tag section is one zero byte
            body.append(pack_run("0") if run else "b.append(0)")
            return body
        if run:
            body.append(pack_run())
        if self.flex:
            body.extend(self.encode_tagged(tagged, mv, d))
        return body

    def counted_array(self, fd: Field) -> bool:
        """A flexible non-null array whose count encode_body can write itself."""
        et = fd.element_type
        return (self.flex and fd.type.startswith("[]") and self.v not in fd.nullable
                and (fd.type == "[]" or (et in FIXED_FORMATS and len(FIXED_FORMATS[et]) == 1)))

    def field(self, mv: str, fd: Field) -> str:
        """A field's value to encode: the message's, or the field's default."""
        if self.strict:
            return f"{mv}[{fd.name!r}]"
        return f"{mv}.get({fd.name!r}, {self.const(fd.default)})"

    def encode_tagged(self, tagged: list[Field], mv: str, d: int) -> list[str]:
        var, tags, saved = f"v{d}", f"tg{d}", f"t{d}"
        out = [f"{tags} = None"]
        for fd in tagged:
            dflt = self.const(fd.default)
            out.append(f"{var} = {mv}.get({fd.name!r}, {dflt})")
            # a tagged field equal to its default is left out (empty arrays too)
            if fd.type.startswith("[]") and fd.default is not None:
                cond = var
            elif fd.type == "{}":
                # Kafka compares with a default-built struct: all-default means absent
                defs = self.const({x.name: x.default for x in fd.fields or ()
                                   if self.v in x.versions})
                cond = (f"{var} is not None and any({var}.get(k, dv) != dv "
                        f"for k, dv in {defs}.items())")
            else:
                cond = f"{var} != {dflt}"
            out.append(f"if {cond}:")
            out.append(f"    {saved} = b")
            out.append("    b = bytearray()")
            out.extend(_indent(self.encode_value(fd, var, d)))
            out.append(f"    if {tags} is None: {tags} = []")
            out.append(f"    {tags}.append(({fd.tag}, b))")
            out.append(f"    b = {saved}")
        out.append(f"if {tags} is None:")
        out.append("    b.append(0)")
        out.append("else:")
        out.append(f"    b += _uvb(len({tags}))")
        out.append(f"    for tag, data in {tags}:")
        out.append("        b += _uvb(tag)")
        out.append("        b += _uvb(len(data))")
        out.append("        b += data")
        return out

    def encode_count(self, expr: str) -> list[str]:
        """Length prefix of a non-null string/bytes/array of length expr."""
        if self.flex:
            return [f"n = {expr}", "if n < 127: b.append(n + 1)", "else: b += _uvb(n + 1)"]
        return [f"b += _p32({expr})"]

    def encode_null(self) -> list[str]:
        return ["b.append(0)"] if self.flex else ["b += b'\\xff\\xff\\xff\\xff'"]

    def encode_value(self, fd: Field, var: str, d: int, counted: bool = False) -> list[str]:
        """Lines that append var's encoding; `counted`: an array's count
        (in n) has been written already."""
        nullable = self.v in fd.nullable
        out: list[str] = []
        t = fd.type
        if t in FIXED_FORMATS:  # only reached for tagged fields
            return [f"b += {self.packer(FIXED_FORMATS[t])}({var})"]
        if t == "{}":
            inner = self.encode_body(fd.fields or [], var, d + 1)
            if nullable:
                out.append(f"if {var} is None: b.append(255)")
                out.append("else:")
                out.append("    b.append(1)")
                out.extend(_indent(inner or ["pass"]))
            else:
                out.append(f"if {var} is None: {var} = {{}}")
                out.extend(inner)
            return out
        inner = []
        if t == "string":
            inner.append(f"{var} = {var}.encode()")
            if self.flex:
                inner.extend(self.encode_count(f"len({var})"))
            else:
                inner.append(f"b += _p16(len({var}))")
            inner.append(f"b += {var}")
            null_line = ["b.append(0)"] if self.flex else ["b += b'\\xff\\xff'"]
        elif t in ("bytes", "records"):
            inner.extend(self.encode_count(f"len({var})"))
            inner.append(f"b += {var}")
            null_line = self.encode_null()
        elif t.startswith("[]"):
            et = fd.element_type
            if et in FIXED_FORMATS and len(FIXED_FORMATS[et]) == 1:
                fmt = FIXED_FORMATS[et]
                pa, pca, _ = self.array_structs(fmt)
                if not counted:
                    inner.append(f"n = len({var})")
                if self.flex:
                    if not counted:
                        inner.append("if n < 127: b.append(n + 1)")
                        inner.append("else: b += _uvb(n + 1)")
                    inner.append(f"if n: b += {pa}[n](*{var}) if n < {_ARRAY_CACHE} "
                                 f"else struct.pack('>%d{fmt}' % n, *{var})")
                else:  # int32 count and elements in one precompiled pack
                    inner.append(f"if n < {_ARRAY_CACHE}: b += {pca}[n](n, *{var})")
                    inner.append(f"else: b += struct.pack('>i%d{fmt}' % n, n, *{var})")
                if nullable:
                    out.append(f"if {var} is None:")
                    out.extend(_indent(self.encode_null()))
                    out.append("else:")
                    out.extend(_indent(inner))
                else:
                    out.extend(inner)
                return out
            if not counted:
                inner.extend(self.encode_count(f"len({var})"))
            if et is None:
                e = f"e{d + 1}"
                inner.append(f"for {e} in {var}:")
                inner.extend(_indent(self.encode_body(fd.fields or [], e, d + 1) or ["pass"]))
            elif et in FIXED_FORMATS:  # multi-char formats like 16s take no count prefix
                inner.append(f"b += struct.pack('>' + '{FIXED_FORMATS[et]}' * len({var}), *{var})")
            elif et == "string":
                inner.append(f"for s in {var}:")
                inner.append("    s = s.encode()")
                if self.flex:
                    inner.extend(_indent(self.encode_count("len(s)")))
                else:
                    inner.append("    b += _p16(len(s))")
                inner.append("    b += s")
            else:
                raise ValueError(f"unsupported array element type {et}")
            null_line = self.encode_null()
        else:
            raise ValueError(f"unsupported type {t}")
        if nullable:
            out.append(f"if {var} is None:")
            out.extend(_indent(null_line))
            out.append("else:")
            out.extend(_indent(inner))
        else:
            out.extend(inner)
        return out

    # ---------------------------------------------------------------- decode
    def decoder(self, name: str, fields: list[Field]) -> str:
        """Emit `def <name>(buf, pos)` returning (dict, pos)."""
        body, expr = self.decode_body(fields, 0)
        self.lines.append(f"def {name}(buf, pos):")
        self.lines.append("    blen = len(buf)")
        self.lines.extend(_indent(body))
        self.lines.append("    if pos > blen: raise _trunc()")
        self.lines.append(f"    return {expr}, pos")
        return name

    def decode_body(self, fields: list[Field], d: int) -> tuple[list[str], str]:
        """Lines that decode a struct into locals f<d>_<i>; and the dict expression."""
        _, plain, tagged = self.present(fields)
        plain_ids = {id(fd) for fd in plain}
        tagged_ids = {id(fd) for fd in tagged}
        body: list[str] = []
        run: list[Field] = []
        local = {fd.name: f"f{d}_{i}" for i, fd in enumerate(fields)}

        def flush_run(then: str | None = None):
            """Unpack the run; with `then`, also the one byte after it (the
            first byte of the next compact length, or the tag count)."""
            if run:
                fmt = "".join(FIXED_FORMATS[x.type] for x in run)
                targets = [local[x.name] for x in run]
                if then:
                    fmt += "B"
                    targets.append(then)
                body.append(f"{', '.join(targets)}, = {self.unpacker(fmt)}(buf, pos)")
                body.append(f"pos += {struct.calcsize('>' + fmt)}")
                run.clear()
                return True
            return False

        for fd in plain:
            if fd.type in FIXED_FORMATS:
                run.append(fd)
                continue
            prefixed = self.flex and fd.type != "{}"  # starts with a compact length
            self._prefetched = flush_run("n" if prefixed else None) and prefixed
            body.extend(self.decode_value(fd, local[fd.name], d))
            self._prefetched = False
        tags_read = flush_run("ntag" if self.flex else None) and self.flex
        for fd in fields:
            if id(fd) in plain_ids:
                continue
            if id(fd) in tagged_ids:  # tagged: starts from the default, may be read below
                body.append(f"{local[fd.name]} = {self.const(fd.default)}")
            else:  # absent in this version: the default goes straight into the dict
                local[fd.name] = self.const(fd.default)
        if self.flex:
            body.extend(self.decode_tagged(tagged, local, d, tags_read))
        expr = "{" + ", ".join(f"{fd.name!r}: {local[fd.name]}" for fd in fields) + "}"
        return body, expr

    def decode_tagged(self, tagged: list[Field], local: dict[str, str], d: int,
                      count_read: bool = False) -> list[str]:
        tag, tend = f"tag{d}", f"tend{d}"
        loop = ["for _ in range(ntag):",
                f"    {tag}, pos = _ruv(buf, pos)",
                "    size, pos = _ruv(buf, pos)",
                f"    {tend} = pos + size",
                f"    if {tend} > blen: raise _trunc()"]
        first = True
        for fd in tagged:
            kw = "if" if first else "elif"
            first = False
            loop.append(f"    {kw} {tag} == {fd.tag}:")
            loop.extend(_indent(self.decode_value(fd, local[fd.name], d), "        "))
        loop.append(f"    pos = {tend}")
        # the usual case is no tagged fields at all: one zero byte
        return ([] if count_read else ["ntag = buf[pos]; pos += 1"]) + [
                "if ntag:",
                "    if ntag > 127: ntag, pos = _ruv(buf, pos - 1)"] + _indent(loop)

    def text(self, expr: str) -> str:
        """UTF-8 text of a slice of buf (bytes.decode is the fast way)."""
        return f"str({expr}, 'utf-8')" if self.views else f"{expr}.decode()"

    def decode_len(self, var: str) -> list[str]:
        """Read a length prefix into var (-1 means null)."""
        if self.flex:
            if self._prefetched:  # its first byte came with the fixed fields before it
                self._prefetched = False
                return [f"if {var} > 127: {var}, pos = _ruv(buf, pos - 1)", f"{var} -= 1"]
            return [f"{var} = buf[pos]; pos += 1",
                    f"if {var} > 127: {var}, pos = _ruv(buf, pos - 1)",
                    f"{var} -= 1"]
        return [f"{var}, = _u32(buf, pos)", "pos += 4"]

    def decode_value(self, fd: Field, var: str, d: int) -> list[str]:
        nullable = self.v in fd.nullable
        t = fd.type
        out: list[str] = []
        null_err = f"raise ProtocolError('null for non-nullable field {fd.name}')"
        if t in FIXED_FORMATS:  # only reached for tagged fields
            fmt = FIXED_FORMATS[t]
            return [f"{var}, = {self.unpacker(fmt)}(buf, pos)",
                    f"pos += {struct.calcsize('>' + fmt)}"]
        if t == "{}":
            inner, expr = self.decode_body(fd.fields or [], d + 1)
            if nullable:
                out.append("flag = buf[pos]; pos += 1")
                out.append(f"if flag == 255: {var} = None")
                out.append("else:")
                out.extend(_indent(inner))
                out.append(f"    {var} = {expr}")
            else:
                out.extend(inner)
                out.append(f"{var} = {expr}")
            return out
        if t == "string":
            # no bounds check here: a string running past the end makes pos
            # pass blen, which the decoder's final check turns into an error
            if self.flex:  # compact: n is the length + 1 (0 = null)
                out.extend(self.decode_len("n")[:-1])
                out.append("if n > 1:")
                out.append("    end = pos + n - 1")
                empty, null = "elif n == 1:", "else:"
            else:
                out += ["n, = _u16(buf, pos)", "pos += 2"]
                out.append("if n > 0:")
                out.append("    end = pos + n")
                empty, null = "elif n == 0:", "else:"
            out.append(f"    {var} = {self.text('buf[pos:end]')}")
            out.append("    pos = end")
            out.append(f"{empty} {var} = ''")
            out.append(f"{null} {var} = None" if nullable else f"{null} " + null_err)
            return out
        if t in ("bytes", "records"):
            out.extend(self.decode_len("n"))
            out.append("if n < 0:")
            out.append(f"    {var} = None" if nullable or t == "records" else "    " + null_err)
            out.append("else:")
            out.append("    end = pos + n")
            out.append("    if end > blen: raise _trunc()")
            # a slice of bytes is bytes already; of any other buffer, copy it
            # out (but RECORD_VIEWS' records: a view of the buffer either way)
            if t == "records" and self.record_views:
                out.append(f"    {var} = memoryview(buf)[pos:end]")
            elif self.views:
                out.append(f"    {var} = bytes(buf[pos:end])")
            else:
                out.append(f"    {var} = buf[pos:end]")
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
                app = f"app{d}"
                inner, expr = self.decode_body(fd.fields or [], d + 1)
                out.append(f"    {var} = []")
                out.append(f"    {app} = {var}.append")
                out.append("    for _ in range(n):")
                out.extend(_indent(inner, "        "))
                out.append(f"        {app}({expr})")
            elif et in FIXED_FORMATS:
                fmt = FIXED_FORMATS[et]
                size = struct.calcsize(">" + fmt)
                if len(fmt) == 1:
                    _, _, ua = self.array_structs(fmt)
                    out.append(f"    if not n: {var} = []")
                    out.append(f"    elif n < {_ARRAY_CACHE}: {var} = list({ua}[n](buf, pos))")
                    out.append(f"    else: {var} = list(struct.unpack_from('>%d{fmt}' % n, buf, pos))")
                else:
                    out.append(f"    {var} = list(struct.unpack_from('>' + '{fmt}' * n, buf, pos))")
                out.append(f"    pos += n * {size}")
            elif et == "string":
                out.append(f"    {var} = []")
                out.append("    for _ in range(n):")
                if self.flex:
                    out.extend(_indent(self.decode_len("k"), "        "))
                else:
                    out += ["        k, = _u16(buf, pos)", "        pos += 2"]
                out.append("        end = pos + k")
                out.append("        if k < 0 or end > blen: raise _trunc()")
                out.append(f"        {var}.append({self.text('buf[pos:end]')})")
                out.append("        pos = end")
            else:
                raise ValueError(f"unsupported array element type {et}")
            return out
        raise ValueError(f"unsupported type {t}")


# Requests whose records the server only checks and writes (PartitionLog.append
# writes views): decoded as views of the frame instead of copies, by the bytes
# decoder and the other buffers' decoder alike (the network hands a large
# frame over in its own bytearray, never changed after); a view keeps the
# frame alive only as long as the request.
RECORD_VIEWS = frozenset({"ProduceRequest"})


def decoder_gen(sch: Schema, version: int, flexible: bool, views: bool = False) -> _Gen:
    """The generator of sch's decoder of bytes (views: of any other buffer),
    records as views where RECORD_VIEWS."""
    gen = _Gen(version, flexible, views=views)
    gen.record_views = sch.name in RECORD_VIEWS
    return gen


def _compile(gen: _Gen, sch: Schema, version: int, *names: str) -> list[Callable]:
    namespace: dict[str, Any] = dict(_RUNTIME)
    namespace.update(gen.consts)
    code = compile("\n".join(gen.lines), f"<kcoord codec {sch.name} v{version}>", "exec")
    exec(code, namespace)
    return [namespace[name] for name in names]


def build_codec(sch: Schema, version: int,
                ahead: tuple[Callable, Callable] | None = None) -> tuple[Callable, Callable]:
    """Return (encode(msg, b=None) -> bytearray, decode(buf, pos=0) -> (msg, pos)).

    encode appends to b when given (a caller can leave room for a header).

    decode reads bytes with slices and text with bytes.decode; any other
    buffer (bytearray, memoryview) goes to a second decoder, generated on
    its first use, that copies bytes out and reads text with str().

    ahead: the (strict encoder, bytes decoder) written ahead of time
    (codec_source.py), used instead of generating them here."""
    if version not in sch.versions:
        raise ValueError(f"{sch.name} has no version {version}")
    flexible = sch.is_flexible(version)

    def generate(gen: _Gen, encoder: bool) -> Callable:
        name = ("enc_" if encoder else "dec_") + sch.name
        made = gen.encoder(name, sch.fields) if encoder else gen.decoder(name, sch.fields)
        return _compile(gen, sch, version, made)[0]

    if ahead is None:
        ahead = (generate(_Gen(version, flexible, strict=True), True),
                 generate(decoder_gen(sch, version, flexible), False))
    codec = Codec(f"{sch.name} v{version}", ahead[0],
                  lambda: generate(_Gen(version, flexible), True), ahead[1],
                  lambda: generate(decoder_gen(sch, version, flexible, views=True), False))
    return codec.encode, codec.decode
