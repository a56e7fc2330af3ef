"""The summary and `-d` tables in the seeds' layout, and the same data as JSON.

When some node advertises the compute share, compute columns follow the memory ones (and the
JSON gains compute keys); otherwise the output is gpushare's, character for character.
"""

from __future__ import annotations

from typing import Any

from .computeview import NodeCompute, details_block
from .model import PENDING, GpuNode, uses_compute
from .tabwriter import tabulate


def _percent(used: int, total: int) -> int:
    return int(used / total * 100) if total > 0 else 0


def _mib(nodes: list[GpuNode]) -> bool:
    """Whether the cluster advertises MiB (gpushare's layout) rather than GiB (cGPU's)."""
    return bool(nodes) and all(n.unit == "MiB" for n in nodes)


def summary(nodes: list[GpuNode]) -> str:
    """`kubectl inspect cgpu`: one row per node, one column per GPU, then the cluster line."""
    mib = _mib(nodes)
    gpu_label = "Allocated MiB/Total MiB" if mib else "Allocated/Total"
    max_gpus = max((n.gpu_count for n in nodes), default=0)
    has_pending = any(n.pending is not None for n in nodes)
    compute = uses_compute(nodes)
    text = "NAME\tIPADDRESS\t" + "".join(f"GPU{i}({gpu_label})\t" for i in range(max_gpus))
    if has_pending:
        text += "PENDING(Allocated)\t"
    text += "GPU Memory" if mib else "GPU Memory(GiB)"
    if compute:
        text += "\t" + "".join(f"GPU{i}(Compute %)\t" for i in range(max_gpus))
        text += "GPU Compute(%)"
    text += "\n"
    used_all = total_all = compute_all = compute_total = 0
    dash = 0
    for node in nodes:
        row = f"{node.name}\t{node.internal_ip}\t"
        used = 0
        for i in range(max_gpus):
            device = node.devices.get(i)
            if device is None:
                row += "0/0\t"  # a GPU this node does not have
            else:
                row += f"{device.used}/{device.total}\t"
                used += device.used
        if has_pending:
            pending = node.pending
            row += f"{pending.used}\t" if pending else "\t"
            used += pending.used if pending else 0
        row += f"{used}/{node.total}"
        if compute:
            row += "\t" + _compute_cells(node, max_gpus)
        row += "\n"
        text += row
        dash = dash or len(row) + (40 if mib else 20)
        used_all += used
        total_all += node.total
        compute_all += node.compute_used
        compute_total += node.compute_total
    text += "-" * dash + "\n"
    text += "Allocated/Total GPU Memory In Cluster:\n"
    text += f"{used_all}/{total_all} ({_percent(used_all, total_all)}%)\t\n"
    if compute:
        text += "Allocated/Total GPU Compute In Cluster (%):\n"
        text += f"{compute_all}/{compute_total} ({_percent(compute_all, compute_total)}%)\t\n"
    return tabulate(text)


def _compute_cells(node: GpuNode, max_gpus: int) -> str:
    """The summary's compute cells of one node: used/total percent per GPU, then the node's
    (which counts pods without a GPU index too)."""
    cells = ""
    for i in range(max_gpus):
        device = node.devices.get(i)
        cells += f"{device.compute_used}/{device.compute_total}\t" if device else "0/0\t"
    return cells + f"{node.compute_used}/{node.compute_total}"


