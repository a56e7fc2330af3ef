"""Strict validation of Kubernetes objects against the OpenAPI schemas of given releases
(kubernetes-validate), shared by the deploy and DRA tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import kubernetes_validate


def validate_for(obj: dict[str, Any], versions: Iterable[str]) -> None:
    """Fail with the object, the release and the field unless `obj` is valid, strictly (no
    unknown field), for every release in `versions`."""
    for version in versions:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            name = obj.get("metadata", {}).get("name")
            raise AssertionError(
                f"{obj.get('kind')}/{name} invalid for Kubernetes {version} at {where}: "
                f"{exc.message}"
            ) from None
