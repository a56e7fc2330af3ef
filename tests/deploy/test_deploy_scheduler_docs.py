"""docs/operations-scheduler.md names every flag and metric of the extender as built, no other."""

from __future__ import annotations

import argparse
import re

from deploy_helpers import REPO

from cgpu.scheduler.cli import register
from cgpu.scheduler.metrics import Metrics

DOC = (REPO / "docs" / "operations-scheduler.md").read_text()


def test_every_flag_is_documented_with_its_default() -> None:
    parser = argparse.ArgumentParser()
    register(parser)
    flags = {a.option_strings[0]: a.default for a in parser._actions if a.option_strings[1:] == []}
    flags.pop("-h", None)
    rows = dict(re.findall(r"^\| `(--[a-z-]+)` \| ([^|]+) \|", DOC, re.MULTILINE))
    assert set(rows) == set(flags)
    for flag, default in flags.items():
        shown = rows[flag].strip().strip("`")
        assert shown == ("none" if default is None else f"{default:g}" if isinstance(
            default, float) else str(default)), flag  # fmt: skip


def test_every_metric_is_documented_and_no_other() -> None:
    exposed = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in Metrics().registry.collect()
    }
    documented = set(re.findall(r"`(cgpu_extender_[a-z_]+)", DOC))
    assert documented == exposed
    assert "cgpu_extender_bind_failures_total" in exposed  # the names as Prometheus shows them
