"""The webhook's tests use the fake API server's fixture."""

from kube.fixtures import kube_api  # noqa: F401
