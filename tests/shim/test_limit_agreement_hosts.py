"""The shim, the OCI hook and the device plugin read the limit variables alike.

Every environment of tests/shim/limit_cases.py runs on a simulated 2-GPU node: the shim in a
CUDA program (a process), the hook through `requested_slices` (the slices its prestart writes
into cgpu.conf) and the device plugin through `cgpu.deviceplugin.limits.slices` (the slices its
Allocate writes). All three accept or refuse alike, name the same variable, and give each GPU
the same slice, which is also the one the table expects.
"""

from __future__ import annotations

import pytest
from limit_cases import CASES, GiB, LimitCase  # pytest puts tests/shim on sys.path
from test_limit_agreement import limit_probe, run_shim, shim_slices  # noqa: F401 (fixture)

from cgpu.core.gpus import GPU
from cgpu.core.request import LimitError
from cgpu.deviceplugin.rm import slices as plugin_slices
from cgpu.hooks.errors import RequestError
from cgpu.hooks.hook import requested_slices

SECOND = 8 * GiB  # the second GPU of the node where a case names one device


def two_gpu_case(case: LimitCase) -> LimitCase:
    """The case on a 2-GPU node: its own totals, padded with an 8 GiB second GPU."""
    totals = case.totals if len(case.totals) >= 2 else (*case.totals, SECOND)
    return LimitCase(case.id, case.env, case.slices, case.refused, totals)


def node(totals: tuple[int, ...]) -> list[GPU]:
    return [
        GPU(i, f"GPU-5eed0000-0000-4000-8000-{i:012d}", "sim", total)
        for i, total in enumerate(totals)
    ]


def hook_outcome(env: dict[str, str], gpus: list[GPU]) -> dict[str, int] | str:
    """The hook's slices by UUID, or the variable it names when it refuses."""
    try:
        return requested_slices(dict(env), lambda: gpus)
    except RequestError as exc:
        assert exc.variable is not None, f"refused, but not for a limit variable: {exc}"
        assert "\n" not in str(exc)
        return exc.variable


def plugin_outcome(env: dict[str, str], gpus: list[GPU]) -> dict[str, int] | str:
    """The device plugin's slices by UUID, or the variable it names when it refuses."""
    try:
        return plugin_slices.slices(env, gpus)
    except LimitError as exc:
        return exc.variable


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_shim_hook_and_device_plugin_agree(limit_probe, shim_env, case: LimitCase):  # noqa: F811
    case = two_gpu_case(case)
    gpus = node(case.totals)
    proc = run_shim(limit_probe, shim_env, case)
    hook = hook_outcome(case.env, gpus)
    plugin = plugin_outcome(case.env, gpus)
    if case.refused is not None:
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert f" {case.refused}" in proc.stderr, proc.stderr
        assert hook == case.refused
        assert plugin == case.refused
        return
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert isinstance(hook, dict), f"the hook refused {hook}, the shim accepted"
    assert isinstance(plugin, dict), f"the plugin refused {plugin}, the shim accepted"
    # What a program sees: the slice, or the whole device where the container has none.
    seen = shim_slices(proc.stdout)
    for name, found in (("hook", hook), ("plugin", plugin)):
        shown = [found.get(g.uuid, g.total_bytes) for g in gpus]
        assert shown == seen, f"{name} {found} vs shim {seen}"
    # The table's own devices get exactly the expected slices (None: no slice at all).
    for gpu, expected in zip(gpus, case.slices, strict=False):
        assert hook.get(gpu.uuid) == expected
        assert plugin.get(gpu.uuid) == expected
    assert hook == plugin
