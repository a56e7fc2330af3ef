"""cgpu.core.kube: one precedence of configuration sources, one error type, retried calls.

Real kubeconfig files, a fake service-account directory, and the project's fake API server
driven by the official kubernetes client.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from kube.fixtures import kube_api  # noqa: F401
from kubernetes import client

from cgpu.core import kube
from cgpu.core.kube import KubeConfigError, KubeError, find_source, load_config

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig naming `server`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return path


def service_account(root: Path, token: str = "sa-token") -> Path:
    """A service-account directory as the kubelet mounts it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "token").write_text(token)
    (root / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    return root


@pytest.fixture
def sources(tmp_path):
    """Every source present, each naming a different server; tests remove what they need."""
    flag = kubeconfig(tmp_path / "flag.json", "https://flag.example:6443")
    env_file = kubeconfig(tmp_path / "env.json", "https://env.example:6443")
    home = tmp_path / "home"
    kubeconfig(home / ".kube" / "config", "https://home.example:6443")
    account = service_account(tmp_path / "sa")
    env = {"KUBECONFIG": str(env_file), **IN_POD}
    return flag, env, account, home


def host(kubeconfig_flag, env, account, home) -> str:
    return load_config(kubeconfig_flag, env, account, home).host


def test_the_precedence_flag_then_kubeconfig_then_in_cluster_then_home(sources):
    flag, env, account, home = sources
    assert host(str(flag), env, account, home) == "https://flag.example:6443"
    assert host(None, env, account, home) == "https://env.example:6443"
    del env["KUBECONFIG"]
    configuration = load_config(None, env, account, home)
    assert configuration.host == "https://10.96.0.1:443"
    assert configuration.api_key["BearerToken"] .split() == ["bearer", "sa-token"]
    assert configuration.ssl_ca_cert == str(account / "ca.crt")
    for var in IN_POD:
        del env[var]
    assert host(None, env, account, home) == "https://home.example:6443"
    assert find_source(None, env, account, home).kind == "~/.kube/config"


def test_no_source_at_all_names_every_source_tried(tmp_path):
    with pytest.raises(KubeConfigError) as caught:
        load_config(None, {}, tmp_path / "sa", tmp_path / "home")
    err = caught.value
    assert not err.found
    assert isinstance(err, KubeError)  # one error type for callers
    for named in ("--kubeconfig", "$KUBECONFIG", "KUBERNETES_SERVICE_HOST", ".kube/config"):
        assert named in str(err)


def test_a_present_but_broken_source_is_an_error_not_a_fall_through(sources, tmp_path):
    _, env, account, home = sources
    # An explicit flag naming no file: never the next source, even with all others present.
    with pytest.raises(KubeConfigError, match="not found") as caught:
        load_config(str(tmp_path / "missing"), env, account, home)
    assert caught.value.found
    # $KUBECONFIG set to a file that is not a kubeconfig.
    bad = tmp_path / "bad"
    bad.write_text("this: is: not: a kubeconfig")
    with pytest.raises(KubeConfigError, match=r"\$KUBECONFIG") as caught:
        load_config(None, {**env, "KUBECONFIG": str(bad)}, account, home)
    assert caught.value.found
    # In a pod whose token is missing: not the home kubeconfig.
    (account / "token").unlink()
    with pytest.raises(KubeConfigError, match="in-cluster"):
        load_config(None, IN_POD, account, home)
    # Half the in-cluster variables.
    with pytest.raises(KubeConfigError, match="KUBERNETES_SERVICE_PORT"):
        load_config(None, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, account, home)


def test_kubeconfig_holds_a_list_of_paths_as_kubectl_reads_it(tmp_path):
    second = kubeconfig(tmp_path / "second.json", "https://second.example:6443")
    env = {"KUBECONFIG": f"{tmp_path / 'absent.json'}:{second}"}
    assert load_config(None, env, tmp_path / "sa", tmp_path / "home").host == (
        "https://second.example:6443"
    )
    env = {"KUBECONFIG": f"{tmp_path / 'a.json'}:{tmp_path / 'b.json'}"}
    with pytest.raises(KubeConfigError, match="not found"):
        load_config(None, env, tmp_path / "sa", tmp_path / "home")


def test_the_clients_own_retries_are_off(sources):
    flag, env, account, home = sources
    assert load_config(str(flag), env, account, home).retries == 0


def core_for(server) -> client.CoreV1Api:
    configuration = client.Configuration()
    configuration.host = server.url
    configuration.retries = 0
    return client.CoreV1Api(client.ApiClient(configuration))


def test_404_is_raised_at_once_with_its_status(kube_api):  # noqa: F811
    core = core_for(kube_api)
    started = time.monotonic()
    with pytest.raises(KubeError) as caught:
        kube.call_json("get pod default/ghost", core.read_namespaced_pod, "ghost", "default")
    err = caught.value
    assert err.status == 404 and err.reason == "NotFound"
    assert not err.retryable
    assert str(err).startswith("get pod default/ghost: HTTP 404")
    gets = [r for r in kube_api.requests if r == ("GET", "/api/v1/namespaces/default/pods/ghost")]
    assert len(gets) == 1  # not retried
    assert time.monotonic() - started < 1.0


def test_503_is_retried_until_it_succeeds(kube_api):  # noqa: F811
    kube_api.create("nodes", {"metadata": {"name": "n1"}})
    kube_api.fault("GET", "/api/v1/nodes", 503, times=2)
    waits: list[float] = []
    listing = kube.call_json("list nodes", core_for(kube_api).list_node, sleep=waits.append)
    assert [n["metadata"]["name"] for n in listing["items"]] == ["n1"]
    assert len(waits) == 2 and waits[1] > waits[0] * 0.5  # backed off
    assert kube_api.requests.count(("GET", "/api/v1/nodes")) == 3


def test_retries_are_bounded(kube_api):  # noqa: F811
    kube_api.fault("GET", "/api/v1/nodes", 503, times=10)
    with pytest.raises(KubeError) as caught:
        kube.call_json("list nodes", core_for(kube_api).list_node, attempts=3, sleep=lambda s: None)
    assert caught.value.status == 503 and caught.value.retryable
    assert kube_api.requests.count(("GET", "/api/v1/nodes")) == 3


def test_409_and_422_are_the_callers_and_not_retried(kube_api):  # noqa: F811
    core = core_for(kube_api)
    kube_api.create("nodes", {"metadata": {"name": "n1"}})
    with pytest.raises(KubeError) as caught:
        kube.call_json("create node", core.create_node, {"metadata": {"name": "n1"}})
    assert caught.value.status == 409 and caught.value.reason == "AlreadyExists"
    assert kube_api.requests.count(("POST", "/api/v1/nodes")) == 1
    kube_api.fault("PATCH", "/api/v1/nodes/n1", 422)
    with pytest.raises(KubeError) as caught:
        kube.call_json("patch node", core.patch_node, "n1", {"metadata": {}}, sleep=pytest.fail)
    assert caught.value.status == 422


def test_a_create_is_not_retried_after_a_server_error_but_is_after_429(kube_api):  # noqa: F811
    core = core_for(kube_api)
    kube_api.fault("POST", "/api/v1/nodes", 500)
    with pytest.raises(KubeError) as caught:
        kube.call_json("create node", core.create_node, {"metadata": {"name": "a"}},
                       idempotent=False, sleep=pytest.fail)  # fmt: skip
    assert caught.value.status == 500
    kube_api.fault("POST", "/api/v1/nodes", 429)
    waits: list[float] = []
    kube.call_json("create node", core.create_node, {"metadata": {"name": "b"}},
                   idempotent=False, sleep=waits.append)  # fmt: skip
    assert len(waits) == 1
    assert [n["metadata"]["name"] for n in kube_api.objects("nodes")] == ["b"]


def test_an_unreachable_server_is_retried_then_reported_with_status_0(kube_api):  # noqa: F811
    core = core_for(kube_api)
    kube_api.close()
    waits: list[float] = []
    with pytest.raises(KubeError) as caught:
        kube.call_json("list nodes", core.list_node, timeout=2.0, sleep=waits.append)
    assert caught.value.status == 0 and caught.value.retryable
    assert len(waits) == kube.ATTEMPTS - 1
    assert str(caught.value).startswith("list nodes: ")


def test_every_component_loads_its_configuration_through_the_core(tmp_path, monkeypatch):
    """The device plugin, the DRA driver, the extender and inspect choose the same server."""
    from cgpu.deviceplugin.kube import client as plugin_kube
    from cgpu.dra import kubeapi as dra_kubeapi
    from cgpu.inspect import cli as inspect_cli
    from cgpu.scheduler import kubeapi as sched_kubeapi

    env_file = kubeconfig(tmp_path / "env.json", "https://env.example:6443")
    monkeypatch.setenv("KUBECONFIG", str(env_file))
    for var, value in IN_POD.items():
        monkeypatch.setenv(var, value)  # in a pod too: $KUBECONFIG still wins, for everyone
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    hosts = {
        "device plugin": plugin_kube.connect(None, "n1")._core.api_client.configuration.host,
        "dra": dra_kubeapi.connect(None, "n1")._api.api_client.configuration.host,
        "scheduler": sched_kubeapi.load_configuration(None).host,
        "inspect": inspect_cli._core()[1],
    }
    assert set(hosts.values()) == {"https://env.example:6443"}, hosts
    assert plugin_kube.KubeError is dra_kubeapi.KubeError is sched_kubeapi.KubeError is KubeError

    monkeypatch.delenv("KUBECONFIG")
    for var in IN_POD:
        monkeypatch.delenv(var)
    assert plugin_kube.connect(None, "n1") is None  # no source: the plugin runs standalone
    with pytest.raises(KubeError, match="pass --kubeconfig"):
        dra_kubeapi.connect(None, "n1")
    with pytest.raises(KubeConfigError):
        sched_kubeapi.load_configuration(None)
    with pytest.raises(inspect_cli.InspectError, match=r"\$KUBECONFIG not set"):
        inspect_cli._core()


def throttled_once(header: str):
    """A client method that answers 429 with `Retry-After: header` once, then "ok"."""
    from kubernetes.client.exceptions import ApiException

    calls: list[int] = []

    def method(**kwargs: object) -> str:
        calls.append(1)
        if len(calls) == 1:
            err = ApiException(status=429, reason="Too Many Requests")
            err.headers = {"Retry-After": header}
            raise err
        return "ok"

    return method


@pytest.mark.parametrize("header, expected", [("1", 1.0), ("30", kube.BACKOFF_MAX_S)])
def test_a_retry_after_is_honoured_up_to_a_cap(header, expected):
    waits: list[float] = []
    assert kube.call("list", throttled_once(header), sleep=waits.append) == "ok"
    assert waits == [expected]


def test_no_other_module_loads_a_configuration_or_wraps_the_clients_errors():
    """One loader, one error type: a fifth way to the API server fails this test."""
    import cgpu

    package = Path(cgpu.__file__).resolve().parent
    own = package / "core" / "kube.py"
    markers = ("load_kube_config", "InClusterConfigLoader", "ApiException", "class KubeError")
    found = [
        f"{path.relative_to(package)}: {marker}"
        for path in sorted(package.rglob("*.py"))
        if path != own
        for marker in (*markers, "load_incluster_config")
        if marker in path.read_text()
    ]
    assert found == []
    assert all(marker in own.read_text() for marker in markers)
