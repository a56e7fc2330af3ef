"""A paginated list read ahead: the next page is on its way while the caller decodes this one.

A list of 100,000 pods is 200 pages of 500. Fetched one after the other, the API server's
encoding and the transfer of each page add to the extender's decoding and indexing of it;
read ahead in a thread, they overlap (the thread waits on the socket without the GIL). The
`continue` token is read from the page's top-level `metadata`, which the API server writes
before `items`, so the thread never decodes the items themselves.
"""

from __future__ import annotations

import json
import queue
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from cgpu.core.kube import KubeError

AHEAD = 2  # pages fetched and waiting at most: memory stays a few pages
_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")
_END = object()


def list_metadata(text: str) -> dict[str, Any] | None:
    """The top-level `metadata` of a JSON list, read without decoding its items; None when
    `items` comes first or the text is not a JSON object (then decode it whole)."""
    try:
        i = _SPACE.match(text, 0).end()  # type: ignore[union-attr]
        if text[i : i + 1] != "{":
            return None
        i += 1
        while True:
            i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != '"':
                return None
            key, i = _DECODER.raw_decode(text, i)
            i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ":":
                return None
            i = _SPACE.match(text, i + 1).end()  # type: ignore[union-attr]
            if key == "items":
                return None
            value, i = _DECODER.raw_decode(text, i)
            if key == "metadata":
                return value if isinstance(value, dict) else None
            i = _SPACE.match(text, i).end()  # type: ignore[union-attr]
            if text[i : i + 1] != ",":
                return None
            i += 1
    except ValueError:
        return None


@dataclass
class Page:
    """One page: its list metadata, and its items still undecoded (`text`) or decoded."""

    what: str
    metadata: dict[str, Any]
    text: str | None = None
    body: dict[str, Any] | None = None

    def items(self) -> list[dict[str, Any]]:
        """The page's items, decoded now (in the caller's thread) when not yet."""
        body = self.body
        if body is None:
            body = _decode(self.what, self.text or "{}")
        self.text = self.body = None
        items = body.get("items") or []
        if not isinstance(items, list):
            raise KubeError(f"{self.what}: malformed response: items is not a list")
        return items


def _decode(what: str, text: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError as err:
        raise KubeError(f"{what}: malformed response: {err}") from err
    if not isinstance(body, dict):
        raise KubeError(f"{what}: malformed response: not a JSON object")
    return body


def _page(what: str, data: bytes) -> Page:
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        raise KubeError(f"{what}: malformed response: {err}") from err
    metadata = list_metadata(text)
    if metadata is not None:
        return Page(what, metadata, text=text)
    body = _decode(what, text)
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise KubeError(f"{what}: malformed response: metadata is not an object")
    return Page(what, metadata, body=body)


def read_ahead(what: str, fetch: Callable[[str | None], bytes]) -> Iterator[Page]:
    """The pages `fetch(continue_token)` returns, in order, until one has no `continue`; a
    thread fetches up to AHEAD pages ahead. A failed fetch is raised where its page would
    have been; leaving the loop early stops the thread."""
    ready: queue.Queue[Any] = queue.Queue(AHEAD)
    stop = threading.Event()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        token: str | None = None
        try:
            while not stop.is_set():
                page = _page(what, fetch(token))
                if not put(page):
                    return
                token = page.metadata.get("continue") or None
                if token is None:
                    put(_END)
                    return
        except Exception as err:  # KubeError, or a bug: the caller sees it, in order
            put(err)

    thread = threading.Thread(target=run, name=f"read-ahead {what}", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
