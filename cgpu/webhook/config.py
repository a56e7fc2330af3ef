"""The webhook's options as one typed, frozen object, and its pod and namespace scope."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

from cgpu.core.layout import DRA_DRIVER
from cgpu.core.podcontract import MEMORY_UNIT_MIB

ON_ERROR = ("deny", "pass")
_TERM = re.compile(r"^(!?)([A-Za-z0-9][-A-Za-z0-9_./]*)(?:(==|=|!=)([-A-Za-z0-9_.]*))?$")


class SelectorError(ValueError):
    """A label selector the webhook cannot read."""


@dataclass(frozen=True)
class LabelSelector:
    """An equality-based label selector (`a=b,c!=d,e,!f`), as kubectl's -l takes it."""

    terms: tuple[tuple[str, str, str], ...] = ()  # (key, op, value); op: =, !=, exists, !exists

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        """The selector `text` describes; SelectorError naming the term that is wrong."""
        terms = []
        for raw in filter(None, (t.strip() for t in text.split(","))):
            match = _TERM.match(raw)
            if not match or (match[1] and match[3]):
                raise SelectorError(
                    f"label selector term {raw!r} is not key, !key, key=value or key!=value"
                )
            neg, key, op, value = match.groups()
            if op is None:
                terms.append((key, "!exists" if neg else "exists", ""))
            else:
                terms.append((key, "!=" if op == "!=" else "=", value or ""))
        return cls(tuple(terms))

    def matches(self, labels: dict[str, str]) -> bool:
        """Whether `labels` satisfy every term."""
        for key, op, value in self.terms:
            present = key in labels
            if op == "exists" and not present:
                return False
            if op == "!exists" and present:
                return False
            if op == "=" and labels.get(key) != value:
                return False
            if op == "!=" and present and labels.get(key) == value:
                return False
        return True


@dataclass(frozen=True)
class WebhookConfig:
    """The options of `cgpu webhook`, read once from the command line."""

    cert_dir: Path = Path("/tmp/k8s-webhook-server/serving-certs")
    address: str = "0.0.0.0"
    port: int = 9443
    on_error: str = "deny"
    unit_mib: int = 1024  # one aliyun.com/gpu-mem unit
    device_class: str = DRA_DRIVER
    pod_selector: LabelSelector = field(default_factory=LabelSelector)
    namespaces: frozenset[str] = frozenset()  # empty: every namespace not excluded
    exclude_namespaces: frozenset[str] = frozenset()
    template_ttl: float = 300.0
    kubeconfig: str | None = None
    log_level: str = "INFO"

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WebhookConfig:
        """The config the parsed options describe; SelectorError for a bad selector."""
        return cls(
            cert_dir=Path(args.cert_dir).absolute(),
            address=args.address,
            port=args.port,
            on_error=args.on_error,
            unit_mib=MEMORY_UNIT_MIB[args.memory_unit],
            device_class=args.device_class,
            pod_selector=LabelSelector.parse(args.pod_selector),
            namespaces=_names(args.namespaces),
            exclude_namespaces=_names(args.exclude_namespaces),
            template_ttl=args.template_ttl,
            kubeconfig=args.kubeconfig,
            log_level=args.log_level,
        )

    def in_scope(self, namespace: str, labels: dict[str, str]) -> bool:
        """Whether a pod in `namespace` with `labels` is the webhook's to translate."""
        if namespace in self.exclude_namespaces:
            return False
        if self.namespaces and namespace not in self.namespaces:
            return False
        return self.pod_selector.matches(labels)


def _names(text: str) -> frozenset[str]:
    return frozenset(filter(None, (n.strip() for n in text.split(","))))
