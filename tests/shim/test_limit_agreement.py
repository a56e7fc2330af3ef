"""The shim and `cgpu.core.request.parse_env` read the limit variables alike: same accept or refuse,
same variable named, same slice per device (the table is tests/shim/limit_cases.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from limit_cases import CASES, LimitCase  # pytest puts tests/shim on sys.path

from cgpu.core.ledger import read_ledger
from cgpu.core.request import Disabled, LimitError, NoLimit, parse_compute_env, parse_env, slice_for


@pytest.fixture(scope="session")
def limit_probe(tmp_path_factory: pytest.TempPathFactory, cc: str) -> Path:
    exe = tmp_path_factory.mktemp("limit_probe") / "limit_probe"
    src = Path(__file__).resolve().parent / "limit_probe.c"
    subprocess.run(
        [cc, "-std=gnu11", "-Wall", "-Werror", str(src), "-o", str(exe), "-ldl"], check=True
    )
    return exe


def run_shim(limit_probe: Path, shim_env, case: LimitCase) -> subprocess.CompletedProcess[str]:
    env = shim_env(
        case.env,
        devices=len(case.totals),
        memory=",".join(str(t) for t in case.totals),
    )
    proc = subprocess.run([str(limit_probe)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 66, f"sanitizer report:\n{proc.stderr}"
    return proc


def shim_slices(stdout: str) -> list[int]:
    return [int(line.split()[2]) for line in stdout.splitlines() if line.startswith("slice ")]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_shim_and_parse_env_agree(limit_probe, shim_env, ledger_dir, case: LimitCase):
    proc = run_shim(limit_probe, shim_env, case)
    try:
        request = parse_env(case.env)
        compute = parse_compute_env(case.env)
    except LimitError as exc:
        # Refused by Python: the shim refuses too, naming the same variable, in one line.
        assert case.refused == exc.variable, str(exc)
        assert proc.returncode == 3, proc.stdout + proc.stderr
        assert proc.stdout.startswith("refused "), proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert f" {exc.variable}" in lines[0] and "refusing" in lines[0]
        assert str(exc) in lines[0]
        return
    assert case.refused is None, f"accepted, but should name {case.refused}: {request}"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    python = [slice_for(request, i, total) for i, total in enumerate(case.totals)]
    assert python == list(case.slices)
    # The shim shows the slice, or the whole device where there is none.
    seen = shim_slices(proc.stdout)
    assert seen == [s if s is not None else t for s, t in zip(python, case.totals, strict=True)]
    if isinstance(request, Disabled | NoLimit) and compute is None:
        assert "cgpu" not in proc.stderr
    # The compute limit: Python's reading, and what the shim put in the container's ledger.
    want = [p for p in case.compute if p is not None]
    python_compute = [compute.percent(i) for i in range(len(case.compute))] if compute else []
    assert python_compute == list(case.compute if want else ())
    if want:
        assert compute is not None and compute.policy == case.policy
        assert compute.priority == case.priority
        shown = read_ledger(ledger_dir / "cgpu.ledger").devices
        assert sorted(d.compute_limit for d in shown if d.compute_limit) == sorted(want)
        assert {d.compute_policy for d in shown if d.compute_limit} == {case.policy}


def test_parse_env_ignores_unrelated_variables():
    assert parse_env({"PATH": "/bin", "CGPU_MEM_LIMIT": "1GiB", "HOME": "x"}) == parse_env(
        {"CGPU_MEM_LIMIT": "1GiB"}
    )


def test_a_nul_in_a_limit_variable_is_refused():
    with pytest.raises(LimitError) as err:
        parse_env({"CGPU_MEM_LIMIT": "1GiB\0junk"})
    assert err.value.variable == "CGPU_MEM_LIMIT"
