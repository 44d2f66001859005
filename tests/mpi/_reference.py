"""Independent numpy references for the MPI tests (no SDM code involved).

Each helper returns, for a rank, the global indices per dimension it should own,
computed from first principles, so the tests check SDM's layout instead of trusting it.
"""

from __future__ import annotations

import numpy as np


def global_array(shape, dtype="f8", order="C", seed=0):
    """A deterministic global array whose every element differs."""
    n = int(np.prod(shape))
    flat = (np.arange(n, dtype=np.float64) * 1.25 + seed).astype(dtype)
    return flat.reshape(shape, order=order)


def grid_coords(rank, grid):
    coords = []
    for g in reversed(grid):
        coords.append(rank % g)
        rank //= g
    return tuple(reversed(coords))


def block_indices(shape, grid, rank):
    coords = grid_coords(rank, grid)
    return [np.array_split(np.arange(n), p)[c] for n, p, c in zip(shape, grid, coords)]


def cyclic_indices(shape, grid, rank, blocks=1):
    coords = grid_coords(rank, grid)
    out = []
    b = blocks if isinstance(blocks, (list, tuple)) else [blocks] * len(shape)
    for n, p, c, bb in zip(shape, grid, coords, b):
        blocks_of_dim = [np.arange(s, min(s + bb, n)) for s in range(0, n, bb)]
        mine = blocks_of_dim[c::p]
        out.append(np.concatenate(mine) if mine else np.arange(0))
    return out


def local_from_global(G, idx, ghosts=0, order="C"):
    """Local array with ghost layers (filled with a sentinel) around G[idx]."""
    inner = G[np.ix_(*idx)]
    shape = tuple(s + 2 * ghosts for s in inner.shape)
    out = np.full(shape, 7, dtype=G.dtype, order=order)  # sentinel in the ghost cells
    sl = tuple(slice(ghosts, ghosts + s) for s in inner.shape)
    out[sl] = inner
    return out, sl


def catalog_counts(comm, url):
    """Catalog row counts read by rank 0 through its own connection, shared with all ranks."""
    import sdm

    counts = None
    if comm.Get_rank() == 0:
        cat = sdm.Catalog(url)
        counts = cat.counts()
        cat.close()
    return comm.bcast(counts)


def mix64(raw, itemsize):
    """The mix64-v2 checksum of a dataset's canonical bytes, from its definition.

    Words: little-endian unsigned, of the largest size in (8, 4, 2, 1) dividing the
    element size; word ``w`` at position ``p`` adds ``fmix64(w ^ (p*K + S))`` mod 2**64.
    """
    size = next(s for s in (8, 4, 2, 1) if itemsize % s == 0)
    words = np.frombuffer(bytes(raw), dtype=np.dtype(f"<u{size}")).astype(np.uint64)
    z = words ^ (np.arange(words.size, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x243F6A8885A308D3))
    for mult in (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53):
        z = (z ^ (z >> np.uint64(33))) * np.uint64(mult)
    z = z ^ (z >> np.uint64(33))
    return sum(int(v) for v in z) % (1 << 64)


def committed_bytes(comm, url, run_id, root):
    """Rank 0: {(dataset, step): the bytes of its committed write, read at the catalog's place}, shared.

    An error on rank 0 is raised on every rank (every rank reaches the broadcast).
    """
    from pathlib import Path

    import sdm

    out = None
    if comm.Get_rank() == 0:
        try:
            cat = sdm.Catalog(url)
            try:
                out = {(d, w.step): Path(root, w.path).read_bytes()[w.offset:w.offset + w.nbytes]
                       for _, d, w in cat.writes(run_id)}
            finally:
                cat.close()
        except Exception as exc:  # noqa: BLE001 - every rank must reach the bcast
            out = exc
    out = comm.bcast(out)
    if isinstance(out, Exception):
        raise out
    return out
