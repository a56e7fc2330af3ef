"""The gRPC services of the driver: plugin registration, DRA v1, and resource health.

The kubelet's plugin watcher finds the registration socket in `<kubelet-dir>/plugins_registry/`,
calls GetInfo (type DRAPlugin, the DRA socket, `v1.DRAPlugin`) and then
NotifyRegistrationStatus. It then calls NodePrepareResources and NodeUnprepareResources on
the DRA socket. Each claim gets its own answer: one claim that fails does not fail the others.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path

import grpc

from cgpu.core.layout import DRA_DRIVER
from cgpu.dra.api import dra_v1_pb2 as dra
from cgpu.dra.api import dra_v1_pb2_grpc as dra_grpc
from cgpu.dra.api import pluginregistration_v1_pb2 as reg
from cgpu.dra.api import pluginregistration_v1_pb2_grpc as reg_grpc
from cgpu.dra.claims import ClaimError
from cgpu.dra.healthservice import HealthService
from cgpu.dra.kubeapi import KubeError
from cgpu.dra.names import PLUGIN_TYPE, SUPPORTED_VERSIONS
from cgpu.dra.prepare import ClaimRef, Preparer

log = logging.getLogger(__name__)


class RegistrationService(reg_grpc.RegistrationServicer):
    """Answers the kubelet's plugin watcher; `registered` is set once it accepts us."""

    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(
            type=PLUGIN_TYPE,
            name=DRA_DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            log.info("registered with the kubelet")
            self.error = ""
            self.registered.set()
        else:
            self.error = request.error
            log.error("the kubelet refused the registration: %s", request.error)
        return reg.RegistrationStatusResponse()


class DraService(dra_grpc.DRAPluginServicer):
    """NodePrepareResources and NodeUnprepareResources, claim by claim."""

    def __init__(self, preparer: Preparer) -> None:
        self.preparer = preparer

    def NodePrepareResources(
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            ref = ClaimRef(claim.namespace, claim.uid, claim.name)
            try:
                prepared = self.preparer.prepare(ref)
            except (ClaimError, KubeError, OSError, ValueError) as err:
                log.warning("prepare %s/%s (%s) failed: %s", ref.namespace, ref.name, ref.uid, err)
                response.claims[claim.uid].error = str(err) or type(err).__name__
                continue
            out = response.claims[claim.uid]
            for device in prepared.devices:
                added = out.devices.add(
                    request_names=device.requests,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=[prepared.cdi_id],
                )
                if device.share_id:
                    added.share_id = device.share_id
        return response

    def NodeUnprepareResources(
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            ref = ClaimRef(claim.namespace, claim.uid, claim.name)
            try:
                self.preparer.unprepare(ref)
                response.claims[claim.uid].CopyFrom(dra.NodeUnprepareResourceResponse())
            except (ClaimError, OSError) as err:
                log.warning("unprepare %s (%s) failed: %s", ref.name, ref.uid, err)
                response.claims[claim.uid].error = str(err)
        return response


def _listen(
    servicer_adder: object,
    servicer: object,
    socket: Path,
    handlers: Sequence[grpc.GenericRpcHandler] = (),
) -> grpc.Server:
    """A gRPC server on a fresh unix socket (a stale one from a previous run is removed)."""
    socket.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(socket)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))  # a health stream holds one
    servicer_adder(servicer, server)  # type: ignore[operator]
    server.add_generic_rpc_handlers(tuple(handlers))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    return server


class Servers:
    """The DRA socket (DRA v1 and resource health), then the registration socket (the kubelet
    may call as soon as it sees the latter)."""

    def __init__(
        self,
        preparer: Preparer,
        health: HealthService,
        dra_socket: Path,
        registration_socket: Path,
    ) -> None:
        self.dra_socket = dra_socket
        self.registration_socket = registration_socket
        self.registration = RegistrationService(dra_socket)
        self._health = health
        self._dra = _listen(
            dra_grpc.add_DRAPluginServicer_to_server,
            DraService(preparer),
            dra_socket,
            health.handlers(),
        )
        self._reg = _listen(
            reg_grpc.add_RegistrationServicer_to_server, self.registration, registration_socket
        )
        log.info("serving DRA on %s, registration on %s", dra_socket, registration_socket)

    def stop(self) -> None:
        """Stop serving and remove both sockets (the kubelet then deregisters the driver)."""
        self._health.stopping.set()
        for server, socket in ((self._reg, self.registration_socket), (self._dra, self.dra_socket)):
            server.stop(grace=1).wait()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(socket)
