"""Every source of the limit, in the contract's order, and malformed values fail closed."""

from __future__ import annotations

import pytest

GiB = 1 << 30
MiB = 1 << 20
V100 = 16130 * MiB  # the seed's 16130 MiB V100


def total_of(probe, env) -> int:
    r = probe(env, "dlsym", "init", "info")
    assert r.returncode == 0, r.stderr
    return int(r.one("info")[1])


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"CGPU_MEM_LIMIT": "3GiB"}, 3 * GiB),
        ({"CGPU_MEM_LIMIT": "1536M"}, 1536 * MiB),
        ({"CGPU_MEM_LIMIT": "1073741824"}, GiB),
        ({"CGPU_MEM_LIMIT": "524288K"}, 512 * MiB),
        ({"CGPU_MEM_LIMIT_0": "2GiB", "CGPU_MEM_LIMIT": "3GiB"}, 2 * GiB),
        # cGPU's rule: floor(total x CONTAINER / DEV); seeds 004 and 001.
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "15"}, V100 * 4 // 15),
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "2", "ALIYUN_COM_GPU_MEM_DEV": "15"}, V100 * 2 // 15),
        (
            {"VOLCANO_GPU_ALLOCATED": "1024", "VOLCANO_GPU_MEMORY_TOTAL": "16130"},
            V100 * 1024 // 16130,
        ),
        # the first source present wins
        (
            {
                "CGPU_MEM_LIMIT": "1GiB",
                "ALIYUN_COM_GPU_MEM_CONTAINER": "4",
                "ALIYUN_COM_GPU_MEM_DEV": "15",
            },
            GiB,
        ),
        (
            {
                "ALIYUN_COM_GPU_MEM_CONTAINER": "4",
                "ALIYUN_COM_GPU_MEM_DEV": "15",
                "VOLCANO_GPU_ALLOCATED": "1",
                "VOLCANO_GPU_MEMORY_TOTAL": "2",
            },
            V100 * 4 // 15,
        ),
    ],
)
def test_limit_sources(shim_env, probe, limits, expected):
    assert total_of(probe, shim_env(limits, memory=f"{V100}")) == expected


def test_seed_slices_in_mib():
    # What cGPU shows for 4/15 and 2/15 of a 16130 MiB V100: 4301 MiB and 2150 MiB.
    assert V100 * 4 // 15 // MiB == 4301
    assert V100 * 2 // 15 // MiB == 2150


def test_config_file_wins_over_environment(shim_env, probe, ledger_dir, sim_env):
    uuid = "GPU-5eed0000-0000-4000-8000-000000000000"
    (ledger_dir / "cgpu.conf").write_text(f"version 1\ndevice {uuid} 768MiB\n")
    env = shim_env({"CGPU_MEM_LIMIT": "3GiB"}, uuids=uuid)
    assert total_of(probe, env) == 768 * MiB
    # A process that lost its environment (su, ssh) is still limited by the file.
    bare = shim_env(uuids=uuid)
    assert total_of(probe, bare) == 768 * MiB


def test_per_device_slices_keyed_by_uuid(shim_env, probe, ledger_dir):
    uuids = "GPU-aaaaaaaa-0000-4000-8000-000000000001,GPU-bbbbbbbb-0000-4000-8000-000000000002"
    env = shim_env({"CGPU_MEM_LIMIT_0": "1GiB", "CGPU_MEM_LIMIT_1": "2GiB"}, devices=2, uuids=uuids)
    assert total_of(probe, env) == GiB
    from cgpu.core.ledger import read_ledger

    snap = read_ledger(ledger_dir / "cgpu.ledger")
    assert {d.uuid: d.limit for d in snap.devices} == {
        "GPU-aaaaaaaa-0000-4000-8000-000000000001": GiB,
        "GPU-bbbbbbbb-0000-4000-8000-000000000002": 2 * GiB,
    }


def test_no_limit_is_a_pure_pass_through(shim_env, probe, ledger_dir):
    env = shim_env()
    r = probe(env, "dlsym", "init", "info", "fill", GiB)
    assert r.one("info") == ["0", str(16 * GiB), str(16 * GiB)]
    assert r.one("fill") == ["16", "2"]
    assert "cgpu" not in r.stderr
    assert not (ledger_dir / "cgpu.ledger").exists()


def test_disable_is_the_escape_hatch(shim_env, probe):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_DISABLE": "true"})
    assert total_of(probe, env) == 16 * GiB


