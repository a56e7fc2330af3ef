from kube.objects import gpu_node, gpu_pod
from sched_peer import SchedulerPeer, url_of, wait_until


def test_smoke(kube_api, extender):
    kube_api.create("nodes", gpu_node("n1", 2, 8))
    kube_api.create("pods", gpu_pod("p1", 4))
    ext = extender()
    peer = SchedulerPeer(kube_api, url_of(ext))
    d = peer.schedule("default", "p1")
    assert d.node == "n1", d
    pod = kube_api.get("pods", "p1")
    print(pod["metadata"]["annotations"])
    wait_until(lambda: ext.state.assumed_count() == 0)
    print(ext.state.inspect())
