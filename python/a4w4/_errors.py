"""Exceptions raised by a4w4: one class per a4w4_status code of the C API."""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """The C API's a4w4_status codes."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    SHAPE_MISMATCH = 2
    UNSUPPORTED_DTYPE = 3
    UNSUPPORTED_LAYOUT = 4
    K_NOT_MULTIPLE_OF_32 = 5
    BACKEND_NOT_COMPILED = 6
    NO_DEVICE = 7
    DEVICE_MISMATCH = 8
    KERNEL_NOT_FOUND = 9
    KERNEL_NOT_APPLICABLE = 10
    CONFIG = 11
    DEVICE = 12
    OUT_OF_MEMORY = 13
    INTERNAL = 14


class Error(Exception):
    """A failed a4w4 call. ``status`` is the C API's status code (:class:`Status`), ``message``
    the library's message naming the argument at fault."""

    status: Status = Status.INTERNAL

    def __init__(self, message: str, status: int | None = None) -> None:
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:  # a code this package does not know: keep the number
                self.status = status  # type: ignore[assignment]
        self.message = message
        name = self.status.name if isinstance(self.status, Status) else str(self.status)
        super().__init__(f"A4W4_ERROR_{name}: {message}")

    def __reduce__(self):  # picklable despite the two-argument constructor
        return (type(self), (self.message, int(self.status)))


class InvalidArgumentError(Error, ValueError):
    status = Status.INVALID_ARGUMENT


class ShapeMismatchError(Error, ValueError):
    status = Status.SHAPE_MISMATCH


class UnsupportedDtypeError(Error, TypeError):
    status = Status.UNSUPPORTED_DTYPE


class UnsupportedLayoutError(Error, ValueError):
    status = Status.UNSUPPORTED_LAYOUT


class KNotMultipleOf32Error(Error, ValueError):
    status = Status.K_NOT_MULTIPLE_OF_32


class BackendNotCompiledError(Error, RuntimeError):
    status = Status.BACKEND_NOT_COMPILED


class NoDeviceError(Error, RuntimeError):
    status = Status.NO_DEVICE


class DeviceMismatchError(Error, ValueError):
    status = Status.DEVICE_MISMATCH


class KernelNotFoundError(Error, LookupError):
    status = Status.KERNEL_NOT_FOUND


class KernelNotApplicableError(Error, ValueError):
    status = Status.KERNEL_NOT_APPLICABLE


class ConfigError(Error, RuntimeError):
    status = Status.CONFIG


class DeviceError(Error, RuntimeError):
    status = Status.DEVICE


class OutOfMemoryError(Error, MemoryError):
    status = Status.OUT_OF_MEMORY


class InternalError(Error, RuntimeError):
    status = Status.INTERNAL


_BY_STATUS: dict[int, type[Error]] = {
    cls.status: cls
    for cls in (
        InvalidArgumentError,
        ShapeMismatchError,
        UnsupportedDtypeError,
        UnsupportedLayoutError,
        KNotMultipleOf32Error,
        BackendNotCompiledError,
        NoDeviceError,
        DeviceMismatchError,
        KernelNotFoundError,
        KernelNotApplicableError,
        ConfigError,
        DeviceError,
        OutOfMemoryError,
        InternalError,
    )
}


def error_from_status(status: int, message: str) -> Error:
    """The exception for a C API status code (called by the extension on every failure)."""
    return _BY_STATUS.get(status, Error)(message, status)
