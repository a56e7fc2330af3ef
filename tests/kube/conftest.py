"""The fake API server's own tests use its fixture."""

from kube.fixtures import kube_api, recorded_api  # noqa: F401
