"""`cgpu hook` in real runc containers: limited, untouched, refused, hostile, side by side."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hook_runc import CHUNK, Bundle, parse_probe, probe_script, snapshot

from cgpu.core.containers import containers_root
from cgpu.core.ledger import read_ledger

GIB = 1 << 30
ALIYUN_2_OF_8 = {"ALIYUN_COM_GPU_MEM_CONTAINER": "2", "ALIYUN_COM_GPU_MEM_DEV": "8"}
SLICE_2_OF_8 = GIB * 2 // 8  # of the simulator's 1 GiB device

MakeBundle = Callable[..., Bundle]


def _containers(state_dir: Path) -> list[str]:
    root = containers_root(state_dir)
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def _assert_limited(stdout: str, slice_bytes: int) -> None:
    out = parse_probe(stdout)
    assert out["preload"] == ["/usr/local/cgpu/libcgpu.so"], stdout
    assert out["ledger-dir"] == ["cgpu.conf", "cgpu.ledger", "ld.so.preload", "meta.json"]
    assert out["init"] == ["0"], stdout
    chunks, rc = (int(v) for v in out["fill"])
    assert rc == 2, stdout  # CUDA_ERROR_OUT_OF_MEMORY
    assert chunks * CHUNK <= slice_bytes < (chunks + 1) * CHUNK, stdout
    assert int(out["info"][2]) == slice_bytes, stdout  # cuMemGetInfo total
    nvml = out["nvml"]
    assert (int(nvml[0]), int(nvml[1])) == (0, slice_bytes), stdout  # NVML total is the slice
    assert int(nvml[2]) == chunks * CHUNK, stdout  # and used is what the container holds


@pytest.mark.parametrize("stage", ["createRuntime", "prestart"])
def test_aliyun_share_is_enforced_through_ld_so_preload(
    make_bundle: MakeBundle, state_dir: Path, stage: str
) -> None:
    bundle = make_bundle(
        probe_script("init", "fill", str(CHUNK), "info", "nvml"), ALIYUN_2_OF_8, stage
    )
    assert "LD_PRELOAD" not in json.dumps(bundle.config["process"]["env"])
    before = snapshot(bundle.rootfs)
    result = bundle.run()
    assert result.returncode == 0, result.stderr
    _assert_limited(result.stdout, SLICE_2_OF_8)
    assert _containers(state_dir) == []  # poststop removed the directory
    # Only empty mount points remain in the image; nothing was written into it.
    made = snapshot(bundle.rootfs) - before
    assert made <= {
        "var", "var/run", "var/run/cgpu", "usr/local", "usr/local/cgpu",
        "usr/local/cgpu/libcgpu.so", "etc/ld.so.preload",
    }  # fmt: skip
    for path in made:
        target = bundle.rootfs / path
        assert target.is_dir() or target.stat().st_size == 0, path


def test_container_without_variables_is_untouched(make_bundle: MakeBundle, state_dir: Path) -> None:
    bundle = make_bundle(probe_script("init", "fill", str(CHUNK), "nvml"))
    before = snapshot(bundle.rootfs)
    result = bundle.run()
    assert result.returncode == 0, result.stderr
    out = parse_probe(result.stdout)
    assert out["preload"] == [] and out["ledger-dir"] == []
    assert int(out["fill"][0]) * CHUNK == GIB  # the whole simulated device
    assert snapshot(bundle.rootfs) == before
    assert not containers_root(state_dir).exists()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "two", "ALIYUN_COM_GPU_MEM_DEV": "8"},
         "cgpu hook: ALIYUN_COM_GPU_MEM_CONTAINER=two is malformed: expected a positive whole "
         "number"),
        ({"CGPU_MEM_LIMIT": "4 GB"}, "cgpu hook: CGPU_MEM_LIMIT=4 GB is malformed"),
        # Malformed even though CGPU_MEM_LIMIT overrides it: the shim would refuse it too.
        ({"CGPU_MEM_LIMIT": "1GiB", "VOLCANO_GPU_ALLOCATED": "1"},
         "cgpu hook: VOLCANO_GPU_ALLOCATED is set but VOLCANO_GPU_MEMORY_TOTAL is not"),
        ({"CGPU_MEM_LIMIT": "1GiB", "NVIDIA_VISIBLE_DEVICES": "7"},
         "cgpu hook: NVIDIA_VISIBLE_DEVICES: no GPU '7' on this host"),
    ],
)  # fmt: skip
def test_malformed_request_fails_closed(
    make_bundle: MakeBundle, state_dir: Path, env: dict[str, str], message: str
) -> None:
    bundle = make_bundle(["/bin/echo", "container ran"], env)
    before = snapshot(bundle.rootfs)
    result = bundle.run()
    assert result.returncode != 0
    assert "container ran" not in result.stdout
    assert message in result.stderr
    hook_lines = [line for line in result.stderr.split("stderr: ")[1:] if "cgpu hook" in line]
    assert hook_lines and all(line.count("cgpu hook:") == 1 for line in hook_lines)
    assert snapshot(bundle.rootfs) == before
    assert _containers(state_dir) == []


def test_hostile_rootfs_writes_nothing_outside(
    make_bundle: MakeBundle, state_dir: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    bundle = make_bundle(probe_script("init", "fill", str(CHUNK), "info", "nvml"), ALIYUN_2_OF_8)
    etc = bundle.rootfs / "etc"
    etc.rmdir()
    etc.symlink_to(outside)  # /etc -> a host directory
    (bundle.rootfs / "var").symlink_to("../../../../../../../../" + str(outside))
    (bundle.rootfs / "usr").mkdir(exist_ok=True)
    (bundle.rootfs / "usr" / "local").symlink_to("/")
    result = bundle.run()
    assert list(outside.iterdir()) == []
    assert result.returncode == 0, result.stderr
    # The links were followed inside the container's own view (here into its /tmp tmpfs), where
    # the container follows them too: it is limited all the same.
    _assert_limited(result.stdout, SLICE_2_OF_8)


@pytest.mark.parametrize(
    ("sabotage", "message"),
    [
        # A file cannot be mounted on a directory: this fails after the other mounts are made.
        (lambda rootfs: (rootfs / "etc" / "ld.so.preload").mkdir(),
         "cgpu hook: internal error: /etc/ld.so.preload (at /etc/ld.so.preload in the rootfs)"),
        # A link into the container's own /proc: nothing is made or mounted on procfs.
        (lambda rootfs: (rootfs / "usr/local").symlink_to("/proc/sys"),
         "cgpu hook: internal error: /proc/sys/cgpu is on proc; refusing to write or mount there"),
    ],
    ids=["file-on-directory", "link-into-proc"],
)  # fmt: skip
def test_internal_error_leaves_nothing_half_made(
    make_bundle: MakeBundle, state_dir: Path, sabotage: Callable[[Path], object], message: str
) -> None:
    bundle = make_bundle(["/bin/echo", "container ran"], ALIYUN_2_OF_8)
    sabotage(bundle.rootfs)
    before = snapshot(bundle.rootfs)
    result = bundle.run()
    assert result.returncode != 0
    assert "container ran" not in result.stdout
    assert message in result.stderr
    assert snapshot(bundle.rootfs) == before  # the mount points made earlier were removed
    assert _containers(state_dir) == []


def test_two_containers_have_separate_ledgers_and_slices(
    make_bundle: MakeBundle, state_dir: Path
) -> None:
    hold = probe_script("init", "fill", str(CHUNK), "ready", "wait")
    slices = {"a": SLICE_2_OF_8, "b": 128 << 20}
    bundles = {
        "a": make_bundle(hold, ALIYUN_2_OF_8),
        # CUDA_VISIBLE_DEVICES stands in for the NVIDIA runtime, which would hide GPU 1.
        "b": make_bundle(
            hold,
            {
                "CGPU_MEM_LIMIT": "128MiB",
                "NVIDIA_VISIBLE_DEVICES": "0",
                "CUDA_VISIBLE_DEVICES": "0",
            },
        ),
    }
    procs = {name: b.start() for name, b in bundles.items()}
    try:
        for name, proc in procs.items():
            assert proc.stdout is not None
            lines = []
            while not lines or lines[-1] != "ready":
                line = proc.stdout.readline()
                assert line, f"container {name} ended early: {lines}"
                lines.append(line.strip())
            fill = parse_probe("\n".join(lines))["fill"]
            assert int(fill[0]) * CHUNK == slices[name]
        assert _containers(state_dir) == sorted(b.id for b in bundles.values())
        for name, bundle in bundles.items():
            snap = read_ledger(containers_root(state_dir) / bundle.id / "cgpu.ledger")
            device = snap.devices[0]
            assert (device.limit, device.used, device.processes) == (slices[name],) * 2 + (1,)
            assert len(snap.devices) == (2 if name == "a" else 1)  # a sees both GPUs, b one
            assert len(snap.processes) == 1
    finally:
        for proc in procs.values():
            _, err = proc.communicate("", timeout=30)
            assert proc.returncode == 0, err
    assert _containers(state_dir) == []
