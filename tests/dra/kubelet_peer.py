"""The kubelet's side of a DRA driver: its plugin watcher, and its DRA client.

Like the kubelet, it finds the driver by a socket appearing in `<kubelet-dir>/plugins_registry/`,
asks it GetInfo, checks the answer (type DRAPlugin, a supported DRA version, an endpoint),
reports NotifyRegistrationStatus, and then calls NodePrepareResources and
NodeUnprepareResources on the endpoint. Raw gRPC with the codec in `dra_wire.py`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dra_wire as wire
import grpc

KNOWN_VERSIONS = ("v1.DRAPlugin",)  # what a 1.34+ kubelet speaks


def _raw(data: bytes) -> bytes:
    return data


class RegistrationRefused(AssertionError):
    """The driver's GetInfo answer is one the kubelet would refuse."""


class KubeletPeer:
    """Registers one DRA driver found in `<kubelet_dir>/plugins_registry/` and calls it."""

    def __init__(self, kubelet_dir: Path) -> None:
        self.registry = kubelet_dir / "plugins_registry"
        self.registry.mkdir(parents=True, exist_ok=True)
        self.info: dict[str, Any] = {}
        self._dra: grpc.Channel | None = None
        self._streams: list[Any] = []

    def find_socket(self, timeout: float = 20.0) -> Path:
        """The first socket in the registry directory (the plugin watcher's view)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sockets = [p for p in self.registry.iterdir() if p.is_socket()]
            if sockets:
                return sockets[0]
            time.sleep(0.05)
        raise AssertionError(f"no registration socket in {self.registry} within {timeout}s")

    def register(self, timeout: float = 20.0) -> dict[str, Any]:
        """GetInfo, check it as the kubelet does, NotifyRegistrationStatus(true)."""
        socket = self.find_socket(timeout)
        with grpc.insecure_channel(f"unix://{socket}") as channel:
            grpc.channel_ready_future(channel).result(timeout=timeout)
            info = wire.plugin_info(self._call(channel, wire.GET_INFO, b""))
            problem = self._problem(info)
            self._call(channel, wire.NOTIFY, wire.registration_status(not problem, problem))
        if problem:
            raise RegistrationRefused(problem)
        self.info = info
        self._dra = grpc.insecure_channel(f"unix://{info['endpoint']}")
        grpc.channel_ready_future(self._dra).result(timeout=timeout)
        return info

    @staticmethod
    def _problem(info: dict[str, Any]) -> str:
        if info["type"] != "DRAPlugin":
            return f"plugin type {info['type']!r} is not DRAPlugin"
        if not info["name"]:
            return "no driver name"
        if not any(v in KNOWN_VERSIONS for v in info["supported_versions"]):
            return f"none of the versions {info['supported_versions']} is supported"
        if not Path(info["endpoint"]).is_absolute() or not Path(info["endpoint"]).is_socket():
            return f"endpoint {info['endpoint']!r} is not a socket"
        return ""

    @staticmethod
    def _call(channel: grpc.Channel, method: str, request: bytes, timeout: float = 30.0) -> bytes:
        call = channel.unary_unary(method, request_serializer=_raw, response_deserializer=_raw)
        return call(request, timeout=timeout)

    def prepare(self, *claims: tuple[str, str, str]) -> dict[str, dict[str, Any]]:
        """NodePrepareResources for (namespace, uid, name) claims."""
        assert self._dra is not None, "register first"
        reply = self._call(self._dra, wire.PREPARE, wire.claims_request(list(claims)))
        return wire.prepare_response(reply)

    def unprepare(self, *claims: tuple[str, str, str]) -> dict[str, str]:
        """NodeUnprepareResources for (namespace, uid, name) claims."""
        assert self._dra is not None, "register first"
        reply = self._call(self._dra, wire.UNPREPARE, wire.claims_request(list(claims)))
        return wire.unprepare_response(reply)

    def watch_health(self, version: str = "v1") -> Iterator[dict[tuple[str, str], Any]]:
        """NodeWatchResources: each device-health message the driver streams."""
        assert self._dra is not None, "register first"
        method = wire.WATCH_HEALTH.format(version=version)
        call = self._dra.unary_stream(method, request_serializer=_raw, response_deserializer=_raw)
        self._streams.append(stream := call(b"", timeout=60))
        for message in stream:
            yield wire.health_response(message)

    def close(self) -> None:
        """Close the DRA channel."""
        for stream in self._streams:
            stream.cancel()
        if self._dra is not None:
            self._dra.close()
            self._dra = None
