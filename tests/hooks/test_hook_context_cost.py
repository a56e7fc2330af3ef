"""The hook writes the node's cached context cost into cgpu.conf, and never measures one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cgpu.core import context_cost
from cgpu.core.config import load_config, load_contexts
from cgpu.hooks import hook
from cgpu.hooks.oci import Spec, State

UUID = "GPU-5eed0000-0000-4000-8000-000000000000"
DRIVER = "580.65.06"
GIB = 1 << 30


@pytest.fixture
def prestart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """hook.prestart for a container asking 1 GiB of UUID, with no runtime and no injection."""
    spec = Spec(rootfs=str(tmp_path / "rootfs"), env={}, annotations={})
    monkeypatch.setattr(hook, "read_spec", lambda _bundle: spec)
    monkeypatch.setattr(hook, "requested_slices", lambda _env: {UUID: GIB})
    monkeypatch.setattr(hook, "run_injector", lambda _plan: None)
    monkeypatch.setattr(context_cost, "driver_version", lambda: DRIVER)

    def never(*_args: object) -> None:
        raise AssertionError("the hook measured a context")

    monkeypatch.setattr(context_cost, "_run", never)
    state = State(id="c1", status="created", pid=1234, bundle=str(tmp_path))
    monkeypatch.setattr(hook, "start_time", lambda _pid: 1)
    return lambda state_dir: Path(hook.prestart(state, state_dir)) / "cgpu.conf"


def test_the_cached_cost_goes_into_the_config(prestart: Any, state_dir: Path) -> None:
    record = {"driver": DRIVER, "costs": {UUID: 300 << 20}, "measured": 1.0}
    context_cost.cache_path(state_dir).write_text(json.dumps(record))
    conf = prestart(state_dir)
    assert load_config(conf) == {UUID: GIB}
    assert load_contexts(conf) == {UUID: 300 << 20}


def test_without_a_cache_the_shim_measures(prestart: Any, state_dir: Path) -> None:
    conf = prestart(state_dir)
    assert load_config(conf) == {UUID: GIB}
    assert load_contexts(conf) == {}
    assert not context_cost.cache_path(state_dir).exists()


def test_a_cache_of_another_driver_is_not_used(prestart: Any, state_dir: Path) -> None:
    record = {"driver": "535.54.03", "costs": {UUID: 300 << 20}, "measured": 1.0}
    context_cost.cache_path(state_dir).write_text(json.dumps(record))
    assert load_contexts(prestart(state_dir)) == {}
