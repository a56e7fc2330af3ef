"""A strict check of KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1) documents.

kube-scheduler decodes its configuration strictly: an unknown or misspelt field stops it at
start-up. No offline schema covers this kind, so the fields here are copied from the v1 Go types
(KubeSchedulerConfiguration, KubeSchedulerProfile, Extender, ExtenderManagedResource, and
component-base's LeaderElectionConfiguration and ClientConnectionConfiguration), with the rules
of kube-scheduler's validation that these files can break.
"""

from __future__ import annotations

import re
from typing import Any

TOP = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
    "healthzBindAddress", "metricsBindAddress", "enableProfiling", "enableContentionProfiling",
    "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles",
    "extenders", "delayCacheUntilActive",
}  # fmt: skip
LEADER_ELECTION = {
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
    "resourceName", "resourceNamespace",
}  # fmt: skip
CLIENT_CONNECTION = {"kubeconfig", "acceptContentTypes", "contentType", "qps", "burst"}
PROFILE = {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}
EXTENDER = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip
MANAGED_RESOURCE = {"name", "ignoredByScheduler"}
BOOLS = {"enableHTTPS", "nodeCacheCapable", "ignorable", "ignoredByScheduler", "leaderElect"}
STRINGS = {"urlPrefix", "filterVerb", "prioritizeVerb", "bindVerb", "preemptVerb", "name"}
DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$")
# An extended resource name: a DNS subdomain prefix, "/", a name (not kubernetes.io/).
EXTENDED_RESOURCE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _fields(where: str, obj: Any, allowed: set[str]) -> dict[str, Any]:
    assert isinstance(obj, dict), f"{where}: expected a mapping, got {obj!r}"
    unknown = set(obj) - allowed
    assert not unknown, f"{where}: unknown field(s) {sorted(unknown)}"
    for key, value in obj.items():
        if key in BOOLS:
            assert isinstance(value, bool), f"{where}.{key}: expected a boolean, got {value!r}"
        if key in STRINGS:
            assert isinstance(value, str) and value, f"{where}.{key}: expected a string"
    return obj


def check_extender(where: str, ext: Any) -> None:
    """One `extenders` entry."""
    _fields(where, ext, EXTENDER)
    assert re.match(r"^https?://[^/\s]+", ext.get("urlPrefix", "")), f"{where}: bad urlPrefix"
    weight = ext.get("weight", 1)
    assert isinstance(weight, int) and not isinstance(weight, bool) and weight > 0, (
        f"{where}.weight: must be a positive integer"
    )
    if "httpTimeout" in ext:
        assert DURATION.match(str(ext["httpTimeout"])), f"{where}.httpTimeout: not a duration"
    for i, res in enumerate(ext.get("managedResources", [])):
        _fields(f"{where}.managedResources[{i}]", res, MANAGED_RESOURCE)
        assert EXTENDED_RESOURCE.match(res["name"]), f"{where}: {res['name']} is not extended"


def check_scheduler_config(cfg: Any) -> None:
    """Fail with the first reason kube-scheduler would refuse `cfg`."""
    _fields("config", cfg, TOP)
    assert cfg.get("apiVersion") == "kubescheduler.config.k8s.io/v1", "config: apiVersion"
    assert cfg.get("kind") == "KubeSchedulerConfiguration", "config: kind"
    if "leaderElection" in cfg:
        _fields("leaderElection", cfg["leaderElection"], LEADER_ELECTION)
    if "clientConnection" in cfg:
        _fields("clientConnection", cfg["clientConnection"], CLIENT_CONNECTION)
    names = []
    for i, profile in enumerate(cfg.get("profiles", [])):
        _fields(f"profiles[{i}]", profile, PROFILE)
        names.append(profile.get("schedulerName", "default-scheduler"))
    assert len(names) == len(set(names)), "profiles: duplicate schedulerName"
    extenders = cfg.get("extenders", [])
    for i, ext in enumerate(extenders):
        check_extender(f"extenders[{i}]", ext)
    binders = [e for e in extenders if e.get("bindVerb")]
    assert len(binders) <= 1, "extenders: only one extender may bind"
