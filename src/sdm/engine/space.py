"""File space reserved ahead, so that most dumps need no reservation transaction (rank 0).

Every write goes to fresh space reserved through the catalog: the file's high-water mark
(``files.alloc_end``) is raised in one transaction, so two writers, in this job or in
another, never receive the same bytes.  A run that writes many small dumps would pay
that transaction for each; instead rank 0 reserves a *chunk* of a file at a time,
larger than the dump that needed it (at least :data:`FIRST_DUMPS` dumps' worth, then
doubling up to :data:`MAX_CHUNK` bytes), and hands the next dumps their offsets from it
without asking the catalog.

Crash safety is unchanged: space reserved and not written is what a crash between a
reservation and its commit leaves today.  The file is only extended as far as bytes
are written, so a chunk's unused part is reported by ``sdm verify`` as space reserved
past the file's end and given back by ``sdm gc``.  A session gives back its chunks'
unused parts when it closes, when the file's mark is still where its last chunk left
it (nobody reserved after it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["SpacePool", "FIRST_DUMPS", "MAX_CHUNK"]

FIRST_DUMPS = 8  #: a file's first chunk holds this many dumps like the one that asked for it
MAX_CHUNK = 256 << 20  #: chunks grow by doubling up to this many bytes (unless one dump needs more)


@dataclass
class _Chunk:
    next: int  # first byte not handed out
    end: int  # end of the chunk (the file's mark when it was reserved)
    size: int  # bytes of the last chunk reserved (the next one doubles it)


class SpacePool:
    """The reserved chunks of a group's files, by relative path (the same on every rank).

    Only rank 0 reserves (:meth:`take` with a transaction); it hands the state of every
    chunk a dump touched to the other ranks with the dump's offsets (:meth:`state`,
    :meth:`adopt`), so every rank holds the same chunks and a dump that fits in them
    (:meth:`covers`) takes its offsets on every rank alike, with no exchange.

    Parameters
    ----------
    reserve : callable
        ``reserve([(path, nbytes), ...]) -> [offset, ...]``: one catalog transaction that
        raises each file's mark by *nbytes* and returns where each reservation starts.
    """

    def __init__(self, reserve: Callable[[Sequence[tuple[str, int]]], Sequence[int]]) -> None:
        self._reserve = reserve
        self._chunks: dict[str, _Chunk] = {}

    def take(self, wanted: Sequence[tuple[str, int]]) -> list[int]:
        """Offsets for ``(path, nbytes)`` requests, in order: from the chunks, after at most one transaction.

        The requests of one file are consecutive in it, in the order given.
        """
        need: dict[str, int] = {}
        for path, nbytes in wanted:
            need[path] = need.get(path, 0) + int(nbytes)
        short = [(p, n) for p, n in need.items() if p not in self._chunks
                 or self._chunks[p].end - self._chunks[p].next < n]
        if short:  # one transaction for every file that needs a new chunk
            sizes = []
            for path, n in short:
                old = self._chunks.get(path)
                size = max(n, min(MAX_CHUNK, 2 * old.size if old is not None else FIRST_DUMPS * n))
                sizes.append(size)
            starts = self._reserve([(p, size) for (p, _), size in zip(short, sizes)])
            for (path, _), start, size in zip(short, starts, sizes):
                old = self._chunks.get(path)
                if old is not None and old.end == int(start):  # right after the old chunk: one chunk
                    old.end, old.size = int(start) + size, size
                else:  # another writer reserved in between: the old chunk's rest stays reserved (gc gives it back)
                    self._chunks[path] = _Chunk(int(start), int(start) + size, size)
        out = []
        for path, nbytes in wanted:
            chunk = self._chunks[path]
            out.append(chunk.next)
            chunk.next += int(nbytes)
        return out

    def peek(self, wanted: Sequence[tuple[str, int]]) -> list[int] | None:
        """The offsets :meth:`take` would give *wanted* from the chunks held, or None when it would need a
        transaction; nothing is taken."""
        need: dict[str, int] = {}
        out = []
        for path, nbytes in wanted:
            c = self._chunks.get(path)
            at = need.get(path, 0)
            if c is None or c.next + at + int(nbytes) > c.end:
                return None
            out.append(c.next + at)
            need[path] = at + int(nbytes)
        return out

    def state(self, path: str) -> tuple[int, int, int]:
        """``(next, end, size)`` of the chunk of *path* (zeros: none)."""
        c = self._chunks.get(path)
        return (c.next, c.end, c.size) if c is not None else (0, 0, 0)

    def adopt(self, path: str, state: Sequence[int]) -> None:
        """Hold the chunk of *path* that :meth:`state` gave on rank 0 (zeros: none)."""
        nxt, end, size = (int(x) for x in state)
        if end:
            self._chunks[path] = _Chunk(nxt, end, size)
        else:
            self._chunks.pop(path, None)

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        """The chunks held, comparable across ranks (a part of a dump's arguments: the same everywhere)."""
        return tuple(sorted((p, c.next, c.end) for p, c in self._chunks.items()))

    def unused(self) -> list[tuple[str, int, int]]:
        """``(path, first unused byte, chunk end)`` of every chunk with bytes not handed out."""
        return [(p, c.next, c.end) for p, c in self._chunks.items() if c.next < c.end]

    def clear(self) -> None:
        """Forget every chunk (after a truncation lowered the marks: the space is no longer this pool's)."""
        self._chunks.clear()
