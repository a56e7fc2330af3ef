"""The summary and `-d` tables in the seeds' layout, and the same data as JSON."""

from __future__ import annotations

from typing import Any

from .model import PENDING, GpuNode
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
    text = "NAME\tIPADDRESS\t" + "".join(f"GPU{i}({gpu_label})\t" for i in range(max_gpus))
    if has_pending:
        text += "PENDING(Allocated)\t"
    text += "GPU Memory\n" if mib else "GPU Memory(GiB)\n"
    used_all = total_all = 0
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
        row += f"{used}/{node.total}\n"
        text += row
        dash = dash or len(row) + (40 if mib else 20)
        used_all += used
        total_all += node.total
    text += "-" * dash + "\n"
    text += "Allocated/Total GPU Memory In Cluster:\n"
    text += f"{used_all}/{total_all} ({_percent(used_all, total_all)}%)\t\n"
    return tabulate(text)


def details(nodes: list[GpuNode]) -> str:
    """`kubectl inspect cgpu -d`: per node, one row per pod with its amount on each GPU."""
    text = ""
    used_all = total_all = 0
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
        text += header + "\n"
        rows = ""
        for pod in node.pods:
            rows += f"{pod.name}\t{pod.namespace}\t"
            rows += "".join(f"{pod.per_gpu.get(i, 0)}\t" for i in columns) + "\n"
        dash = dash or len(rows) + 10
        text += rows
        used = node.used
        text += f"Allocated :\t{used} ({_percent(used, node.total)}%)\t\n"
        text += f"Total :\t{node.total} \t\n"
        text += "-" * dash + "\n"
        used_all += used
        total_all += node.total
    text += "\nAllocated/Total GPU Memory In Cluster:\t"
    text += f"{used_all}/{total_all} ({_percent(used_all, total_all)}%)\t\n"
    return tabulate(text)


def as_json(nodes: list[GpuNode]) -> dict[str, Any]:
    """The same data as JSON (gpushare's inspect keys, plus unit, IP and pending)."""
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
    return {"nodes": out, "usedGPU": used, "totalGPU": total}
