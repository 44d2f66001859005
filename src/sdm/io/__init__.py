"""I/O methods: one module per method, one interface (:class:`IOMethod`).

==========  ===========================================================================
posix       one independent call per segment (contiguous in file and memory): baseline
list        one independent call per rank, file regions listed in an hindexed type
datatype    one independent call per rank through the derived-datatype file view
sieving     few large reads/writes covering many regions, numpy extraction,
            turn-based read-modify-write between ranks that share bytes
collective  two-phase collective I/O through the file view (ROMIO aggregators)
servers     SDM's own two-phase I/O: I/O servers with buffers (PDS/PIO), Alltoallw
exchange    map arrays: rows exchanged to the owners of contiguous file blocks (plan
            built once per map), one contiguous collective call per access
remote-*    the archive tier's methods (backend ``objectstore``, :mod:`sdm.io.remote`):
            naive, sieving, collective, subfile, superfile
==========  ===========================================================================

``auto`` is not a method: the planner (:mod:`sdm.planner`) picks one of these (the
remote model, :mod:`sdm.planner.remote`, for bytes on the archive tier).
"""

from . import collective as _collective  # noqa: F401 - each import registers a method
from . import datatype as _datatype  # noqa: F401
from . import exchange as _exchange  # noqa: F401
from . import listio as _listio  # noqa: F401
from . import remote as _remote  # noqa: F401
from . import posix as _posix  # noqa: F401
from . import servers as _servers  # noqa: F401
from . import sieving as _sieving  # noqa: F401
from .base import IOMethod, Transfer, get_method, method_names, register

__all__ = ["IOMethod", "Transfer", "get_method", "method_names", "register"]
