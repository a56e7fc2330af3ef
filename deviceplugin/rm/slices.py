"""The slices the device plugin writes into cgpu.conf, from the limit variables it hands out.

The plugin does not compute slices on its own: it writes the variables a container gets
(gpushare's `ALIYUN_COM_GPU_MEM_CONTAINER` over `ALIYUN_COM_GPU_MEM_DEV`) and reads them back
with the shim's own parser (`cgpu.core.request`), so cgpu.conf holds exactly what the shim
would compute from those variables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cgpu.core.gpus import GPU
from cgpu.core.layout import ENV_GPU_MEM_CONTAINER, ENV_GPU_MEM_DEV
from cgpu.core.request import parse_env, slice_for


def share_env(units: int, of: int) -> dict[str, str]:
    """The gpushare variables for `units` of a device's `of` units."""
    return {ENV_GPU_MEM_CONTAINER: str(units), ENV_GPU_MEM_DEV: str(of)}


def slices(env: Mapping[str, str], gpus: Sequence[GPU]) -> dict[str, int]:
    """The slice by UUID of each of `gpus` (CUDA ordinal = position) under the limit variables
    of `env`; GPUs without a slice are left out. Raises `cgpu.core.request.LimitError`."""
    request = parse_env(env)
    found = {}
    for ordinal, gpu in enumerate(gpus):
        size = slice_for(request, ordinal, gpu.total_bytes)
        if size is not None:
            found[gpu.uuid] = size
    return found


def unit_slices(units_per_gpu: int, gpus: Sequence[tuple[GPU, int]]) -> dict[str, int]:
    """The slice by UUID of `units_per_gpu` units on each (GPU, its units) pair: each GPU's
    share of its own units, read back through `slices` from `share_env`."""
    found: dict[str, int] = {}
    for gpu, of in gpus:
        found.update(slices(share_env(units_per_gpu, of), [gpu]))
    return found
