"""Decoding __consumer_offsets record batches straight into Arrow batches
(RecordBatchBuilder).  Beside it, by job: segments.py walks the segment
files and feeds it, key_table.py is its numpy key lookup, group_rows.py
turns group records into rows.

No Spark here: the data source's readers call this in executors, and the
benchmark and tests call it directly.

A segment is walked batch by batch in chunks (a segment can be a gigabyte).
Each record becomes one row of `schema.RECORDS`.  Keys and values are
decoded with kcoord's own codec (`coordinator_records`), with shortcuts
that do not change a result:

* one Python loop walks a chunk's batch headers and checks the CRCs; the
  uncompressed data batches it finds are then parsed together, column-wise
  with numpy (`_parse_fast`): record boundaries record index by record
  index across all batches, then every field of every record at once;
* keys repeat (one group commits the same partitions over and over), so a
  key is decoded once with the codec and then recognised by its raw bytes:
  the column-wise parse looks keys up in a numpy hash table whose hits are
  confirmed byte for byte (`KeyTable`);
* an OffsetCommitValue v3 with empty metadata (what Kafka and kcoord write
  for almost every commit) has a fixed 24-byte layout, so those values are
  collected and unpacked together with numpy; any other value goes through
  the codec.

A batch the column-wise parse does not take whole (a record with headers, a
value that is neither 24 bytes nor a tombstone, a group record, a key the
codec rejects, a varint longer than two bytes, a record structure that does
not add up, more than 64 records) goes through the per-record loop
(`_plain_batch`), and compressed and control batches through `add_batch`;
rows stay in log order.  `RecordBatchBuilder(vectorized=False)` sends every
batch through the per-record loop: the tests check both give the same rows.

Bad input never raises.  It becomes a row with `error` set:

    crc_mismatch            batch CRC-32C wrong; the batch is skipped, the walk goes on
    corrupt_batch           a header or record structure that cannot be right; a bad
                            header ends the segment (the next batch cannot be found)
    truncated_tail          a partial batch at the end of a segment (a torn write)
    unknown_record_type     a key type this codec does not know (a newer Kafka's)
    unknown_record_version  a value version outside its record's known range
    undecodable_key / undecodable_value
"""
from __future__ import annotations

from array import array
import struct

import crc32c as _crc32c_mod
import numpy as np
import pyarrow as pa

from kcoord.protocol.compression import decompress
from kcoord.protocol.errors import CorruptRecordError, ProtocolError
from kcoord.protocol.messages.coordinator_records import (
    UnknownRecordTypeError,
    UnknownRecordVersionError,
    decode_record_key,
    decode_record_value,
)
from kcoord.protocol.records import (BATCH_HEADER, BATCH_HEADER_FIELDS, COMPRESSION_MASK, CONTROL,
                                     CRC_START, HEADER_SIZE, LOG_OVERHEAD, MAGIC_V2,
                                     MIN_BATCH_LENGTH, RECORDS_OFFSET, TIMESTAMP_TYPE_LOG_APPEND,
                                     TRANSACTIONAL, ZIGZAG1, header_struct, read_records,
                                     read_varint, read_varlong)


from .group_rows import (_metadata_array, _sparse, consumer_group_row, group_metadata_row)
from .key_table import KeyTable
from .schema import RECORD_FIELDS, arrow_schema

_crc32c = _crc32c_mod.crc32c
_NO_PID = -(1 << 63)  # producer id of an error row (a real batch's is -1 or more)
# OffsetCommitValue v3: version, offset, leader epoch, metadata length, commit time.
_V3_DTYPE = np.dtype([("version", ">i2"), ("offset", ">i8"), ("leader_epoch", ">i4"),
                      ("mlen", ">i2"), ("commit_ts", ">i8")])
assert _V3_DTYPE.itemsize == 24

# The batch walk reads base offset, batch length, magic, CRC and last offset delta.
_WALK = header_struct("base_offset", "batch_length", "magic", "crc", "last_offset_delta")
# The whole batch header (the protocol's layout), for numpy to read at every
# batch start at once.
_NP_TYPE = {"q": ">i8", "i": ">i4", "h": ">i2", "b": "i1", "I": ">u4"}
_BATCH_HEAD = np.dtype([(name, _NP_TYPE[code]) for name, code in BATCH_HEADER_FIELDS])
assert _BATCH_HEAD.itemsize == HEADER_SIZE
# What add_chunk does with a batch.
_FAST, _PLAIN, _GENERAL, _BAD_CRC = 0, 1, 2, 3
# Batches with more records go through the per-record loop: the column-wise
# parse takes one numpy step per record index.
_FAST_MAX_COUNT = 64

DEFAULT_BATCH_ROWS = 1 << 17


# ------------------------------------------------------------ the builder


