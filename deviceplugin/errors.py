"""The device plugin's errors: a refused allocation, and a plugin that cannot start."""

from __future__ import annotations

import grpc


class AllocationError(Exception):
    """A request the plugin cannot honour; becomes a gRPC error with this code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class SetupError(Exception):
    """The plugin cannot start; the message says why."""
