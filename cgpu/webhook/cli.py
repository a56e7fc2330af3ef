"""`cgpu webhook`: serve the mutating admission webhook over HTTPS."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys

from cgpu.core.layout import DRA_DRIVER
from cgpu.core.podcontract import MEMORY_UNIT_MIB
from cgpu.webhook.config import ON_ERROR, SelectorError, WebhookConfig


def register(parser: argparse.ArgumentParser) -> None:
    """The command's options."""
    parser.add_argument(
        "--cert-dir",
        default="/tmp/k8s-webhook-server/serving-certs",
        help="directory with tls.crt and tls.key (reloaded when they change)",
    )
    parser.add_argument("--address", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    parser.add_argument(
        "--on-error",
        choices=ON_ERROR,
        default="deny",
        help="a pod it cannot translate: deny it (default) or pass it unchanged",
    )
    parser.add_argument(
        "--memory-unit",
        choices=sorted(MEMORY_UNIT_MIB),
        default="GiB",
        help="one aliyun.com/gpu-mem unit, as the device plugin's --memory-unit",
    )
    parser.add_argument(
        "--device-class",
        default=DRA_DRIVER,
        help=f"the DeviceClass of the claims (default {DRA_DRIVER})",
    )
    parser.add_argument(
        "--pod-selector", default="", help="translate only pods whose labels match (a=b,c!=d,e,!f)"
    )
    parser.add_argument(
        "--namespaces",
        default="",
        help="translate only in these namespaces (comma list; default all)",
    )
    parser.add_argument(
        "--exclude-namespaces", default="", help="never translate in these namespaces (comma list)"
    )
    parser.add_argument(
        "--template-ttl",
        type=float,
        default=300.0,
        help="seconds a template known to exist is not written again",
    )
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig (default: in-cluster)")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT."""
    from cgpu.core.kube import KubeError
    from cgpu.webhook.admit import Admitter
    from cgpu.webhook.kubeapi import connect
    from cgpu.webhook.metrics import Metrics
    from cgpu.webhook.server import CertReloader, WebhookServer
    from cgpu.webhook.templates import TemplateStore

    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = WebhookConfig.from_args(args)
    except SelectorError as err:
        print(f"cgpu webhook: --pod-selector: {err}", file=sys.stderr)
        return 2
    try:
        api = connect(config.kubeconfig)
    except KubeError as err:
        print(f"cgpu webhook: no usable API-server configuration: {err}", file=sys.stderr)
        return 1
    try:
        certs = CertReloader(config.cert_dir)
    except (OSError, ValueError) as err:
        print(
            f"cgpu webhook: cannot load tls.crt/tls.key from {config.cert_dir}: {err}",
            file=sys.stderr,
        )
        return 1
    store = TemplateStore(api, config.device_class, config.template_ttl)
    server = WebhookServer(Admitter(config, store, Metrics()), certs, config.address, config.port)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    logging.getLogger(__name__).info(
        "serving /mutate-pods on %s:%d (on-error %s, unit %d MiB, class %s)",
        config.address,
        server.port,
        config.on_error,
        config.unit_mib,
        config.device_class,
    )
    with contextlib.suppress(KeyboardInterrupt, SystemExit):
        server.serve_forever()
    return 0
