"""The exporter's metric families: names, help texts, types and label names (the contract of
docs/operations-exporter.md), and the set one scrape fills."""

from __future__ import annotations

from prometheus_client.core import Metric

from cgpu.exporter.exposition import Family, FamilySpec

CONTAINER_LABELS = ("namespace", "pod", "container", "gpu_uuid", "gpu_index")
CLAIM_LABELS = ("namespace", "pod", "container", "claim")
GPU_LABELS = ("gpu_uuid", "gpu_index")
GPU_MODEL_LABELS = ("gpu_uuid", "gpu_index", "model")


def _gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> FamilySpec:
    return FamilySpec(name, documentation, "gauge", labels)


LIMIT = _gauge(
    "cgpu_container_gpu_memory_limit_bytes",
    "The container's GPU memory slice on this GPU, in bytes.",
    CONTAINER_LABELS,
)
USED = _gauge(
    "cgpu_container_gpu_memory_used_bytes",
    "GPU memory the container's live processes hold on this GPU, in bytes (cgpu ledger).",
    CONTAINER_LABELS,
)
PEAK = _gauge(
    "cgpu_container_gpu_memory_peak_bytes",
    "Highest GPU memory use the ledger recorded for the container on this GPU, in bytes.",
    CONTAINER_LABELS,
)
PROCESSES = _gauge(
    "cgpu_container_gpu_processes",
    "Live processes of the container holding memory on this GPU.",
    CONTAINER_LABELS,
)
GPU_TOTAL = _gauge(
    "cgpu_gpu_memory_total_bytes", "GPU memory as NVML reports it, in bytes.", GPU_MODEL_LABELS
)
GPU_USED = _gauge(
    "cgpu_gpu_memory_used_bytes",
    "GPU memory used by every process on the GPU, as NVML reports it, in bytes.",
    GPU_MODEL_LABELS,
)
GPU_ALLOCATED = _gauge(
    "cgpu_gpu_memory_allocated_bytes",
    "Sum of the slices of the containers on this GPU, in bytes.",
    GPU_LABELS,
)
GPU_CONTAINERS = _gauge("cgpu_gpu_containers", "Containers with a slice on this GPU.", GPU_LABELS)
HOST_USED = _gauge(
    "cgpu_container_gpu_memory_host_used_bytes",
    "GPU memory NVML on the host shows for the container's processes on this GPU, in "
    "bytes, whether or not they went through the shim.",
    CONTAINER_LABELS,
)
OVER_SLICE = _gauge(
    "cgpu_container_over_slice",
    "1 when the container's host-observed use exceeds its slice by more than the "
    "allowance (--over-slice-allowance), else 0.",
    CONTAINER_LABELS,
)
GPU_UNATTRIBUTED = _gauge(
    "cgpu_gpu_memory_unattributed_bytes",
    "GPU memory NVML shows for processes that belong to no cgpu container, in bytes.",
    GPU_LABELS,
)
COMPUTE_LIMIT = _gauge(
    "cgpu_container_gpu_compute_limit_percent",
    "The container's compute share of this GPU, in percent of its time (containers "
    "with a compute limit only).",
    CONTAINER_LABELS,
)
COMPUTE_INFO = _gauge(
    "cgpu_container_gpu_compute_info",
    "1 for a container that takes turns on this GPU: its compute policy (fixed or share, from "
    "its cgpu.conf; best-effort for one without a limit on a GPU where another has one, from "
    "the compute arbiter) and the priority of its turns (high, normal or low).",
    (*CONTAINER_LABELS, "policy", "priority"),
)
COMPUTE_USED = _gauge(
    "cgpu_container_gpu_compute_used_percent",
    "The container's use of this GPU's time over about the last second, in percent "
    "(containers with a compute limit only): the turns `cgpu compute-arbiter` charged it, "
    "from its status file (host-written), while the arbiter serves the container; else as "
    "the container's own shim measured it (its ledger, which the container can write). "
    "GPU time taken outside its turns is in cgpu_container_gpu_compute_host_percent.",
    CONTAINER_LABELS,
)
COMPUTE_HOST = _gauge(
    "cgpu_container_gpu_compute_host_percent",
    "The share of this GPU's time the host attributes to the container over the last 10 s, "
    "in percent, from NVML's per-process samples (`cgpu compute-arbiter`'s status file; "
    "never from what the container writes). Absent where NVML gives no per-process samples.",
    CONTAINER_LABELS,
)
OUT_OF_TURN = FamilySpec(
    "cgpu_container_gpu_compute_out_of_turn_seconds",
    "GPU time the host saw the container take outside its turns and charged to it, in "
    "seconds, since `cgpu compute-arbiter` started (it resets with the arbiter).",
    "counter",
    CONTAINER_LABELS,
)
OVER_COMPUTE = _gauge(
    "cgpu_container_over_compute",
    "1 while `cgpu compute-arbiter` flags the container for GPU work outside its turns on "
    "this GPU, else 0.",
    CONTAINER_LABELS,
)
CLAIM_INFO = _gauge(
    "cgpu_container_claim_info",
    "1 for a container whose slice comes from a DRA claim (driver gpu.cgpu.io): its "
    "namespace, pod and container labels, as on the container series, and the claim.",
    CLAIM_LABELS,
)
GPU_HEALTHY = _gauge(
    "cgpu_gpu_healthy",
    "1 when NVML answered for this GPU at this scrape, 0 when the query failed.",
    GPU_MODEL_LABELS,
)
KILLS = FamilySpec(
    "cgpu_enforcement_kills",
    "Processes `cgpu exporter --enforce` SIGKILLed because their container stayed over "
    "its slice (host-observed) for the grace period.",
    "counter",
    CONTAINER_LABELS,
)
LEDGER_ERRORS = FamilySpec(
    "cgpu_ledger_errors",
    "Ledger or config files skipped because they were corrupt, truncated, foreign, of "
    "another version or unreadable, counted once per scrape that met them.",
    "counter",
    ("reason",),
)
COMPUTE_STATUS_UP = _gauge(
    "cgpu_exporter_compute_status_up",
    "1 when this scrape read a current status file of `cgpu compute-arbiter` (written in the "
    "last 5 s), else 0: the compute host view is then missing.",
)
COMPUTE_STATUS_ERRORS = FamilySpec(
    "cgpu_compute_status_errors",
    "Reads of `cgpu compute-arbiter`'s status file that were stale, corrupt, untrusted or "
    "failed (the whole file skipped), or met an entry of the wrong shape (reason entry: that "
    "entry skipped), counted once per scrape that met them.",
    "counter",
    ("reason",),
)
LEDGERS_SKIPPED = _gauge(
    "cgpu_ledgers_skipped", "Container directories skipped at this scrape, by reason.", ("reason",)
)
NVML_UP = _gauge("cgpu_exporter_nvml_up", "1 when NVML is initialised and answering, else 0.")
POD_RESOURCES_UP = _gauge(
    "cgpu_exporter_pod_resources_up",
    "1 when the kubelet's pod-resources API answered, else 0 (labels from meta.json).",
)
SCRAPE_DURATION = _gauge(
    "cgpu_exporter_scrape_duration_seconds",
    "Time this scrape spent reading ledgers, NVML and pod-resources.",
)


