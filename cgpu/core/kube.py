"""The one way every cgpu component reaches the Kubernetes API server.

- `load_config` finds the API server with one precedence (docs/operations.md):
  1. an explicit kubeconfig (a component's `--kubeconfig`);
  2. `$KUBECONFIG` (one path or a `:`-separated list, merged as kubectl does);
  3. the in-cluster service account (`$KUBERNETES_SERVICE_HOST`/`_PORT` and the token and CA
     in /var/run/secrets/kubernetes.io/serviceaccount);
  4. `~/.kube/config`.
  The first source that is *present* is used, and a present source that does not load is an
  error: it never falls through to the next, so two daemons under one environment always
  choose the same API server, or fail the same way.
- `KubeError` is the one error: `status` is the HTTP status (0: the server was not reached).
- `call` makes one API call with a timeout, retrying (bounded, with backoff) connection
  errors, 429 and 5xx; a 4xx other than 429 is the caller's to handle and is never retried.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
HOST_ENV, PORT_ENV = "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"
ATTEMPTS = 3  # one call and two retries
BACKOFF_S = 0.2  # before the first retry; doubled each time, with jitter
BACKOFF_MAX_S = 2.0  # also the most a server's Retry-After is honoured


class KubeError(Exception):
    """An API call failed: `status` is its HTTP status (0 when the server was not reached,
    or sent something that is not JSON) and `reason` the server's reason ("NotFound");
    `retry_after` the seconds a 429 or 503 asked to wait, `unsent` whether the request failed
    before it reached the server (no connection)."""

    def __init__(
        self,
        message: str,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
        unsent: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.unsent = unsent

    @property
    def retryable(self) -> bool:
        """Whether trying again later may help: unreachable, throttled or a server error."""
        return self.status == 0 or self.status == 429 or self.status >= 500


class KubeConfigError(KubeError):
    """No API-server configuration could be loaded; `found` is False when no source exists
    at all (a component that may run standalone does so), True when one exists but is bad."""

    def __init__(self, message: str, found: bool) -> None:
        super().__init__(message)
        self.found = found


@dataclass(frozen=True)
class Source:
    """Where the configuration comes from: `kind` is one of KINDS, `location` a path (or the
    paths of $KUBECONFIG) or, in-cluster, the service-account directory."""

    kind: str
    location: str

    def __str__(self) -> str:
        return f"{self.kind} ({self.location})"


KINDS = ("--kubeconfig", "$KUBECONFIG", "in-cluster", "~/.kube/config")


def find_source(
    kubeconfig: str | None = None,
    environ: Mapping[str, str] | None = None,
    service_account: Path = SERVICE_ACCOUNT_DIR,
    home: Path | None = None,
) -> Source:
    """The first source present, in the order of the module's docstring; KubeConfigError
    (found=False) naming every source tried when there is none."""
    env = os.environ if environ is None else environ
    if kubeconfig:
        return Source(KINDS[0], kubeconfig)
    if env.get("KUBECONFIG"):
        return Source(KINDS[1], env["KUBECONFIG"])
    if env.get(HOST_ENV) or env.get(PORT_ENV):
        return Source(KINDS[2], str(service_account))
    default = (home if home is not None else Path.home()) / ".kube" / "config"
    if default.exists():
        return Source(KINDS[3], str(default))
    raise KubeConfigError(
        "no API-server configuration: no --kubeconfig given, $KUBECONFIG not set, not in a "
        f"pod (${HOST_ENV} not set), and no {default}",
        found=False,
    )


def load_config(
    kubeconfig: str | None = None,
    environ: Mapping[str, str] | None = None,
    service_account: Path = SERVICE_ACCOUNT_DIR,
    home: Path | None = None,
) -> Any:
    """A `kubernetes.client.Configuration` from the first source present (find_source);
    KubeConfigError when there is none or it does not load. The client's own retries are off:
    `call` retries."""
    from kubernetes import client

    env = os.environ if environ is None else environ
    source = find_source(kubeconfig, env, service_account, home)
    configuration = client.Configuration()
    try:
        if source.kind == "in-cluster":
            _load_in_cluster(configuration, env, service_account)
        else:
            _load_files(configuration, source.location)
    except KubeConfigError:
        raise
    except Exception as err:  # the loaders raise several unrelated types
        raise KubeConfigError(f"{source} is not usable: {_one_line(err)}", found=True) from err
    configuration.retries = 0
    log.debug("API server %s from %s", configuration.host, source)
    return configuration


def _load_in_cluster(configuration: Any, env: Mapping[str, str], account: Path) -> None:
    from kubernetes.config.incluster_config import InClusterConfigLoader

    for var in (HOST_ENV, PORT_ENV):
        if not env.get(var):
            raise KubeConfigError(f"in-cluster: ${var} is not set", found=True)
    loader = InClusterConfigLoader(
        token_filename=str(account / "token"),
        cert_filename=str(account / "ca.crt"),
        environ=env,
    )
    loader.load_and_set(configuration)


def _load_files(configuration: Any, paths: str) -> None:
    from kubernetes import config

    files = [p for p in paths.split(os.pathsep) if p]
    if not any(Path(p).expanduser().is_file() for p in files):
        shown = ", ".join(files) or repr(paths)
        raise KubeConfigError(f"kubeconfig {shown} not found", found=True)
    config.load_kube_config(config_file=paths, client_configuration=configuration)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _server_message(err: Any) -> str:
    """The `message` of a Status body, else the HTTP reason."""
    try:
        body = json.loads(err.body or "{}")
        return str(body.get("message") or err.reason) if isinstance(body, dict) else err.reason
    except (ValueError, TypeError):
        return str(err.reason)


def _server_reason(err: Any) -> str:
    try:
        body = json.loads(err.body or "{}")
        return str(body.get("reason") or "") if isinstance(body, dict) else ""
    except (ValueError, TypeError):
        return ""


def _retry_after(err: Any) -> float | None:
    headers = getattr(err, "headers", None) or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return min(max(float(raw), 0.0), BACKOFF_MAX_S) if raw is not None else None
    except ValueError:
        return None


def _attempt(what: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """One call; KubeError on any failure."""
    from kubernetes.client.exceptions import ApiException

    try:
        return fn(*args, **kwargs)
    except ApiException as err:
        status = int(err.status or 0)
        message = f"{what}: HTTP {status} {_server_message(err)}"
        raise KubeError(message, status, _server_reason(err), _retry_after(err)) from err
    except Exception as err:  # urllib3 and socket errors: the server was not reached
        reason = getattr(err, "reason", None) or err
        message = f"{what}: {_one_line(reason)}"
        raise KubeError(message, unsent=_never_sent(reason)) from err


def _never_sent(err: object) -> bool:
    """Whether the request failed before it was sent (no connection was made)."""
    from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

    return isinstance(err, (ConnectTimeoutError, NewConnectionError, ConnectionRefusedError))


def call(
    what: str,
    fn: Callable[..., Any],
    *args: Any,
    timeout: float | tuple[float, float] = 10.0,
    attempts: int = ATTEMPTS,
    idempotent: bool = True,
    sleep: Callable[[float], None] = time.sleep,
    **kwargs: Any,
) -> Any:
    """`fn(*args, **kwargs)` (a kubernetes client method) with `_request_timeout=timeout` and
    `_preload_content=False`: the raw urllib3 response, or KubeError naming `what`.

    Connection errors, 429 and 5xx are tried again up to `attempts` times in all, with
    backoff; a call that is not `idempotent` (a create) is tried again only where the server
    cannot have acted on it: 429, or no connection made. Any other status is raised at once.
    """
    kwargs.setdefault("_request_timeout", timeout)
    kwargs.setdefault("_preload_content", False)
    delay = BACKOFF_S
    for attempt in range(1, max(attempts, 1) + 1):
        try:
            return _attempt(what, fn, args, kwargs)
        except KubeError as err:
            again = err.status == 429 or err.unsent or (idempotent and err.retryable)
            if not again or attempt >= attempts:
                raise
            wait = err.retry_after
            if wait is None:
                wait = delay * (0.5 + random.random())
            log.debug("%s; try %d of %d in %.2fs", err, attempt + 1, attempts, wait)
            sleep(wait)
            delay = min(delay * 2, BACKOFF_MAX_S)
    raise AssertionError("unreachable")  # pragma: no cover


def call_json(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """`call`, with the response body decoded as a JSON object ({} when empty)."""
    response = call(what, fn, *args, **kwargs)
    try:
        body = json.loads(response.data or b"{}")
    except ValueError as err:
        raise KubeError(f"{what}: malformed response: {err}") from err
    if not isinstance(body, dict):
        raise KubeError(f"{what}: malformed response: not a JSON object")
    return body
