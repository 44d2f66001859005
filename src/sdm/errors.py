"""The SDM exception hierarchy.

Every error SDM raises derives from :class:`SDMError` and, where one fits, from the
matching builtin as well, so ``except KeyError`` keeps working in user code that does
not know about SDM.  In an MPI job an error detected on one rank is raised on *every*
rank as the same class with the same message (see :mod:`sdm._collective`).
"""

from __future__ import annotations

__all__ = [
    "SDMError",
    "CatalogError",
    "CatalogUnavailableError",
    "CatalogVersionError",
    "CatalogDamagedError",
    "CalibrationError",
    "NotFoundError",
    "ApplicationNotFoundError",
    "RunNotFoundError",
    "AmbiguousRunError",
    "GroupNotFoundError",
    "DatasetNotFoundError",
    "StepNotFoundError",
    "StepExistsError",
    "GroupExistsError",
    "InvalidNameError",
    "InvalidArgumentError",
    "IndexOutOfRangeError",
    "QuerySyntaxError",
    "HintError",
    "UnsupportedDtypeError",
    "CompressionSpecError",
    "DistributionError",
    "LocalArrayError",
    "ConversionError",
    "ReadOnlyError",
    "CollectiveMismatchError",
    "StorageError",
    "IntegrityError",
    "CompressionBoundError",
    "RunStateError",
    "InternalError",
    "DumpCancelledError",
    "error_class",
]


class SDMError(Exception):
    """Base class of every SDM error.

    ``str(err)`` is always the plain message (``KeyError`` subclasses included).
    """

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # pickles cleanly between ranks
        return (type(self), (self.message,))


class CatalogError(SDMError, RuntimeError):
    """The metadata catalog failed or holds something inconsistent.

    ``errno`` is the operating system's error number when one is known (``errno.ENOSPC``
    when the disk under the catalog is full), otherwise ``None``.
    """

    def __init__(self, message: str = "", errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:
        return (type(self), (self.message, self.errno))


class CatalogUnavailableError(CatalogError, ConnectionError):
    """The catalog URL cannot be opened (bad URL, server down, no permission)."""


class CatalogVersionError(CatalogError):
    """The catalog was created by a schema version this SDM cannot use."""


class CatalogDamagedError(CatalogError):
    """The catalog exists but is empty, truncated or fails the engine's integrity check.

    SDM never replaces a damaged catalog by a new empty one: restore it from a backup
    (or rebuild it from the runs' meta-files) and open it again.
    """


class CalibrationError(SDMError, ValueError):
    """A calibration's fit is degenerate (a byte that costs nothing, a fit worse than a constant): not stored."""


class NotFoundError(SDMError, KeyError):
    """Something looked up by name or id does not exist."""


class ApplicationNotFoundError(NotFoundError):
    """No application of that name in the catalog."""


class RunNotFoundError(NotFoundError):
    """No run matches the id or attributes given."""


class GroupNotFoundError(NotFoundError):
    """The group is not defined in this run."""


class DatasetNotFoundError(NotFoundError):
    """The dataset is not defined in this group."""


class StepNotFoundError(NotFoundError):
    """The dataset was never written at that time step."""


class StepExistsError(SDMError, ValueError):
    """The step was already written and ``overwrite=True`` was not given."""


class GroupExistsError(SDMError, ValueError):
    """A group of that name already exists in the run with another definition."""


class InvalidNameError(SDMError, ValueError):
    """A user-given name cannot be used (empty, path separators, '..', control chars)."""


class InvalidArgumentError(SDMError, ValueError):
    """An argument has the wrong type or a value outside what SDM accepts (the message says what is expected)."""


class IndexOutOfRangeError(InvalidArgumentError, IndexError):
    """An integer index past the end of a dimension (``g["T"][99]`` of a dataset with fewer steps).

    An :class:`IndexError` as well, as numpy raises one, so ``except IndexError`` and
    Python's sequence protocol keep working.
    """


class QuerySyntaxError(InvalidArgumentError):
    """A search condition (``"nx>=32"``) that does not read as ``key<op>value``.

    ``text`` is the condition as given and ``position`` the index of the character where
    reading failed (``len(text)`` when something is missing at its end), so a command
    line can point at it.
    """

    def __init__(self, message: str = "", text: str = "", position: int = 0) -> None:
        super().__init__(message)
        self.text, self.position = text, position

    def __reduce__(self) -> tuple[type, tuple[str, str, int]]:
        return (type(self), (self.message, self.text, self.position))


class AmbiguousRunError(InvalidArgumentError, LookupError):
    """Several runs match and the caller did not say which (``run=ID`` or ``run="latest"``).

    The message lists them, newest first: id, creation time and attributes.
    """


class HintError(InvalidArgumentError):
    """An MPI-IO, SDM or planner hint has an unknown key or a value of the wrong form."""


class UnsupportedDtypeError(InvalidArgumentError):
    """A numpy dtype SDM cannot store exactly (objects, zero-size, unsupported kinds)."""


class CompressionSpecError(InvalidArgumentError):
    """A compression spec is unknown, not installed or unsuitable for the dataset's dtype (see :mod:`sdm.codecs`)."""


class DistributionError(SDMError, ValueError):
    """A data view does not fit the array or the communicator (gaps, overlaps, grid)."""


class LocalArrayError(SDMError, ValueError):
    """The local array handed to write/read does not match the data view."""


class ConversionError(LocalArrayError):
    """A local array's dtype cannot be converted to or from the dataset's stored dtype, or one of its
    values does not fit the target dtype (overflow, NaN or a fraction to an integer, ...) and the
    caller did not allow it with ``casting=`` (see :mod:`sdm.convert`)."""


class ReadOnlyError(SDMError, PermissionError):
    """A write was attempted on a session opened for reading."""


class CollectiveMismatchError(SDMError, RuntimeError):
    """Ranks made different collective calls (other dataset, step or group), gave different
    data views (kind or parameters) or opened a session with different arguments (mode,
    run, catalog, ...); raised on every rank with the same message."""


class StorageError(SDMError, OSError):
    """MPI-IO or the file system failed while moving bytes.

    ``errno`` is the operating system's error number when one is known (for example
    ``errno.ENOSPC`` for a full file system), otherwise ``None``.
    """

    def __init__(self, message: str = "", errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:
        return (type(self), (self.message, self.errno))


class IntegrityError(SDMError, ValueError):
    """Bytes read back do not match the checksum recorded at write time."""


class CompressionBoundError(SDMError, ValueError):
    """A lossy codec broke the error bound asked for; nothing of that write is recorded.

    Also raised when a lossy codec is handed values whose error it cannot bound (NaN, infinity).
    """


class RunStateError(SDMError, RuntimeError):
    """The run is in a state that forbids the request (for example open by a live writer)."""


class InternalError(SDMError, RuntimeError):
    """An unexpected exception inside SDM: a bug, not a bad input.

    Every bad input is refused by a more specific class; this one wraps anything else
    (with the original type, message and source line) so it still reaches every rank.
    Please report it with the message.
    """


class DumpCancelledError(SDMError, RuntimeError):
    """A nonblocking dump was not written because an earlier dump of the session failed (the message names it)."""


def error_class(name: str) -> type[SDMError]:
    """Return the SDM error class called *name* (used to re-raise across ranks).

    Parameters
    ----------
    name : str
        Class name as produced by ``type(err).__name__``.

    Returns
    -------
    type[SDMError]
        The class, or :class:`SDMError` when the name is unknown.
    """
    cls = globals().get(name)
    if isinstance(cls, type) and issubclass(cls, SDMError):
        return cls
    return SDMError
