"""Informer-style list+watch of pods and nodes into the ClusterState.

Each resource is listed, then watched from the list's resourceVersion; a watch that ends is
re-opened from the last resourceVersion seen, and 410 Gone or any error leads to a full re-list
(which replaces the state for that resource, so nothing stale survives).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from .kubeapi import KubeApi
from .state import ClusterState

log = logging.getLogger(__name__)
BACKOFF_MAX = 10.0

_gc_lock = threading.Lock()
_gc_pauses = 0  # first lists under way
_gc_was_enabled = True


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while first lists build the state, then what they
    built frozen out of its scans.

    Decoding a list allocates millions of objects and the state keeps hundreds of thousands:
    every collection would walk them all again (half the CPU of a 100,000-pod list). JSON
    and the state hold no reference cycles, so reference counting frees all they drop.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0:
                gc.freeze()  # the cache lives as long as the process: never scan it again
                if _gc_was_enabled:
                    gc.enable()


class Informer:
    """One resource (`pods` or `nodes`) kept in sync in a daemon thread."""

    def __init__(
        self,
        api: KubeApi,
        resource: str,
        state: ClusterState,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.state = state
        self.synced = threading.Event()
        self.relists = 0
        self._on_event = on_event or (lambda kind: None)
        self._stop = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"informer-{resource}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            with contextlib.suppress(Exception):  # a socket that is already gone
                # Shutting the socket down wakes the thread blocked reading the watch.
                response.connection.sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(Exception):
                response.close()
        self._thread.join(timeout=5)

    def _relist(self) -> str:
        first = not self.synced.is_set()
        listing = self.api.list(self.resource)
        with gc_paused() if first else contextlib.nullcontext():
            if self.resource == "pods":
                # Before the first list no verb reads the state (they wait for `synced`).
                self.state.replace_pods(listing, offline=first)
            else:
                self.state.replace_nodes(listing)
        self.relists += 1
        self.synced.set()
        log.info("listed %s (resourceVersion %s)", self.resource, listing.resource_version)
        self._on_event("relist")
        return listing.resource_version

    def _apply(self, event: dict[str, Any]) -> str | None:
        """Apply one watch event; the new resourceVersion, or None when a re-list is needed."""
        kind = event.get("type")
        obj = event.get("object") or {}
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if kind == "ERROR":
            log.info("watch %s: %s; re-listing", self.resource, obj.get("message", obj))
            return None
        if kind in ("ADDED", "MODIFIED"):
            if self.resource == "pods":
                self.state.observe_pod(obj)
            else:
                self.state.observe_node(obj)
        elif kind == "DELETED":
            meta = obj.get("metadata") or {}
            if self.resource == "pods":
                uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
                self.state.forget_pod(uid)
            else:
                self.state.forget_node(meta.get("name", ""))
        self._on_event(str(kind))
        return rv

    def _run(self) -> None:
        backoff = 0.2
        since = ""
        while not self._stop.is_set():
            try:
                if not since:
                    since = self._relist()
                response, events = self.api.watch(self.resource, since)
                self._response = response
                for event in events:
                    if self._stop.is_set():
                        break
                    applied = self._apply(event)
                    if applied is None:
                        since = ""
                        break
                    since = applied or since
                backoff = 0.2
            except Exception as err:  # KubeError, malformed JSON, sockets: keep the thread alive
                if self._stop.is_set():
                    break
                log.warning("%s informer: %s; re-listing in %.1fs", self.resource, err, backoff)
                since = ""
                self._stop.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
            finally:
                response, self._response = self._response, None
                if response is not None:
                    response.release_conn()


def start_informers(
    api: KubeApi, state: ClusterState, on_list: Callable[[str], None] | None = None
) -> list[Informer]:
    """Start the node and pod informers; `on_list(resource)` is called after each full list."""
    informers = []
    for resource in ("nodes", "pods"):

        def on_event(kind: str, resource: str = resource) -> None:
            if kind == "relist" and on_list is not None:
                on_list(resource)

        informers.append(Informer(api, resource, state, on_event))
    for informer in informers:
        informer.start()
    return informers


def wait_synced(informers: list[Informer], timeout: float) -> bool:
    """Whether every informer finished its first list within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    return all(i.synced.wait(max(deadline - time.monotonic(), 0)) for i in informers)