class RecordBatchBuilder:
    """Collects decoded rows for one (log partition, segment) and emits Arrow batches.

    Rows are kept as a few flat arrays: per record only its key id and
    whether it has a 24-byte offset-commit value (kept aside, in row order:
    arrays from the column-wise parse, bytes from the per-record loop);
    offsets and timestamps come from per-batch bases plus the (rare) records
    whose deltas are not the plain 0, 1, 2, ... and 0.
    """

    def __init__(self, topic_names: dict | None = None, columns: list[str] | None = None,
                 record_types: frozenset | None = None, vectorized: bool = True) -> None:
        self.record_types = record_types
        # False: every uncompressed data batch takes the per-record loop (`_plain_batch`),
        # the fallback of the vectorized path; tests compare the two.
        self.vectorized = vectorized
        full = arrow_schema("records+")
        self.full_schema = full
        self.columns = list(columns) if columns else [name for name, _ in RECORD_FIELDS]
        unknown = [c for c in self.columns if c not in full.names]
        if unknown:
            raise ValueError(f"unknown kcoord_offsets columns: {unknown}")
        self.schema = pa.schema([full.field(c) for c in self.columns])
        self._ckeys: dict[bytes, int] = {}    # raw offset-commit key -> key id
        self._okeys: dict[bytes, int] = {}    # raw key of any other record type -> key id
        self._k_type: list = []
        self._k_group: list = []
        self._k_topic: list = []
        self._k_partition: list = []
        self._k_member: list = []
        self._k_arrays = None  # Arrow versions of the key tables, rebuilt when they grow
        self._table = KeyTable()  # offset-commit keys for the column-wise parse
        self.topic_names = topic_names if topic_names is not None else {}  # topic id -> name
        self.log_partition = 0
        self.segment = 0
        self._reset()

    def _reset(self) -> None:
        self.kids = array("i")         # key id per row, -1 when the row has no decoded key
        # per row: 0 no 24-byte value, 1 its value is in fast_vals, 2 in plain_vals
        self.vkind = array("b")
        self.fast_vals: list = []          # 24-byte values of the column-wise parse (numpy V24)
        self.plain_vals = bytearray()      # 24-byte values of the per-record loop
        # per batch (or per error row): first row, rows, base offset/timestamp, producer
        # per batch: (first row, base offset, base timestamp, producer id, transactional);
        # a batch's rows run to the next batch's first row
        self.batches: list[tuple] = []
        self.batch_blocks: list = []  # earlier batches as (k, 5) int64 arrays, in order
        self.off_exc: list[tuple[int, int]] = []   # (row, offset delta - index in batch)
        self.ts_exc: list[tuple[int, int]] = []    # (row, timestamp delta)
        self.null_offset_rows: list[int] = []
        self.slow: dict[int, tuple] = {}  # row -> ("value", version, dict) / ("error", ...) / ...
        self.raw: dict[int, bytes] = {}   # row -> value bytes of a group record (types 2-8)
        self.tomb_rows: list[int] = []

    def __len__(self) -> int:
        return len(self.kids)

    # ------------------------------------------------------------ keys
    def _key(self, key: bytes, raw_key: bytes) -> tuple[int, int]:
        """-> (record type, key id), decoding the key with kcoord's codec.

        Remembered by `raw_key`: the key with its varint length prefix."""
        rtype, msg = decode_record_key(key)
        kid = len(self._k_group)
        self._k_type.append(rtype)
        self._k_group.append(msg.get("group", msg.get("group_id")))
        self._k_topic.append(msg.get("topic"))
        self._k_partition.append(msg.get("partition"))
        self._k_member.append(msg.get("member_id"))
        self._k_arrays = None
        (self._ckeys if rtype <= 1 else self._okeys)[bytes(raw_key)] = kid
        return rtype, kid

    # ------------------------------------------------------------ rows
    def _begin(self, offset, timestamp, pid, txn) -> None:
        self.batches.append((len(self.kids), offset, timestamp, pid, txn))

    def add_error(self, kind: str, detail: str, offset=None, timestamp=None,
                  record_type=None) -> None:
        row = len(self.kids)
        self._begin(-1 if offset is None else offset, -1 if timestamp is None else timestamp,
                    _NO_PID, -1)
        if offset is None:
            self.null_offset_rows.append(row)
        self.kids.append(-1)
        self.vkind.append(0)
        self.slow[row] = ("error", kind, detail, record_type)

    def add_batch(self, buf, pos: int, h, *, verify_crc: bool = True) -> None:
        """Decode the batch at buf[pos:] whose header tuple is h (its length already checked)."""
        end = pos + LOG_OVERHEAD + h[1]
        if verify_crc and _crc32c(memoryview(buf)[pos + CRC_START:end]) != h[4]:
            self.add_error("crc_mismatch",
                           f"batch at offset {h[0]} (log partition {self.log_partition}, segment "
                           f"{self.segment}) fails its CRC", offset=h[0], timestamp=h[8])
            return
        attrs = h[5]
        codec = attrs & COMPRESSION_MASK
        try:
            if codec:
                data = decompress(codec, memoryview(buf)[pos + HEADER_SIZE:end])
            else:
                data = buf[pos + HEADER_SIZE:end]
            if type(data) is not bytes:
                data = bytes(data)
        except Exception as exc:  # a codec error is corruption of this batch
            self.add_error("corrupt_batch", f"batch at offset {h[0]}: cannot decompress: {exc}",
                           offset=h[0], timestamp=h[8])
            return
        start_rows = len(self.kids)
        self._begin(h[0], h[8] if attrs & TIMESTAMP_TYPE_LOG_APPEND else h[7], h[9],
                    1 if attrs & TRANSACTIONAL else 0)
        try:
            if attrs & CONTROL:
                self._control_records(data, h, start_rows)
            else:
                self._records(data, h, start_rows)
        except (CorruptRecordError, IndexError) as exc:
            # Drop whatever this batch added: the batch as a whole is unreadable.
            self._rollback(start_rows)
            self.add_error("corrupt_batch", f"batch at offset {h[0]}: {exc or 'record truncated'}",
                           offset=h[0], timestamp=h[8])
            return

    def _rollback(self, rows: int) -> None:
        """Forget every row from `rows` on, and the batch they started."""
        del self.kids[rows:]
        plain = self.vkind[rows:].count(2)
        if plain:
            del self.plain_vals[len(self.plain_vals) - 24 * plain:]
        del self.vkind[rows:]
        for r in [r for r in self.slow if r >= rows]:
            del self.slow[r]
        for r in [r for r in self.raw if r >= rows]:
            del self.raw[r]
        for lst in (self.off_exc, self.ts_exc):
            while lst and lst[-1][0] >= rows:
                lst.pop()
        while self.tomb_rows and self.tomb_rows[-1] >= rows:
            self.tomb_rows.pop()
        while self.batches and self.batches[-1][0] >= rows:
            self.batches.pop()

    def _control_records(self, data: bytes, h, row: int) -> None:
        for i, (off_delta, ts_delta, key, _value) in enumerate(_walk(data, h)):
            if off_delta != i:
                self.off_exc.append((row, off_delta - i))
            if ts_delta:
                self.ts_exc.append((row, ts_delta))
            self.kids.append(-1)
            self.vkind.append(0)
            ctype = struct.unpack_from(">h", key, 2)[0] if key is not None and len(key) >= 4 else None
            self.slow[row] = ("control", ctype)
            row += 1

    def add_chunk(self, buf: bytes, pos: int, verify_crc: bool = True, min_offset: int = -1,
                  max_offset: int = 1 << 62) -> tuple[int, str]:
        """Decode every whole batch in buf from pos on.

        -> (position of the first batch not decoded, why it stopped): "more"
        (a partial batch or the end of buf), "corrupt" (a header that cannot be
        right; the rest of buf is unreadable), "done" (past max_offset).

        One Python loop walks the batch headers (length, magic, offsets) and
        checks the CRCs.  The uncompressed data batches found are then parsed
        together, column-wise with numpy (`_parse_fast`); a batch that path
        does not take whole (an odd record, a new key that is not an offset
        commit, a value that is not 24 bytes or a tombstone) goes through the
        per-record loop `_plain_batch`, and compressed and control batches
        through `add_batch`, each in its place in log order."""
        stop = len(buf)
        head = _WALK.unpack_from
        crc = _crc32c
        mv = memoryview(buf)
        starts: list[int] = []
        starts_append = starts.append
        crc_ok: list[bool] = []
        crc_append = crc_ok.append
        why = "more"
        while stop - pos >= HEADER_SIZE:
            base_off, blen, magic, stored, lod = head(buf, pos)
            if blen < MIN_BATCH_LENGTH or magic != MAGIC_V2 or lod < 0:
                why = "corrupt"
                break
            end = pos + LOG_OVERHEAD + blen
            if end > stop:
                break
            if base_off > max_offset:
                why = "done"
                break
            if base_off + lod >= min_offset:
                starts_append(pos)
                if verify_crc:
                    crc_append(crc(mv[pos + CRC_START:end]) == stored)
            pos = end
        if not starts:
            return pos, why
        n = len(starts)
        where = np.array(starts, dtype=np.int64)
        heads = np.ndarray(shape=(stop - HEADER_SIZE + 1,), dtype=_BATCH_HEAD, buffer=buf,
                           strides=(1,))[where]
        attrs = heads["attributes"].astype(np.int64)
        count = heads["records_count"].astype(np.int64)
        code = np.full(n, _PLAIN, dtype=np.int8)
        bad_crc = ~np.array(crc_ok, dtype=bool) if verify_crc else np.zeros(n, dtype=bool)
        general = (attrs & (CONTROL | COMPRESSION_MASK)) != 0
        code[general] = _GENERAL
        code[bad_crc] = _BAD_CRC
        rows = None
        if self.vectorized:
            cand = np.flatnonzero((code == _PLAIN) & (count >= 1) & (count <= _FAST_MAX_COUNT))
            if cand.size:
                ends = where[cand] + LOG_OVERHEAD + heads["batch_length"][cand].astype(np.int64)
                fast = self._parse_fast(buf, where[cand] + RECORDS_OFFSET, ends, count[cand])
                code[cand[fast[0]]] = _FAST
                rows = self._fast_rows(buf, fast, cand, heads)
        # Batches in log order: runs of parsed batches in bulk, the others one by one.
        prev = 0
        for j in np.flatnonzero(code != _FAST).tolist() + [n]:
            if j > prev:
                self._append_fast(rows, prev, j)
            if j == n:
                break
            prev = j + 1
            at = starts[j]
            h = BATCH_HEADER.unpack_from(buf, at)
            kind = code[j]
            if kind == _BAD_CRC:
                self.add_error("crc_mismatch",
                               f"batch at offset {h[0]} (log partition {self.log_partition}, "
                               f"segment {self.segment}) fails its CRC",
                               offset=h[0], timestamp=h[8])
            elif kind == _GENERAL:
                self.add_batch(buf, at, h, verify_crc=False)  # its CRC is checked above
            else:
                self._plain_batch(buf, at, h)
        return pos, why

    def _parse_fast(self, buf: bytes, rstart, bend, count):
        """Parse whole uncompressed batches column-wise.

        rstart, bend, count: per batch, where its records start and end and how
        many there are (1.._FAST_MAX_COUNT).  Record boundaries are found
        record index by record index across all batches at once; every field
        after that is read for all records together.  Varints of one or two
        bytes are taken (a longer one sends its batch to the per-record loop).

        -> (batch taken: bool per batch, first record of each batch (len + 1),
        then per record: key id, end position, tombstone, offset delta,
        timestamp delta).  A batch is taken only if each of its records is a
        known offset-commit key (its raw bytes registered by the codec), then a
        24-byte value or a tombstone, no headers, and the records fill the
        batch exactly; values are read in flush as for the per-record loop."""
        u8 = np.frombuffer(buf, dtype=np.uint8)
        u16 = np.ndarray(shape=(len(buf) - 1,), dtype="<u2", buffer=buf, strides=(1,))
        lim = len(buf) - 2  # last start of a two-byte read
        nb = len(count)
        first = np.zeros(nb + 1, dtype=np.int64)
        np.cumsum(count, out=first[1:])
        nrec = int(first[-1])
        rec_start = np.empty(nrec, dtype=np.int64)  # after the record's length varint
        rec_end = np.empty(nrec, dtype=np.int64)
        ok = np.ones(nb, dtype=bool)
        cur = rstart.copy()
        low = int(count.min())
        for i in range(int(count.max())):
            if i < low:  # every batch has a record i
                q = cur
                rows = first[:-1] + i
                length, s, good = _varints(u16, q, lim)
                e = s + length
                ok &= good & (length >= 6) & (e <= bend)
                cur = e
            else:
                act = np.flatnonzero(count > i)
                q = cur[act]
                rows = first[act] + i
                length, s, good = _varints(u16, q, lim)
                e = s + length
                ok[act] &= good & (length >= 6) & (e <= bend[act])
                cur[act] = e
            rec_start[rows] = s
            rec_end[rows] = e
        ok &= cur == bend
        # every field of every record; positions only grow, and a record must end
        # exactly where its length says, so a taken record never read past it
        ts_delta, q, g1 = _varints(u16, rec_start + 1, lim)  # after the attributes byte
        off_delta, q, g2 = _varints(u16, q, lim)
        kpos = q
        klen, q, g3 = _varints(u16, q, lim)
        q = q + klen
        kend = q
        vlen, q, g4 = _varints(u16, q, lim)
        tomb = vlen == -1
        full = vlen == 24
        q += np.where(full, 24, 0)
        rec_ok = g1 & g2 & g3 & g4 & (klen >= 0) & (tomb | full) \
            & (q + 1 == rec_end) & (u8[np.minimum(q, lim + 1)] == 0)  # no headers
        ok &= np.logical_and.reduceat(rec_ok, first[:-1])
        # keys: by their raw bytes (length prefix included), as the loop looks them up
        kid = np.full(nrec, -1, dtype=np.int64)
        sel = np.flatnonzero(np.repeat(ok, count))
        if sel.size:
            kid[sel] = self._key_ids(buf, kpos[sel], kend[sel], klen[sel])
            ok &= np.logical_and.reduceat(kid >= 0, first[:-1])
        return ok, first, kid, rec_end, tomb, off_delta, ts_delta

    def _key_ids(self, buf: bytes, kpos, kend, key_len):
        """Key id of each raw key buf[kpos:kend] (numpy arrays; key_len: the lengths its
        prefixes give), -1 if not an offset commit.

        Column-wise through the key table; keys it misses (new ones, or ones it
        cannot hold) go through the dict the per-record loop uses, and new
        offset-commit keys are decoded once with the codec and added to both."""
        table = self._table
        klen = kend - kpos
        h, words, usable = table.words_of(buf, kpos, klen)
        kid = table.lookup(h, words, klen, usable)
        miss = np.flatnonzero(kid < 0)
        # New keys: one record of each distinct hash, from a growing sample of the
        # misses, is resolved and added; then the misses are looked up again.
        tried = np.empty(0, dtype=np.uint64)
        window = 4096
        while miss.size:
            sample = miss[~np.isin(h[miss], tried)][:window] if tried.size else miss[:window]
            sample = sample[usable[sample]]
            if not sample.size:
                break
            hashes, first = np.unique(h[sample], return_index=True)
            tried = np.concatenate([tried, hashes])
            window *= 2
            one = sample[first]
            get = self._ckeys.get
            got = np.array(
                [get(buf[a:b], -2) for a, b in zip(kpos[one].tolist(), kend[one].tolist())],
                dtype=np.int64)
            for i in np.flatnonzero(got == -2).tolist():
                r = one[i]
                got[i] = self._commit_key(buf[int(kpos[r]):int(kend[r])], int(key_len[r]))
            keep = got >= 0
            if keep.any():
                one = one[keep]
                table.add(h[one], words[one], klen[one], got[keep])
                kid[miss] = table.lookup(h[miss], words[miss], klen[miss], usable[miss])
                miss = miss[kid[miss] < 0]
        if miss.size:  # not in the table: keys it cannot hold, collisions, other types
            get = self._ckeys.get
            spans = list(zip(kpos[miss].tolist(), kend[miss].tolist(), key_len[miss].tolist()))
            got = [get(buf[a:b], -2) for a, b, _ in spans]
            if -2 in got:
                new = {}
                for i, (a, b, n) in enumerate(spans):
                    if got[i] == -2:
                        raw = buf[a:b]
                        if raw not in new:
                            new[raw] = self._commit_key(raw, n)
                        got[i] = new[raw]
            kid[miss] = got
        return kid

    def _commit_key(self, raw_key: bytes, klen: int) -> int:
        """Key id of an offset-commit key not seen yet, or -1 (any other key, or one the
        codec rejects: the per-record loop then makes the row)."""
        if raw_key in self._okeys:
            return -1
        try:
            rtype, kid = self._key(raw_key[len(raw_key) - klen:], raw_key)
        except ProtocolError:  # includes UnknownRecordTypeError
            return -1
        return kid if rtype <= 1 else -1

    def _fast_rows(self, buf: bytes, fast, cand, heads) -> dict:
        """What _append_fast copies, for all parsed batches of the chunk at once."""
        ok, first, kid, rec_end, tomb, off_delta, ts_delta = fast
        counts = np.diff(first)
        index = np.arange(len(kid), dtype=np.int64) - np.repeat(first[:-1], counts)
        h = heads[cand]
        attrs = h["attributes"].astype(np.int64)
        log_append = (attrs & TIMESTAMP_TYPE_LOG_APPEND) != 0
        off_rows = np.flatnonzero(off_delta != index)
        ts_rows = np.flatnonzero((ts_delta != 0) & ~np.repeat(log_append, counts))
        block = np.empty((len(cand), 5), dtype=np.int64)
        block[:, 0] = first[:-1]
        block[:, 1] = h["base_offset"]
        block[:, 2] = np.where(log_append, h["max_timestamp"], h["base_timestamp"])
        block[:, 3] = h["producer_id"]
        block[:, 4] = (attrs & TRANSACTIONAL) != 0
        return {
            "cand": cand, "first": first, "block": block,
            "kids": kid.astype(np.int32), "vkind": np.where(tomb, 0, 1).astype(np.int8),
            "tombs": tomb, "vals": _items24(buf)[np.clip(rec_end - 25, 0, len(buf) - 24)],
            "tomb": np.flatnonzero(tomb), "off": (off_rows, (off_delta - index)[off_rows]),
            "ts": (ts_rows, ts_delta[ts_rows].astype(np.int64)),
        }

    def _append_fast(self, rows: dict, b0: int, b1: int) -> None:
        """Rows of the parsed batches b0..b1-1 (indices into the chunk's batches)."""
        first = rows["first"]
        c0, c1 = np.searchsorted(rows["cand"], [b0, b1]).tolist()  # all of them are in cand
        r0, r1 = int(first[c0]), int(first[c1])
        shift = len(self.kids) - r0  # row = record index in the chunk + shift
        self.kids.frombytes(rows["kids"][r0:r1].tobytes())
        self.vkind.frombytes(rows["vkind"][r0:r1].tobytes())
        vals = rows["vals"][r0:r1]
        tomb = rows["tomb"]
        if tomb.size:
            vals = vals[~rows["tombs"][r0:r1]]
            i0, i1 = np.searchsorted(tomb, [r0, r1]).tolist()
            self.tomb_rows.extend((tomb[i0:i1] + shift).tolist())
        for name, out in (("off", self.off_exc), ("ts", self.ts_exc)):
            at, delta = rows[name]
            if at.size:
                i0, i1 = np.searchsorted(at, [r0, r1]).tolist()
                if i1 > i0:
                    out.extend(zip((at[i0:i1] + shift).tolist(), delta[i0:i1].tolist()))
        block = rows["block"][c0:c1].copy()
        block[:, 0] += shift
        if self.batches:
            self.batch_blocks.append(np.array(self.batches, dtype=np.int64).reshape(-1, 5))
            self.batches = []
        self.batch_blocks.append(block)
        self.fast_vals.append(vals)

    def _plain_batch(self, buf: bytes, pos: int, h) -> None:
        """One uncompressed data batch (CRC checked), record by record, in buf."""
        base_off = h[0]
        attrs = h[5]
        row = len(self.kids)
        self.batches.append((row, base_off, h[8] if attrs & TIMESTAMP_TYPE_LOG_APPEND else h[7],
                             h[9], 1 if attrs & TRANSACTIONAL else 0))
        try:
            self._records_in(buf, pos + HEADER_SIZE, pos + LOG_OVERHEAD + h[1], h, row)
        except (CorruptRecordError, IndexError) as exc:
            self._rollback(row)
            self.add_error("corrupt_batch",
                           f"batch at offset {base_off}: {exc or 'record truncated'}",
                           offset=base_off, timestamp=h[8])

    def _records(self, data: bytes, h, row: int) -> None:
        """The records of a decompressed batch body."""
        self._records_in(data, 0, len(data), h, row)

    def _records_in(self, data: bytes, pos: int, end: int, h, row: int) -> None:
        """The hot loop: one pass over the records of an uncompressed batch
        body, data[pos:end] (in place in a chunk, or a decompressed body).

        Not records.read_records: this loop keeps only what the columns need
        (a known commit key is recognised by its raw bytes and its 24-byte
        value appended whole, deltas equal to their index are not stored),
        which a reader handing back every field cannot do as cheaply."""
        count = h[12]
        if count < 0 or count * 7 > end - pos:
            raise CorruptRecordError(f"record count {count} impossible for {end - pos} bytes")
        log_append = h[5] & TIMESTAMP_TYPE_LOG_APPEND
        zz1 = ZIGZAG1
        varint = read_varint
        ckeys_get = self._ckeys.get
        kids_append = self.kids.append
        vkind_append = self.vkind.append
        vals = self.plain_vals
        off_exc = self.off_exc
        ts_exc = self.ts_exc
        for i in range(count):
            b = data[pos]
            if b < 0x80:
                length = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                length = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                length, pos = varint(data, pos)
            rec_end = pos + length
            b = data[pos + 1]  # after the attributes byte
            if b == 0:
                pos += 2
            else:
                if b < 0x80:
                    ts_delta = zz1[b]
                    pos += 2
                else:
                    ts_delta, pos = read_varlong(data, pos + 1)
                if not log_append:
                    ts_exc.append((row + i, ts_delta))
            b = data[pos]
            if b < 0x80:
                off_delta = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                z = (b & 0x7F) | (c << 7)
                off_delta = (z >> 1) ^ -(z & 1)
                pos += 2
            else:
                off_delta, pos = varint(data, pos)
            if off_delta != i:
                off_exc.append((row + i, off_delta - i))
            # The common record: a known commit key, a 24-byte value and no
            # headers.  The key is looked up by its raw bytes (length prefix
            # included) as registered by a full parse of the same bytes, so a
            # hit is exact.  (A record that overruns `end` makes the loop
            # finish elsewhere than `end`: the batch is then dropped whole.)
            if rec_end - 26 >= pos and data[rec_end - 1] == 0 and data[rec_end - 26] == 48:
                kid = ckeys_get(data[pos:rec_end - 26])
                if kid is not None:
                    kids_append(kid)
                    vkind_append(2)
                    vals += data[rec_end - 25:rec_end - 1]
                    pos = rec_end
                    continue
            self._general_record(data, pos, rec_end, length, row + i, end)
            pos = rec_end
        if pos != end:
            raise CorruptRecordError(f"{end - pos} bytes left over after {count} records")

    def _general_record(self, data: bytes, pos: int, rec_end: int, length: int, row: int,
                        limit: int | None = None) -> None:
        """Any record the fast path does not take: parse key and value in full."""
        if length < 6 or rec_end > (len(data) if limit is None else limit):
            raise CorruptRecordError(f"record length {length} out of range")
        kstart = pos
        n, pos = read_varint(data, pos)
        if n >= 0:
            key = data[pos:pos + n]
            pos += n
        else:
            key = None
        raw_key = data[kstart:pos]
        vlen, pos = read_varint(data, pos)
        vstart = pos
        if vlen > 0:
            pos += vlen
        if pos >= rec_end:
            raise CorruptRecordError("record fields overrun the record")
        no_headers = data[pos] == 0 and pos + 1 == rec_end
        if not no_headers:
            _skip_headers(data, pos, rec_end)  # coordinator records carry none
        if key is None:
            self.kids.append(-1)
            self.vkind.append(0)
            self.slow[row] = ("error", "undecodable_key", "record with a null key", None)
            return
        kid = self._ckeys.get(raw_key)
        if kid is not None:
            rtype = self._k_type[kid]
        else:
            kid = self._okeys.get(raw_key)
            if kid is not None:
                rtype = self._k_type[kid]
            else:
                try:
                    rtype, kid = self._key(key, raw_key)
                except UnknownRecordTypeError as exc:
                    self.kids.append(-1)
                    self.vkind.append(0)
                    self.slow[row] = ("error", "unknown_record_type", str(exc), exc.record_type)
                    return
                except ProtocolError as exc:
                    self.kids.append(-1)
                    self.vkind.append(0)
                    self.slow[row] = ("error", "undecodable_key", str(exc), None)
                    return
        self.kids.append(kid)
        if vlen < 0:
            self.vkind.append(0)
            self.tomb_rows.append(row)
        elif rtype <= 1 and vlen == 24 and no_headers:
            self.vkind.append(2)
            self.plain_vals += data[vstart:vstart + 24]
        else:
            self.vkind.append(0)
            raw = data[vstart:vstart + vlen]
            self.slow[row] = self._slow_value(rtype, raw)
            if rtype >= 2:
                self.raw[row] = raw

    @staticmethod
    def _slow_value(rtype: int, value: bytes):
        try:
            version, msg = decode_record_value(rtype, value)
        except UnknownRecordVersionError as exc:
            version = struct.unpack_from(">h", value)[0] if len(value) >= 2 else None
            return ("error", "unknown_record_version", str(exc), rtype, version)
        except ProtocolError as exc:
            return ("error", "undecodable_value", str(exc), rtype)
        return ("value", version, msg)

    # ------------------------------------------------------------ output
    def _key_arrays(self):
        if self._k_arrays is None:
            self._k_arrays = (
                np.array(self._k_type + [-1], dtype=np.int16),
                pa.array(self._k_group + [None], pa.string()),
                pa.array(self._k_topic + [None], pa.string()),
                pa.array(self._k_partition + [None], pa.int32()),
                pa.array(self._k_member + [None], pa.string()),
                any(m is not None for m in self._k_member),
            )
        return self._k_arrays

    def flush(self) -> pa.RecordBatch | None:
        n = len(self.kids)
        if n == 0:
            self._reset()
            return None
        slow = self.slow
        k_type, k_group, k_topic, k_partition, k_member, any_member = self._key_arrays()
        kid = np.frombuffer(self.kids, dtype=np.int32).astype(np.int64)
        kid[kid < 0] = len(k_type) - 1
        types = k_type[kid]

        # offsets and timestamps: per-batch bases, the index in the batch, exceptions
        b = np.concatenate(self.batch_blocks
                           + [np.array(self.batches, dtype=np.int64).reshape(-1, 5)])
        first = b[:, 0]
        counts = np.diff(np.append(first, n))
        starts = np.repeat(first, counts)
        offsets = np.repeat(b[:, 1], counts)
        offsets += np.arange(n, dtype=np.int64) - starts
        for row, delta in self.off_exc:
            offsets[row] += delta
        timestamps = np.repeat(b[:, 2], counts)
        for row, delta in self.ts_exc:
            timestamps[row] += delta
        pids = np.repeat(b[:, 3], counts)
        pid_valid = pids != _NO_PID
        txn = np.repeat(b[:, 4] == 1, counts)

        # 24-byte commit values, checked for the v3 layout
        vkind = np.frombuffer(self.vkind, dtype=np.int8)
        fast = vkind != 0
        if self.fast_vals and not self.plain_vals and fast.all():
            raw = np.concatenate(self.fast_vals)
        else:
            raw = np.zeros(n, dtype="V24")
            if self.fast_vals:
                raw[vkind == 1] = np.concatenate(self.fast_vals)
            if self.plain_vals:
                raw[vkind == 2] = np.frombuffer(bytes(self.plain_vals), dtype="V24")
        vals = raw.view(_V3_DTYPE)
        good = fast & (vals["version"] == 3) & (vals["mlen"] == 0)
        for row in np.flatnonzero(fast & ~good).tolist():
            slow[row] = self._slow_value(int(types[row]), raw[row].tobytes())

        tomb = np.zeros(n, dtype=bool)
        if self.tomb_rows:
            tomb[self.tomb_rows] = True
        has_value = good.copy()
        version = np.where(good, 3, 0).astype(np.int16)
        version_valid = good.copy()
        committed = vals["offset"].astype(np.int64)
        leader_epoch = vals["leader_epoch"].astype(np.int32)
        commit_ts = vals["commit_ts"].astype(np.int64)
        expire = np.full(n, -1, dtype=np.int64)
        has_expire = np.zeros(n, dtype=bool)
        is_err = np.zeros(n, dtype=bool)
        metadata = error = detail = control = None
        gm_rows: dict[int, dict] = {}
        cg_rows: dict[int, dict] = {}
        for row, item in slow.items():
            kind = item[0]
            if kind == "value":
                _, ver, msg = item
                rtype = int(types[row])
                version[row] = ver
                version_valid[row] = True
                if rtype <= 1:
                    has_value[row] = True
                    committed[row] = msg["offset"]
                    leader_epoch[row] = msg.get("leader_epoch", -1) if ver >= 3 else -1
                    commit_ts[row] = msg["commit_timestamp"]
                    if ver == 1:
                        expire[row] = msg.get("expire_timestamp", -1)
                        has_expire[row] = True
                    if msg.get("metadata"):
                        if metadata is None:
                            metadata = {}
                        metadata[row] = msg["metadata"]
                elif rtype == 2:
                    gm_rows[row] = msg
                else:
                    cg_rows[row] = self._consumer_group(rtype, msg)
            elif kind == "control":
                if control is None:
                    control = {}
                control[row] = item[1]
            else:  # error
                if error is None:
                    error, detail = {}, {}
                is_err[row] = True
                error[row] = item[1]
                detail[row] = item[2]
                if len(item) > 3 and item[3] is not None:
                    types[row] = item[3]
                if len(item) > 4 and item[4] is not None:
                    version[row] = item[4]
                    version_valid[row] = True
        known_type = types >= 0
        kid_pa = pa.array(kid)
        off_null = None
        if self.null_offset_rows:
            off_null = np.zeros(n, dtype=bool)
            off_null[self.null_offset_rows] = True
        no_value = ~has_value  # Arrow masks: True = null

        cols = {
            "log_partition": lambda: pa.array(np.full(n, self.log_partition, dtype=np.int32)),
            # null when the records came over the wire (no segment file)
            "segment": lambda: (pa.nulls(n, pa.int64()) if self.segment is None
                                else pa.array(np.full(n, self.segment, dtype=np.int64))),
            "offset": lambda: pa.array(offsets, mask=off_null),
            "timestamp": lambda: pa.array(timestamps, mask=off_null),
            "record_type": lambda: pa.array(types, mask=~known_type),
            "value_version": lambda: pa.array(version, mask=~version_valid),
            "tombstone": lambda: pa.array(tomb, mask=~known_type | is_err),
            "producer_id": lambda: pa.array(pids, mask=~pid_valid),
            "transactional": lambda: pa.array(txn, mask=~pid_valid),
            "control_type": lambda: _sparse(control, n, pa.int16()),
            "group": lambda: k_group.take(kid_pa),
            "topic": lambda: k_topic.take(kid_pa),
            "partition": lambda: k_partition.take(kid_pa),
            "member_id": lambda: (k_member.take(kid_pa) if any_member
                                  else pa.nulls(n, pa.string())),
            "committed_offset": lambda: pa.array(committed, mask=no_value),
            "leader_epoch": lambda: pa.array(leader_epoch, mask=no_value),
            "metadata": lambda: _metadata_array(metadata, has_value, n),
            "commit_timestamp": lambda: pa.array(commit_ts, mask=no_value),
            "expire_timestamp": lambda: pa.array(expire, mask=~has_expire),
            "group_metadata": lambda: _sparse(
                gm_rows, n, self.full_schema.field("group_metadata").type, group_metadata_row),
            "consumer_group": lambda: _sparse(
                cg_rows, n, self.full_schema.field("consumer_group").type),
            "error": lambda: _sparse(error, n, pa.string()),
            "raw_value": lambda: _sparse(self.raw, n, pa.binary()),
            "error_detail": lambda: _sparse(detail, n, pa.string()),
        }
        arrays = [cols[name]() for name in self.columns]
        self._reset()
        out = pa.RecordBatch.from_arrays(arrays, schema=self.schema)
        if self.record_types is not None:
            out = out.filter(pa.array(np.isin(types, list(self.record_types))))
            if out.num_rows == 0:
                return None
        return out

    def _consumer_group(self, rtype: int, msg: dict) -> dict:
        return consumer_group_row(rtype, msg, self.topic_names)


