"""A kubelet-side peer for the tests: the Registration service, a plugin client, pod-resources.

It speaks raw gRPC with the hand-written codec in `kubelet_wire.py`, the way a kubelet the project
has never seen would.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import kubelet_wire as wire


def _raw(data: bytes) -> bytes:
    return data


class FakeKubelet:
    """Serves v1beta1.Registration on <dir>/kubelet.sock and records Register calls."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.socket = directory / "kubelet.sock"
        self.registrations: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self.armed: dict[str, str] = {}  # resource -> "during" or "after"
        self.refused: list[str] = []  # endpoints it could not dial back

    def arm_restart(self, resource: str, when: str) -> None:
        """Restart at the next Register call for `resource`: `during` it (the call fails) or
        right `after` it (the call succeeds, then every socket is gone)."""
        assert when in ("during", "after")
        self.armed[resource] = when

    def _dial_back(self, endpoint: str) -> bool:
        """What a kubelet does first with a registration: connect to the plugin's socket."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            try:
                sock.connect(str(self.directory / endpoint))
            except OSError:
                return False
        return True

    def _register(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        decoded = wire.register_request(request)
        when = self.armed.pop(decoded["resource_name"], None)
        if when == "during":
            self._restart_under(self._server)
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet restarting")
        if not self._dial_back(decoded["endpoint"]):
            self.refused.append(decoded["endpoint"])
            context.abort(grpc.StatusCode.UNKNOWN, f"cannot dial plugin {decoded['endpoint']}")
        with self._cond:
            self.registrations.append(decoded)
            self._cond.notify_all()
        if when == "after":
            self._restart_under(self._server)
        return b""  # Empty

    def _restart_under(self, old: grpc.Server | None) -> None:
        """Restart from inside a call: stop the old server (the call in flight still gets its
        answer), remove every socket, and serve a new kubelet.sock."""
        self._server = None
        if old is not None:
            old.stop(grace=1.0)
            deadline = time.monotonic() + 1.0  # gRPC removes its socket file as it stops
            while self.socket.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
        self.socket.unlink(missing_ok=True)
        for entry in self.directory.iterdir():
            # The plugin may remove its own socket at the same moment (it saw
            # kubelet.sock go); the kubelet ignores that, and so does this.
            if entry.is_socket():
                entry.unlink(missing_ok=True)
        self.start()

    def start(self) -> None:
        """Create kubelet.sock and serve Registration on it."""
        handler = grpc.method_handlers_generic_handler(
            "v1beta1.Registration",
            {
                "Register": grpc.unary_unary_rpc_method_handler(
                    self._register, request_deserializer=_raw, response_serializer=_raw
                )
            },
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving and remove kubelet.sock."""
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None
        self.socket.unlink(missing_ok=True)

    def restart(self) -> None:
        """What a kubelet restart looks like: every socket removed, kubelet.sock recreated."""
        self.stop()
        for entry in self.directory.iterdir():
            # The plugin may remove its own socket at the same moment (it saw
            # kubelet.sock go); the kubelet ignores that, and so does this.
            if entry.is_socket():
                entry.unlink(missing_ok=True)
        self.start()

    def wait_registration(self, count: int = 1, timeout: float = 10.0) -> dict[str, Any]:
        """Block until `count` Register calls arrived; returns the latest."""
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.registrations) >= count, timeout)
            assert ok, f"no registration #{count} within {timeout}s"
            return self.registrations[count - 1]

    def plugin(self, endpoint: str) -> PluginClient:
        """A client of the plugin's socket named in a registration."""
        return PluginClient(self.directory / endpoint)


class PluginClient:
    """Calls the v1beta1.DevicePlugin service as the kubelet does (4 MiB receive limit)."""

    def __init__(self, socket: Path) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        grpc.channel_ready_future(self.channel).result(timeout=10)

    def _unary(self, method: str, request: bytes, timeout: float = 10.0) -> bytes:
        call = self.channel.unary_unary(
            f"/v1beta1.DevicePlugin/{method}",
            request_serializer=_raw,
            response_deserializer=_raw,
        )
        return call(request, timeout=timeout)

    def options(self) -> dict[str, bool]:
        """GetDevicePluginOptions."""
        return wire.plugin_options(self._unary("GetDevicePluginOptions", b""))

    def watch(self) -> Iterator[list[tuple[str, str]]]:
        """ListAndWatch: yields each device list the plugin sends."""
        call = self.channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=_raw,
            response_deserializer=_raw,
        )
        for message in call(b""):
            yield wire.device_list(message)

    def devices(self) -> list[tuple[str, str]]:
        """The first device list of a fresh ListAndWatch stream."""
        stream = self.channel.unary_stream(
            "/v1beta1.DevicePlugin/ListAndWatch",
            request_serializer=_raw,
            response_deserializer=_raw,
        )(b"", timeout=30)
        try:
            return wire.device_list(next(stream))
        finally:
            stream.cancel()

    def preferred(self, available: list[str], must: list[str], size: int) -> list[str]:
        """GetPreferredAllocation for one container."""
        raw = self._unary(
            "GetPreferredAllocation", wire.preferred_request([(available, must, size)])
        )
        return wire.preferred_response(raw)[0]

    def allocate(self, *containers: list[str]) -> list[dict[str, Any]]:
        """Allocate for one or more containers."""
        return wire.allocate_response(
            self._unary("Allocate", wire.allocate_request(list(containers)))
        )

    def prestart(self, ids: list[str]) -> bytes:
        """PreStartContainer."""
        return self._unary("PreStartContainer", wire.prestart_request(ids))

    def close(self) -> None:
        """Close the channel."""
        self.channel.close()


class FakePodResources:
    """Serves v1.PodResourcesLister/List with whatever `pods` holds."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.pods: list[tuple[str, str, list[tuple[str, str, list[str]]]]] = []
        self.calls = 0
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list, request_deserializer=_raw, response_serializer=_raw
                )
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket}")
        self._server.start()

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        return wire.pod_resources_list(list(self.pods))

    def wait_calls(self, count: int, timeout: float = 10.0) -> None:
        """Wait until List was called `count` times in all."""
        deadline = time.monotonic() + timeout
        while self.calls < count:
            assert time.monotonic() < deadline, "pod-resources List was not called"
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop serving."""
        self._server.stop(grace=0).wait()
        if os.path.exists(self.socket):
            os.unlink(self.socket)
