"""Fixtures for the hook's runc tests."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hook_runc import Bundle, build_rootfs, hook_entry, needs_root_and_runc, oci_config


@pytest.fixture(scope="session")
def rootfs_template(
    tmp_path_factory: pytest.TempPathFactory, native_build: Path, sim_dir: Path, shim: Path
) -> Path:
    """A minimal rootfs, built once; each bundle gets a copy."""
    needs_root_and_runc()
    rootfs = tmp_path_factory.mktemp("template") / "rootfs"
    build_rootfs(rootfs, native_build / "cuda_probe", sim_dir, shim)
    return rootfs


@pytest.fixture
def make_bundle(
    tmp_path: Path, rootfs_template: Path, state_dir: Path, sim_dir: Path
) -> Iterator[Callable[..., Bundle]]:
    """Build a bundle with a fresh copy of the rootfs and `cgpu hook` at `stage` and poststop."""
    made: list[Bundle] = []

    def make(
        args: list[str], env: dict[str, str] | None = None, stage: str | None = "createRuntime"
    ) -> Bundle:
        path = tmp_path / f"bundle{len(made)}"
        path.mkdir()
        shutil.copytree(rootfs_template, path / "rootfs", symlinks=True)
        config = oci_config(args, env or {})
        if stage:
            config["hooks"] = {
                stage: [hook_entry(state_dir, sim_dir)],
                "poststop": [hook_entry(state_dir, sim_dir, "poststop")],
            }
        bundle = Bundle(path, tmp_path / "runc", config)
        made.append(bundle)
        return bundle

    yield make
    for bundle in made:
        bundle.cleanup()
