"""The GPUs a container sees (of those `cgpu.core.gpus.list_gpus` finds), its slice on each."""

from __future__ import annotations

import re

from cgpu.core.gpus import GPU
from cgpu.core.layout import ENV_CDI_DEVICE_PREFIX, ENV_VISIBLE_DEVICES, UUID_RE
from cgpu.core.request import MAX_ORDINALS, Fixed, Share, slice_for
from cgpu.hooks.errors import RequestError

_INDEX_RE = re.compile(r"^[0-9]{1,4}$")
CDI_DEVICE_RE = re.compile(rf"^{re.escape(ENV_CDI_DEVICE_PREFIX)}[0-9]{{1,4}}$")
# NVIDIA_VISIBLE_DEVICES values that name no GPU in particular. "void" is what NVIDIA's CDI spec
# sets while it injects GPUs itself, so the container may see any of them: slice them all.
_UNNAMED = ("", "all", "void")


def _find(gpus: list[GPU], ident: str, variable: str) -> GPU:
    ident = ident.strip()
    if _INDEX_RE.match(ident):
        found = [g for g in gpus if g.index == int(ident)]
    elif UUID_RE.match(ident):
        found = [g for g in gpus if g.uuid == ident]
    else:
        raise RequestError(f"{variable}: {ident[:100]!r} is neither a GPU index nor a GPU UUID")
    if not found:
        raise RequestError(f"{variable}: no GPU {ident!r} on this host")
    return found[0]


def container_gpus(env: dict[str, str], gpus: list[GPU]) -> list[GPU]:
    """The GPUs the container sees, in the order its processes number them.

    A cgpu CDI device sets CGPU_CDI_DEVICE_<index>=<uuid>; otherwise NVIDIA_VISIBLE_DEVICES
    names indexes or UUIDs. Unset, empty, "all" or "void" mean every GPU; "none" means none.
    """
    cdi = [(name, value) for name, value in env.items() if CDI_DEVICE_RE.match(name)]
    if cdi:
        chosen = {_find(gpus, value, name) for name, value in cdi}
    else:
        value = env.get(ENV_VISIBLE_DEVICES, "").strip()
        if value == "none":
            return []
        if value in _UNNAMED:
            return list(gpus)
        chosen = {_find(gpus, item, ENV_VISIBLE_DEVICES) for item in value.split(",")}
    return sorted(chosen, key=lambda g: g.index)


def cuda_order(env: dict[str, str], visible: list[GPU]) -> list[GPU]:
    """The devices by CUDA ordinal: CUDA_VISIBLE_DEVICES applied as the driver applies it.

    Entries are ordinals into `visible` or UUID prefixes; the list stops at the first entry
    that is invalid, out of range, ambiguous or repeated.
    """
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return list(visible)
    order: list[GPU] = []
    for item in (i.strip() for i in value.split(",")):
        if _INDEX_RE.match(item) and int(item) < len(visible):
            matches = [visible[int(item)]]
        elif item.startswith("GPU-") and UUID_RE.match(item):
            matches = [g for g in visible if g.uuid.startswith(item)]
        else:
            break
        if len(matches) != 1 or matches[0] in order:
            break
        order.append(matches[0])
    return order


def slices(request: Fixed | Share, visible: list[GPU], env: dict[str, str]) -> dict[str, int]:
    """The slice in bytes of each GPU the container sees, by UUID, as the shim computes it.

    A GPU at CUDA ordinal i gets `slice_for(request, i, total)`: CGPU_MEM_LIMIT_<i>, else
    CGPU_MEM_LIMIT, else the share. A GPU the container sees but CUDA_VISIBLE_DEVICES hides
    (a process may unset it) gets what an ordinal without its own limit gets. A limit for an
    ordinal the container does not have limits nothing, as in the shim.
    """
    limits: dict[str, int] = {}
    for gpu in visible:
        # MAX_ORDINALS is past every CGPU_MEM_LIMIT_<i>: the default or the share applies.
        fallback = slice_for(request, MAX_ORDINALS, gpu.total_bytes)
        if fallback is not None:
            limits[gpu.uuid] = fallback
    for ordinal, gpu in enumerate(cuda_order(env, visible)):
        size = slice_for(request, ordinal, gpu.total_bytes)
        if size is not None:
            limits[gpu.uuid] = size
    return {g.uuid: limits[g.uuid] for g in visible if g.uuid in limits}
