"""Ember's exceptions: one class per EMBER_E* code, all derived from ember.Error.

Every exception carries ``code`` (the negative C return code) and ``detail`` (the
store's error detail for corruption and I/O errors, else ``ember_strerror``'s text).
"""

from __future__ import annotations

import errno as _errno
import os as _os

__all__ = [
    "Error", "InvalidArgument", "NotFound", "RangeError", "TooBig", "NoMemory",
    "IOFailure", "Corrupt", "NotEmber", "VersionError", "Exists", "BusyError",
    "StateError", "Again", "NoSpace", "ReadOnly", "SystemError_", "from_code",
    "EINVAL", "ENOTFOUND", "ERANGE", "ETOOBIG", "ENOMEM", "EIO", "ECORRUPT",
    "ENOTEMBER", "EVERSION", "EEXIST", "EBUSY", "ESTATE", "EAGAIN", "ENOSPC",
    "EREADONLY",
]

# The codes of include/ember.h.
EINVAL = -30000
ENOTFOUND = -30001
ERANGE = -30002
ETOOBIG = -30003
ENOMEM = -30004
EIO = -30005
ECORRUPT = -30006
ENOTEMBER = -30007
EVERSION = -30008
EEXIST = -30009
EBUSY = -30010
ESTATE = -30011
EAGAIN = -30012
ENOSPC = -30013
EREADONLY = -30014


class Error(Exception):
    """Base of every Ember error. ``code``: the negative C code; ``detail``: text."""

    code: int = 0

    def __init__(self, code: int | None = None, detail: str = "") -> None:
        if code is None:
            code = type(self).code
        self.code = code
        self.detail = detail
        super().__init__(code, detail)

    def __str__(self) -> str:
        return "%s (%d)" % (self.detail, self.code) if self.detail else str(self.code)


class InvalidArgument(Error, ValueError):
    code = EINVAL


class NotFound(Error, KeyError):
    code = ENOTFOUND

    def __str__(self) -> str:  # KeyError's __str__ would quote the args tuple
        return Error.__str__(self)


class RangeError(Error):
    code = ERANGE


class TooBig(Error, ValueError):
    code = ETOOBIG


class NoMemory(Error, MemoryError):
    code = ENOMEM


class IOFailure(Error, OSError):
    code = EIO

    def __init__(self, code: int | None = None, detail: str = "") -> None:
        Error.__init__(self, code, detail)

    def __str__(self) -> str:
        return Error.__str__(self)


class Corrupt(Error):
    code = ECORRUPT


class NotEmber(Error):
    code = ENOTEMBER


class VersionError(Error):
    code = EVERSION


class Exists(Error):
    code = EEXIST


class BusyError(Error):
    code = EBUSY


class StateError(Error):
    code = ESTATE


class Again(Error):
    code = EAGAIN


class NoSpace(Error):
    code = ENOSPC


class ReadOnly(Error):
    code = EREADONLY


class SystemError_(Error, OSError):
    """A negative errno from the operating system; ``errno`` holds the positive value."""

    def __init__(self, code: int | None = None, detail: str = "") -> None:
        Error.__init__(self, code, detail)
        # OSError's attributes, set by hand: OSError.__init__ with (errno, text)
        # arguments would take the args tuple over.
        self.errno = -self.code if self.code < 0 else self.code
        self.strerror = detail or _os.strerror(self.errno)

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, "errno %d" % self.errno)
        return "[%s] %s" % (name, self.strerror)


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, NotFound, RangeError, TooBig, NoMemory, IOFailure, Corrupt,
    NotEmber, VersionError, Exists, BusyError, StateError, Again, NoSpace, ReadOnly)}


def from_code(code: int, detail: str = "") -> Error:
    """The exception for a C return code: its class above, or SystemError_ for a
    negative errno, or Error for a code this version does not know."""
    code = int(code)
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(code, detail)
    if -4096 < code < 0:
        return SystemError_(code, detail)
    return Error(code, detail)