@pytest.mark.parametrize(
    ("limits", "variable"),
    [
        ({"CGPU_MEM_LIMIT": "lots"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "0"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "-1G"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "1.5GiB"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "4XB"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": ""}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT": "99999999999999999999"}, "CGPU_MEM_LIMIT"),
        ({"CGPU_MEM_LIMIT_0": "1 GiB extra"}, "CGPU_MEM_LIMIT_0"),
        ({"ALIYUN_COM_GPU_MEM_CONTAINER": "4"}, "ALIYUN_COM_GPU_MEM_DEV"),
        (
            {"ALIYUN_COM_GPU_MEM_CONTAINER": "four", "ALIYUN_COM_GPU_MEM_DEV": "15"},
            "ALIYUN_COM_GPU_MEM_CONTAINER",
        ),
        (
            {"ALIYUN_COM_GPU_MEM_CONTAINER": "16", "ALIYUN_COM_GPU_MEM_DEV": "15"},
            "ALIYUN_COM_GPU_MEM_CONTAINER",
        ),
        (
            {"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "0"},
            "ALIYUN_COM_GPU_MEM_DEV",
        ),
        ({"VOLCANO_GPU_ALLOCATED": "1024"}, "VOLCANO_GPU_MEMORY_TOTAL"),
        ({"CGPU_CONTEXT_OVERHEAD": "some", "CGPU_MEM_LIMIT": "1GiB"}, "CGPU_CONTEXT_OVERHEAD"),
    ],
)
def test_malformed_limits_fail_closed(shim_env, probe, limits, variable):
    r = probe(shim_env(limits), "dlsym", "init", "alloc", MiB)
    assert r.returncode == 3, r.stdout  # the probe stops when init fails
    assert r.one("init") != ["0"]
    assert variable in r.stderr and "refusing" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "text",
    [
        "device GPU-x 1GiB\n",  # no version line
        "version 1\ndevice GPU-x\n",  # no size
        "version 1\ndevice GPU-x lots\n",
        "version 1\ndevice ../../etc 1GiB\n",
        "version 2\ndevice GPU-x 1GiB\n",
        "version 1\n",  # no devices
        "version 1\ncontext GPU-x 64MiB\ndevice GPU-x 1GiB\n",  # context before its device
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-x lots\n",
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-x 2GiB\n",  # over 1 GiB
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-x -1\n",
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-x 64MiB\ncontext GPU-x 64MiB\n",  # twice
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-x 64MiB extra\n",
        "version 1\ndevice GPU-x 1GiB\ncontext GPU-y 64MiB\n",  # no such device
    ],
)
def test_malformed_config_file_fails_closed(shim_env, probe, ledger_dir, text):
    (ledger_dir / "cgpu.conf").write_text(text)
    r = probe(shim_env(), "dlsym", "init")
    assert r.returncode == 3
    assert "cgpu.conf" in r.stderr and "refusing" in r.stderr


def test_context_overhead_is_charged(shim_env, probe):
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB"}, ctx_overhead="64MiB")
    r = probe(env, "dlsym", "init", "info", "fill", 64 * MiB)
    assert r.one("info")[1] == str(GiB - 64 * MiB)
    assert r.one("fill") == ["15", "2"]
    env = shim_env({"CGPU_MEM_LIMIT": "1GiB", "CGPU_CONTEXT_OVERHEAD": "128MiB"})
    assert probe(env, "dlsym", "init", "fill", 64 * MiB).one("fill") == ["14", "2"]


def test_nvml_before_cuda_does_not_decide_against_the_limit(shim_env, probe):
    """NVML queried first (as nvidia-smi-style checks do), with a UUID prefix in
    CUDA_VISIBLE_DEVICES that only CUDA resolves: CUDA must still be limited."""
    uuids = "GPU-aaaaaaaa-0000-4000-8000-000000000001,GPU-bbbbbbbb-0000-4000-8000-000000000002"
    env = shim_env(
        {"CGPU_MEM_LIMIT": "1GiB", "CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, devices=2, uuids=uuids
    )
    r = probe(env, "dlsym", "nvml", "init", "info", "fill", 256 * MiB)
    assert r.one("info") == ["0", str(GiB), str(GiB)]
    assert r.one("fill") == ["4", "2"]


def test_a_visible_gpu_missing_from_the_config_fails_closed(shim_env, probe, ledger_dir):
    (ledger_dir / "cgpu.conf").write_text(
        "version 1\ndevice GPU-aaaaaaaa-0000-4000-8000-000000000001 1GiB\n"
    )
    r = probe(shim_env(), "dlsym", "init", "alloc", MiB)
    assert r.returncode == 3
    assert "GPU-5eed0000-0000-4000-8000-000000000000 is visible but has no slice" in r.stderr


def test_a_program_that_never_loaded_cuda_finds_no_driver_through_the_shim(shim_env, cc, tmp_path):
    """dlsym(RTLD_DEFAULT, "cuInit") without libcuda loaded is NULL, as without the shim."""
    import subprocess

    src = tmp_path / "nocuda.c"
    src.write_text(
        "#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <stdio.h>\n"
        "int main(void) {\n"
        '    void *p = dlsym(RTLD_DEFAULT, "cuInit");\n'
        '    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);\n'
        '    printf("%s %s\\n", p ? "found" : "null", h ? "loaded" : "absent");\n'
        "    return 0;\n}\n"
    )
    subprocess.run([cc, str(src), "-o", str(tmp_path / "nocuda"), "-ldl"], check=True)
    out = subprocess.run(
        [str(tmp_path / "nocuda")],
        env=shim_env({"CGPU_MEM_LIMIT": "1GiB"}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["null", "absent"]
