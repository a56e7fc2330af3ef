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

from .computeview import EXPORTER_SELECTOR, NodeCompute, exporter_pods, scrape
from .computeview import as_json as compute_json
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


def _host_compute(node: str | None, shown: list[str]) -> dict[str, NodeCompute]:
    """The compute host view of each shown node, scraped from its exporter through the API
    server's pod proxy (see `cgpu.inspect.computeview`); {} where none can be listed."""
    from kubernetes import client

    api_client, _ = _core()
    core = client.CoreV1Api(api_client)
    selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
    try:
        listed = kube.call_json(
            "list exporter pods",
            core.list_pod_for_all_namespaces,
            label_selector=EXPORTER_SELECTOR,
            timeout=TIMEOUT,
            **selector,
        )
    except KubeError as err:
        print(f"warning: no compute host view: {' '.join(str(err).split())}", file=sys.stderr)
        return {}

    def get(namespace: str, name: str, port: int) -> bytes:
        response = kube.call(
            f"scrape {namespace}/{name}",
            core.connect_get_namespaced_pod_proxy_with_path,
            f"{name}:{port}",
            namespace,
            "metrics",
            timeout=TIMEOUT,
            attempts=1,
        )
        return bytes(response.data or b"")

    return scrape(shown, exporter_pods(listed.get("items") or []), get)


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
    for skipped in (s for n in gpu_nodes for s in n.skipped):
        print(f"warning: {skipped}", file=sys.stderr)
    host: dict[str, NodeCompute] = {}
    if args.details:
        try:
            host = _host_compute(args.node, [n.name for n in gpu_nodes])
        except InspectError as err:
            print(f"warning: no compute host view: {err}", file=sys.stderr)
    if args.output == "json":
        out = as_json(gpu_nodes)
        for entry in out["nodes"] if host else []:
            if entry["name"] in host:
                entry["computeHostView"] = compute_json(host[entry["name"]])
        print(json.dumps(out, indent=2))
    elif args.details:
        sys.stdout.write(details(gpu_nodes, host))
    else:
        sys.stdout.write(summary(gpu_nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