class Families:
    """The metric families of one scrape."""

    def __init__(self) -> None:
        self.limit = Family(LIMIT)
        self.used = Family(USED)
        self.peak = Family(PEAK)
        self.processes = Family(PROCESSES)
        self.gpu_total = Family(GPU_TOTAL)
        self.gpu_used = Family(GPU_USED)
        self.gpu_allocated = Family(GPU_ALLOCATED)
        self.gpu_containers = Family(GPU_CONTAINERS)
        self.host_used = Family(HOST_USED)
        self.over_slice = Family(OVER_SLICE)
        self.gpu_unattributed = Family(GPU_UNATTRIBUTED)
        self.compute_limit = Family(COMPUTE_LIMIT)
        self.compute_info = Family(COMPUTE_INFO)
        self.compute_used = Family(COMPUTE_USED)
        self.compute_host = Family(COMPUTE_HOST)
        self.out_of_turn = Family(OUT_OF_TURN)
        self.over_compute = Family(OVER_COMPUTE)
        self.claim_info = Family(CLAIM_INFO)
        self.gpu_healthy = Family(GPU_HEALTHY)

    def all(self) -> list[Metric]:
        """The families in the order they are exposed."""
        return [
            self.limit,
            self.used,
            self.peak,
            self.processes,
            self.compute_limit,
            self.compute_info,
            self.compute_used,
            self.compute_host,
            self.out_of_turn,
            self.over_compute,
            self.host_used,
            self.over_slice,
            self.claim_info,
            self.gpu_total,
            self.gpu_used,
            self.gpu_allocated,
            self.gpu_containers,
            self.gpu_unattributed,
            self.gpu_healthy,
        ]