def _items24(buf: bytes):
    """A numpy view of buf with one 24-byte item starting at every byte position."""
    return np.ndarray(shape=(max(0, len(buf) - 23),), dtype=np.dtype("V24"), buffer=buf,
                      strides=(1,))


def _varint_tables():
    """For every two bytes (little-endian uint16) at a varint: its value and its size
    (1 or 2 bytes; 0 when it is longer)."""
    w = np.arange(1 << 16, dtype=np.int64)
    b0, b1 = w & 0xFF, w >> 8
    one = b0 < 0x80
    z = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    return ((z >> 1) ^ -(z & 1)).astype(np.int32), \
        np.where(one, 1, np.where(b1 < 0x80, 2, 0)).astype(np.int8)


_VARINT_VALUE, _VARINT_SIZE = _varint_tables()


def _varints(u16, q, lim: int):
    """Zigzag varints of one or two bytes at positions q (numpy), read through u16, a
    little-endian uint16 view with one item at every byte position.

    -> (values, positions after them, ok: False where a varint is longer)."""
    w = u16[np.minimum(q, lim)]
    size = _VARINT_SIZE[w]
    return _VARINT_VALUE[w], q + size, size != 0


def _skip_headers(data, pos: int, rec_end: int) -> None:
    nh, pos = read_varint(data, pos)
    if nh < 0:
        raise CorruptRecordError(f"header count {nh}")
    for _ in range(nh):
        n, pos = read_varint(data, pos)
        if n < 0:
            raise CorruptRecordError("header key length")
        pos += n
        n, pos = read_varint(data, pos)
        if n > 0:
            pos += n
    if pos != rec_end:
        raise CorruptRecordError("record headers do not match the record length")


def _walk(data: bytes, h):
    """(offset delta, timestamp delta, key, value) of each record: the plain
    path, through the protocol's one record reader (records.read_records)."""
    records = read_records(data, h[12])
    log_append = h[5] & TIMESTAMP_TYPE_LOG_APPEND
    return [(r[0], 0 if log_append else r[1], r[2], r[3]) for r in records]
