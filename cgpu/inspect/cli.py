"""`kubectl-inspect-cgpu [-d] [-o json] [NODE]` (also installed as kubectl-inspect-gpushare)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cgpu.core import kube
from cgpu.core.kube import KubeConfigError, KubeError

from .dra import DraGpu, usage
from .model import build_nodes
from .render import as_json, details, summary

TIMEOUT = 15.0


class InspectError(Exception):
    """Something to tell the user in one line."""


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Show GPU memory allocated on each node and GPU (gpushare)."
    )
    parser.add_argument("-d", "--details", action="store_true", help="list the pods on each node")
    parser.add_argument("-o", "--output", choices=("table", "json"), default="table")
    parser.add_argument("node", nargs="?", help="only this node")
    return parser


def _core() -> Any:
    """An ApiClient from cgpu.core.kube.load_config (as kubectl: $KUBECONFIG, in-cluster,
    ~/.kube/config), and the API server's address."""
    from kubernetes import client

    try:
        configuration = kube.load_config()
    except KubeConfigError as err:
        raise InspectError(str(err)) from None
    return client.ApiClient(configuration), configuration.host


Fetched = tuple[list[dict[str, Any]], list[dict[str, Any]], list[DraGpu]]


def _fetch(node: str | None) -> Fetched:
    """Nodes, pods, and the DRA driver's GPUs with their claims (none where the cluster has no
    resource.k8s.io/v1)."""
    from kubernetes import client

    api_client, host = _core()
    core, resource = client.CoreV1Api(api_client), client.ResourceV1Api(api_client)

    def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return kube.call_json(fn.__name__, fn, *args, timeout=TIMEOUT, **kwargs)
        except KubeError as err:
            if err.status == 404 and node and fn == core.read_node:
                raise InspectError(f'node "{node}" not found') from None
            if err.status:
                raise InspectError(f"API server {host} refused: {err}") from None
            if "malformed response" in str(err):
                raise InspectError(f"API server {host} sent {err}") from None
            raise InspectError(f"cannot reach the API server {host}: {err}") from None

    if node:
        nodes = [call(core.read_node, node)]
        pods = call(core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
    else:
        nodes = call(core.list_node).get("items") or []
        pods = call(core.list_pod_for_all_namespaces)
    selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
    try:
        slices = call(resource.list_resource_slice, **selector).get("items") or []
        claims = call(resource.list_resource_claim_for_all_namespaces).get("items") or []
    except InspectError as err:
        if "HTTP 404" not in str(err) and "HTTP 403" not in str(err):
            raise
        if "HTTP 403" in str(err):  # an older read-only role: the gpushare view still stands
            print(f"warning: DRA claims not counted: {err}", file=sys.stderr)
        slices, claims = [], []  # 404: a cluster before 1.34, no resource.k8s.io/v1
    return nodes, pods.get("items") or [], usage(slices, claims)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console scripts."""
    prog = Path(sys.argv[0]).name if argv is None else "kubectl-inspect-cgpu"
    args = _parser(prog).parse_args(argv)
    try:
        nodes, pods, dra = _fetch(args.node)
    except InspectError as err:
        print("error: " + " ".join(str(err).split()), file=sys.stderr)  # one line
        return 1
    gpu_nodes = build_nodes(nodes, pods, dra)
    if args.output == "json":
        print(json.dumps(as_json(gpu_nodes), indent=2))
    elif args.details:
        sys.stdout.write(details(gpu_nodes))
    else:
        sys.stdout.write(summary(gpu_nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
