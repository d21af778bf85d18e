"""The decoder's key table: raw __consumer_offsets record keys -> key ids,
looked up for many records at once with numpy (keys repeat: a group commits
the same partitions over and over)."""
from __future__ import annotations


import numpy as np


_MIX1 = np.uint64(0x9E3779B97F4A7C15)
_MIX2 = np.uint64(0xC2B2AE3D27D4EB4F)
_KEY_WORDS = 32  # keys of up to 256 bytes (length prefix included) go in the table
_WORD_MIX = np.random.default_rng(0x6B636F6F7264).integers(
    1 << 62, size=_KEY_WORDS, dtype=np.uint64) * np.uint64(2) + np.uint64(1)  # odd
# _WORD_MASKS[n, j]: the bytes of word j that belong to a key of n bytes
_WORD_MASKS = np.array([[(1 << (8 * max(0, min(8, n - 8 * j)))) - 1 for j in range(_KEY_WORDS)]
                        for n in range(8 * _KEY_WORDS + 1)], dtype=np.uint64)


class KeyTable:
    """Raw keys -> key ids, looked up for many records at once with numpy.

    A key's bytes are read as little-endian 64-bit words, zero past its end;
    words and length hash to 64 bits, looked up in a sorted array.  A hit is
    confirmed by comparing the length and every word with the key stored
    under that hash, so a collision can only make a miss (the caller then
    takes its dict), never a wrong id."""

    def __init__(self) -> None:
        self.hashes = np.empty(0, dtype=np.uint64)  # sorted
        self.slots = np.empty(0, dtype=np.int64)    # slot of each sorted hash
        self.kids = np.empty(0, dtype=np.int64)     # per slot: key id, length, words
        self.lens = np.empty(0, dtype=np.int64)
        self.words = np.zeros((0, 1), dtype=np.uint64)

    @staticmethod
    def words_of(buf: bytes, kpos, klen):
        """-> (hash, words (n x w), usable): the keys buf[kpos:kpos + klen]."""
        n = len(kpos)
        top = int(klen.max()) if n else 0
        w = max(1, min(_KEY_WORDS, (top + 7) // 8))
        usable = (klen > 0) & (klen <= 8 * w) & (kpos + 8 * w <= len(buf))
        if len(buf) < 8 * w or not usable.any():
            return np.zeros(n, dtype=np.uint64), np.zeros((n, w), dtype=np.uint64), \
                np.zeros(n, dtype=bool)
        items = np.ndarray(shape=(len(buf) - 8 * w + 1,), dtype=np.dtype((np.void, 8 * w)),
                           buffer=buf, strides=(1,))
        words = items[np.where(usable, kpos, 0)].view("<u8").reshape(n, w)
        lens = np.minimum(klen, 8 * w)
        if int(klen.min()) == top:
            words &= _WORD_MASKS[top, :w]
        else:
            words &= _WORD_MASKS[lens, :w]
        # words past a key are zero and add nothing: the hash does not depend on w
        h = lens.astype(np.uint64) * _MIX1
        for j in range(w):
            h += words[:, j] * _WORD_MIX[j]
        h ^= h >> np.uint64(29)
        h *= _MIX2
        return h, words, usable

    def lookup(self, h, words, klen, usable):
        """Key id per key, -1 where the table does not hold it."""
        n = len(h)
        if not len(self.hashes):
            return np.full(n, -1, dtype=np.int64)
        i = np.searchsorted(self.hashes, h)
        np.minimum(i, len(self.hashes) - 1, out=i)
        slot = self.slots[i]
        w = words.shape[1]
        if w > self.words.shape[1]:
            self._widen(w)
        same = usable & (self.hashes[i] == h) & (self.lens[slot] == klen) \
            & (self.words[slot, :w] == words).all(axis=1)
        return np.where(same, self.kids[slot], -1)

    def _widen(self, w: int) -> None:
        words = np.zeros((len(self.words), w), dtype=np.uint64)
        words[:, :self.words.shape[1]] = self.words
        self.words = words

    def add(self, h, words, klen, kids) -> None:
        """Add keys (distinct); one whose hash is already taken stays out."""
        h, first = np.unique(h, return_index=True)
        keep = ~np.isin(h, self.hashes)
        first = first[keep]
        if not first.size:
            return
        w = max(words.shape[1], self.words.shape[1])
        if w > self.words.shape[1]:
            self._widen(w)
        new = np.zeros((first.size, w), dtype=np.uint64)
        new[:, :words.shape[1]] = words[first]
        base = len(self.kids)
        self.kids = np.concatenate([self.kids, kids[first]])
        self.lens = np.concatenate([self.lens, klen[first]])
        self.words = np.concatenate([self.words, new])
        hashes = np.concatenate([self.hashes, h[keep]])
        slots = np.concatenate([self.slots, base + np.arange(first.size, dtype=np.int64)])
        order = np.argsort(hashes, kind="stable")
        self.hashes, self.slots = hashes[order], slots[order]
