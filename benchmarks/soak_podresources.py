"""The soak's pod-resources API, in a process of its own as the kubelet's is.

    python benchmarks/soak_podresources.py SOCKET PODS_JSON

Serves v1.PodResourcesLister/List (tests/deviceplugin/fake_kubelet.py's FakePodResources) with
whatever PODS_JSON holds at each call: [[namespace, pod, [[container, resource, [ids]]]]], an
absent file being no pods. The soak rewrites the file (atomically) as pods come and go. Stops on
SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "deviceplugin"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import kubelet_wire as wire
from fake_kubelet import FakePodResources


class FilePodResources(FakePodResources):
    """FakePodResources whose pods are read from a file at every List."""

    def __init__(self, socket: Path, pods_file: Path) -> None:
        self.pods_file = pods_file
        super().__init__(socket)

    def _list(self, request: bytes, context: Any) -> bytes:
        self.calls += 1
        try:
            pods = json.loads(self.pods_file.read_text())
        except FileNotFoundError:
            pods = []
        listed = [(ns, pod, [(c, r, list(ids)) for c, r, ids in cs]) for ns, pod, cs in pods]
        return wire.pod_resources_list(listed)


def main() -> int:
    """Serve until SIGTERM."""
    server = FilePodResources(Path(sys.argv[1]), Path(sys.argv[2]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("serving", flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
