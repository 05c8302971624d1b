"""Free-extent index of a pool: exact-length bins under a 64-ary bitmap tree, and
the parent blocks."""

from __future__ import annotations

from ..buffers import Buffer


class _SizeIndex:
    """A set of non-negative ints with "smallest member >= n" in O(log64 of the largest).

    A 64-ary tree of bitmaps: level 0 has one bit per member, each higher level one
    bit per non-empty word of the level below, and the top level is one word. Levels
    are added as larger members arrive (4 levels cover lengths below 2**24 granules,
    1 GiB at 64 bytes). Words are dict entries, so memory follows the number of
    members, not the size of the universe.
    """

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        self._levels: list[dict[int, int]] = [{}]

    def add(self, key: int) -> None:
        levels = self._levels
        while key >> (6 * len(levels)):
            # One level more; its single word has bit 0 set iff the old top word exists.
            levels.append({0: 1} if levels[-1] else {})
        for level in levels:
            word = key >> 6
            old = level.get(word, 0)
            level[word] = old | (1 << (key & 63))
            if old:
                return
            key = word

    def discard(self, key: int) -> None:
        for level in self._levels:
            word = key >> 6
            bits = level.get(word, 0) & ~(1 << (key & 63))
            if bits:
                level[word] = bits
                return
            level.pop(word, None)
            key = word

    def ceiling(self, key: int) -> int | None:
        """The smallest member >= ``key``, or None."""
        levels = self._levels
        depth, top = 0, len(levels)
        while depth < top:
            word = key >> 6
            shift = key & 63
            bits = levels[depth].get(word, 0) >> shift << shift
            if bits:
                key = (word << 6) | ((bits & -bits).bit_length() - 1)
                while depth:
                    depth -= 1
                    bits = levels[depth][key]
                    key = (key << 6) | ((bits & -bits).bit_length() - 1)
                return key
            key = word + 1
            depth += 1
        return None

    def max(self) -> int:
        """The largest member (0 when empty)."""
        key = 0
        for level in reversed(self._levels):
            bits = level.get(key)
            if bits is None:
                return 0
            key = (key << 6) | (bits.bit_length() - 1)
        return key


class _Block:
    __slots__ = ("end", "parent", "start")

    def __init__(self, parent: Buffer, start: int, end: int) -> None:
        self.parent = parent
        self.start = start
        self.end = end
