"""The MPI test plumbing itself (tests/mpi/conftest.py)."""

from __future__ import annotations

import os


def test_allgather_of_ranks(comm) -> None:
    assert comm.allgather(comm.Get_rank()) == list(range(comm.Get_size()))


def test_mpi_tmp_is_shared(comm, mpi_tmp) -> None:
    paths = comm.allgather(str(mpi_tmp))
    assert paths == [str(mpi_tmp)] * comm.Get_size()
    assert mpi_tmp.is_dir()
    # Every rank writes a file; after a barrier every rank sees all of them.
    (mpi_tmp / f"rank{comm.Get_rank()}").write_text(str(os.getpid()))
    comm.Barrier()
    assert sorted(p.name for p in mpi_tmp.iterdir()) == sorted(
        f"rank{r}" for r in range(comm.Get_size()))
