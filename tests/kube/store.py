"""Objects, resourceVersions, an event history and watchers: the API server's storage."""

from __future__ import annotations

import copy
import queue
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster objects


@dataclass(frozen=True)
class Resource:
    """One served resource: its kind, API version and whether it lives in a namespace."""

    kind: str
    api_version: str
    namespaced: bool


RESOURCES = {
    "pods": Resource("Pod", "v1", True),
    "nodes": Resource("Node", "v1", False),
    "deviceclasses": Resource("DeviceClass", "resource.k8s.io/v1", False),
    "resourceslices": Resource("ResourceSlice", "resource.k8s.io/v1", False),
    "resourceclaims": Resource("ResourceClaim", "resource.k8s.io/v1", True),
    "resourceclaimtemplates": Resource("ResourceClaimTemplate", "resource.k8s.io/v1", True),
}
KINDS = {name: r.kind for name, r in RESOURCES.items()}


class Conflict(Exception):
    """A write whose resourceVersion precondition failed, or a second binding (HTTP 409)."""


class NotFound(Exception):
    """No such object (HTTP 404)."""


class AlreadyExists(Exception):
    """Create of an existing name (HTTP 409, reason AlreadyExists)."""


@dataclass
class Event:
    """One change: its resourceVersion, the object before and after (None when absent)."""

    rv: int
    resource: str
    old: Obj | None
    new: Obj | None


@dataclass
class Watcher:
    """One open watch: what it wants and where its events go."""

    resource: str
    namespace: str | None
    matches: Callable[[Obj], bool]
    events: queue.Queue[tuple[str, Obj] | None] = field(default_factory=queue.Queue)

    def offer(self, event: Event) -> None:
        """Queue `event` as this watch sees it (selectors turn updates into adds/deletes)."""
        if event.resource != self.resource:
            return
        old_in = event.old is not None and self._wants(event.old)
        new_in = event.new is not None and self._wants(event.new)
        if new_in and not old_in:
            self.events.put(("ADDED", event.new))  # type: ignore[arg-type]
        elif old_in and new_in:
            self.events.put(("MODIFIED", event.new))  # type: ignore[arg-type]
        elif old_in:
            gone = event.new if event.new is not None else _with_rv(event.old, event.rv)
            self.events.put(("DELETED", gone))  # type: ignore[arg-type]

    def _wants(self, obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace", "") != self.namespace:
            return False
        return self.matches(obj)


def _with_rv(obj: Obj | None, rv: int) -> Obj:
    out = copy.deepcopy(obj or {})
    out.setdefault("metadata", {})["resourceVersion"] = str(rv)
    return out


def now_rfc3339() -> str:
    """The current time as Kubernetes timestamps are written."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Store:
    """Copy-on-write objects: every write stores a new dict, so readers never see a half write."""

    def __init__(self, history: int = 10_000) -> None:
        self.lock = threading.RLock()
        self.objects: dict[str, dict[Key, Obj]] = {name: {} for name in KINDS}
        self.rv = 100
        self.history: deque[Event] = deque(maxlen=history)
        self.oldest_rv = self.rv  # events after this one are still in `history`
        self.watchers: list[Watcher] = []

    def _commit(self, resource: str, key: Key, old: Obj | None, new: Obj | None) -> Obj:
        self.rv += 1
        if new is not None:
            new["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[resource][key] = new
        else:
            self.objects[resource].pop(key, None)
        event = Event(self.rv, resource, old, new)
        if len(self.history) == self.history.maxlen:
            self.oldest_rv = self.history[0].rv
        self.history.append(event)
        for watcher in list(self.watchers):
            watcher.offer(event)
        return new if new is not None else _with_rv(old, self.rv)

    def create(self, resource: str, obj: Obj) -> Obj:
        """Store a new object, filling uid, creationTimestamp and resourceVersion."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            raise ValueError("metadata.name is required")
        if RESOURCES[resource].namespaced:
            meta.setdefault("namespace", "default")
        obj.setdefault("kind", KINDS[resource])
        obj.setdefault("apiVersion", RESOURCES[resource].api_version)
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        key = (meta.get("namespace", ""), meta["name"])
        with self.lock:
            if key in self.objects[resource]:
                raise AlreadyExists(f'{resource} "{meta["name"]}" already exists')
            return self._commit(resource, key, None, obj)

    def get(self, resource: str, key: Key) -> Obj:
        """The stored object (do not modify it)."""
        with self.lock:
            try:
                return self.objects[resource][key]
            except KeyError:
                raise NotFound(f'{resource} "{key[1]}" not found') from None

    def update(
        self, resource: str, key: Key, change: Callable[[Obj], Obj], expect_rv: str | None = None
    ) -> Obj:
        """Replace an object by `change(copy)`; `expect_rv` is an optimistic-lock precondition."""
        with self.lock:
            old = self.get(resource, key)
            if expect_rv and expect_rv != old["metadata"]["resourceVersion"]:
                raise Conflict(
                    f'Operation cannot be fulfilled on {resource} "{key[1]}": the object has '
                    "been modified; please apply your changes to the latest version and try again"
                )
            new = change(copy.deepcopy(old))
            new.setdefault("metadata", {})
            for fixed in ("name", "namespace", "uid", "creationTimestamp"):
                if fixed in old["metadata"]:
                    new["metadata"][fixed] = old["metadata"][fixed]
            return self._commit(resource, key, old, new)

    def delete(self, resource: str, key: Key) -> Obj:
        """Remove an object; watchers get DELETED."""
        with self.lock:
            old = self.get(resource, key)
            return self._commit(resource, key, old, None)

    def snapshot(self, resource: str, namespace: str | None = None) -> tuple[list[Obj], int]:
        """Current objects (shared, read-only) and the resourceVersion of the list."""
        with self.lock:
            items = [
                obj
                for (ns, _), obj in self.objects[resource].items()
                if namespace is None or ns == namespace
            ]
            return items, self.rv

    def watch(self, watcher: Watcher, since: int | None) -> bool:
        """Register `watcher`, first queueing what it missed; False when `since` is too old."""
        with self.lock:
            if since is None:
                for obj in self.objects[watcher.resource].values():
                    watcher.offer(Event(self.rv, watcher.resource, None, obj))
            else:
                if since < self.oldest_rv:
                    return False
                for event in self.history:
                    if event.rv > since:
                        watcher.offer(event)
            self.watchers.append(watcher)
            return True

    def unwatch(self, watcher: Watcher) -> None:
        """Stop feeding `watcher`."""
        with self.lock:
            if watcher in self.watchers:
                self.watchers.remove(watcher)

    def compact(self) -> None:
        """Forget the event history, as etcd compaction does: older watches get 410 Gone."""
        with self.lock:
            self.history.clear()
            self.oldest_rv = self.rv

    def close_watches(self) -> None:
        """End every open watch (as an API server restart does)."""
        with self.lock:
            for watcher in self.watchers:
                watcher.events.put(None)
            self.watchers.clear()
