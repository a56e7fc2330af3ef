"""Simulated devices: the built libraries, cuInit, CGPU_SIM_* and CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from simkit import GiB, MiB, exported, json_out


def test_build_artifacts(simlib: Path) -> None:
    if not shutil.which("readelf"):
        pytest.skip("readelf (binutils) is needed")
    for name, other in (("libcuda.so.1", "libnvidia-ml"), ("libnvidia-ml.so.1", "libcuda")):
        lib = simlib / name
        assert lib.is_file() and not lib.is_symlink()
        dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True).stdout
        assert f"Library soname: [{name}]" in dyn
        assert other not in dyn  # the two libraries are independent
    names = exported(simlib / "libcuda.so.1")
    assert names and all(n.startswith("cu") for n in names), "only API symbols are exported"
    names = exported(simlib / "libnvidia-ml.so.1")
    # and the one test oracle, documented in native/sim/README.md
    api = [n for n in names if n != "cgpuSimProcessBusyNs"]
    assert api and all(n.startswith("nvml") for n in api), "only API symbols are exported"


def test_calls_before_init_and_init_flags(run) -> None:
    out = run("preinit").stdout.split()
    assert out == ["version", "13000", "init", "0", "again", "0"]
    out = run("preinit", driver_version=12040).stdout.split()
    assert out[:2] == ["version", "12040"]


def test_default_device(run) -> None:
    [dev] = json_out(run("devices"))
    assert dev == {
        "name": "cgpu Simulated GPU",
        "uuid": "GPU-5eed0000-0000-4000-8000-000000000000",
        "total": 16 * GiB,
        "total32": 0xFFFFFFFF,
        "cc": "9.0",
        "sms": 132,
        "vmm": 1,
        "pools": 1,
        "bus": "0000:18:00.0",
        "busid": 0x18,
    }


def test_devices_from_env(run) -> None:
    uuids = [
        "GPU-11111111-2222-3333-4444-555555555555",
        "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "GPU-ABCDEF01-0000-0000-0000-000000000001",
    ]
    devs = json_out(
        run("devices", devices=3, memory="1GiB,2048MiB,3G", uuids=",".join(uuids), name="Tesla Sim")
    )
    assert [d["uuid"] for d in devs] == ["GPU-" + u[4:].lower() for u in uuids]
    assert [d["total"] for d in devs] == [GiB, 2 * GiB, 3 * GiB]
    assert {d["name"] for d in devs} == {"Tesla Sim"}
    assert len({d["bus"] for d in devs}) == 3
    # One memory value applies to all; the count follows the longest list when unset.
    devs = json_out(run("devices", memory="512MiB", uuids=",".join(uuids[:2])))
    assert [d["total"] for d in devs] == [512 * MiB] * 2
    devs = json_out(run("devices", devices=2))
    assert devs[1]["uuid"] == "GPU-5eed0000-0000-4000-8000-000000000001"


def test_cuda_visible_devices(run) -> None:
    env = {"devices": 3, "memory": "1GiB,2GiB,3GiB"}
    devs = json_out(run("devices", cuda_visible_devices="2,0", **env))
    assert [d["total"] for d in devs] == [3 * GiB, GiB]
    devs = json_out(
        run("devices", cuda_visible_devices="GPU-5eed0000-0000-4000-8000-000000000001", **env)
    )
    assert [d["total"] for d in devs] == [2 * GiB]
    devs = json_out(run("devices", cuda_visible_devices="1,9,0", **env))  # stops at 9
    assert [d["total"] for d in devs] == [2 * GiB]
    assert run("init", cuda_visible_devices="", **env).stdout.strip() == "100"  # NO_DEVICE
    assert run("init", devices=0).stdout.strip() == "100"


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("devices", "17"),
        ("devices", "two"),
        ("memory", "16 parsecs"),
        ("memory", "1GiB,,2GiB"),
        ("memory", "0"),
        ("uuids", "GPU-nothex"),
        (
            "uuids",
            "GPU-5eed0000-0000-4000-8000-000000000000,GPU-5eed0000-0000-4000-8000-000000000000",
        ),
        ("other_used", "20GiB"),
        ("ctx_overhead", "-1"),
        ("granularity", "3MiB"),
        ("driver_version", "thirteen"),
        ("driver_release", "535"),
        ("driver_release", "5350.1"),
        ("driver_release", "535.261.03.1"),
        ("driver_release", "535.261.03-sim"),
        ("name", ""),
        ("util_period_ns", "9999999"),
        ("util_period_ns", "1/6 s"),
    ],
)
def test_malformed_env(run, var: str, value: str) -> None:
    proc = run("init", **{var: value})
    assert proc.stdout.strip() == "1"  # CUDA_ERROR_INVALID_VALUE
    assert f"CGPU_SIM_{var.upper()}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run("nvml", **{var: value})
    assert proc.stdout.strip() == "999"  # NVML_ERROR_UNKNOWN
    assert f"CGPU_SIM_{var.upper()}" in proc.stderr