def details(nodes: list[GpuNode], host: dict[str, NodeCompute] | None = None) -> str:
    """`kubectl inspect cgpu -d`: per node, one row per pod with its amount on each GPU; then,
    for a node in `host`, the compute host view its exporter serves."""
    text = ""
    used_all = total_all = compute_all = compute_total = 0
    compute = uses_compute(nodes)
    dash = 0
    for number, node in enumerate(nodes):
        if number:
            text += "\n"
        text += f"NAME:\t{node.name}\nIPADDRESS:\t{node.first_address}\n\n"
        columns = list(range(node.gpu_count))
        header = "NAME\tNAMESPACE\t" + "".join(f"GPU{i}(Allocated)\t" for i in columns)
        if node.pending is not None:
            columns.append(PENDING)
            header += "Pending(Allocated)\t"
        if compute:
            header += "".join(f"GPU{i}(Compute %)\t" for i in columns if i != PENDING)
            header += "Pending(Compute %)\t" if PENDING in columns else ""
        text += header + "\n"
        rows = ""
        for pod in node.pods:
            rows += f"{pod.name}\t{pod.namespace}\t"
            rows += "".join(f"{pod.per_gpu.get(i, 0)}\t" for i in columns)
            if compute:
                rows += "".join(f"{pod.compute.get(i, 0)}\t" for i in columns)
            rows += "\n"
        dash = dash or len(rows) + 10
        text += rows
        used = node.used
        text += f"Allocated :\t{used} ({_percent(used, node.total)}%)\t\n"
        text += f"Total :\t{node.total} \t\n"
        if compute:
            share = node.compute_used
            text += f"Allocated Compute :\t{share}% ({_percent(share, node.compute_total)}%)\t\n"
            text += f"Total Compute :\t{node.compute_total}% \t\n"
        if host and node.name in host:
            text += details_block(host[node.name])
        text += "-" * dash + "\n"
        used_all += used
        total_all += node.total
        compute_all += node.compute_used
        compute_total += node.compute_total
    text += "\nAllocated/Total GPU Memory In Cluster:\t"
    text += f"{used_all}/{total_all} ({_percent(used_all, total_all)}%)\t\n"
    if compute:
        text += "Allocated/Total GPU Compute In Cluster (%):\t"
        text += f"{compute_all}/{compute_total} ({_percent(compute_all, compute_total)}%)\t\n"
    return tabulate(text)


def _with_compute(out: list[dict[str, Any]], nodes: list[GpuNode]) -> None:
    """Add the compute keys (percent) to the JSON of each node, device and pod."""
    for entry, node in zip(out, nodes, strict=True):
        pending = node.pending
        entry["totalCompute"] = node.compute_total
        entry["usedCompute"] = node.compute_used
        entry["pendingCompute"] = pending.compute_used if pending else 0
        for dev in entry["devs"]:
            device = node.devices[dev["id"]]
            dev["totalCompute"] = device.compute_total
            dev["usedCompute"] = device.compute_used
            if device.unlimited:
                # No computeCeiling: the plugin cannot tell whether a node runs the arbiter,
                # under which these pods are best effort and the limits hold whole.
                dev["unlimitedPods"] = device.unlimited
            for pod, share in zip(dev["pods"], device.pods, strict=True):
                pod["usedCompute"] = share.compute.get(device.index, 0)
        for pod, share in zip(entry["pendingPods"], pending.pods if pending else [], strict=True):
            pod["usedCompute"] = share.compute.get(PENDING, 0)


def as_json(nodes: list[GpuNode]) -> dict[str, Any]:
    """The same data as JSON (gpushare's inspect keys, plus unit, IP and pending; compute keys
    when some node advertises the compute share)."""
    out = []
    for node in nodes:
        devices = [node.devices[i] for i in sorted(node.devices) if i != PENDING]
        pending = node.pending
        out.append(
            {
                "name": node.name,
                "ipAddress": node.internal_ip,
                "unit": node.unit,
                "gpuCount": node.gpu_count,
                "totalGPU": node.total,
                "usedGPU": node.used,
                "pendingGPU": pending.used if pending else 0,
                "devs": [
                    {
                        "id": d.index,
                        "totalGPU": d.total,
                        "usedGPU": d.used,
                        "pods": [
                            {
                                "name": p.name,
                                "namespace": p.namespace,
                                "usedGPU": p.per_gpu[d.index],
                            }
                            for p in d.pods
                        ],
                    }
                    for d in devices
                ],
                "pendingPods": [
                    {"name": p.name, "namespace": p.namespace, "usedGPU": p.per_gpu[PENDING]}
                    for p in (pending.pods if pending else [])
                ],
            }
        )
    used = sum(n["usedGPU"] for n in out)
    total = sum(n["totalGPU"] for n in out)
    result: dict[str, Any] = {"nodes": out, "usedGPU": used, "totalGPU": total}
    if uses_compute(nodes):
        _with_compute(out, nodes)
        result["usedCompute"] = sum(n.compute_used for n in nodes)
        result["totalCompute"] = sum(n.compute_total for n in nodes)
    return result
