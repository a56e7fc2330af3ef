"""What a probe run printed: the tests' shared result type (imported, never from conftest)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    """What a probe run printed, parsed by command name."""

    returncode: int
    stdout: str
    stderr: str

    def lines(self, name: str) -> list[list[str]]:
        return [line.split()[1:] for line in self.stdout.splitlines() if line.split()[:1] == [name]]

    def one(self, name: str) -> list[str]:
        found = self.lines(name)
        assert found, f"no '{name}' line in output:\n{self.stdout}\n{self.stderr}"
        return found[-1]


def pages(n: int) -> int:
    """n bytes in whole 2 MiB pages (what the simulated driver allocates)."""
    return -(-n // (2 << 20)) * (2 << 20)


def usages(r: Result) -> list[tuple[int, int]]:
    """Each `usage` line of tests/shim/family_client.py: (the shim's figure, NVML's per-process
    figure)."""
    found = []
    for line in r.lines("usage"):
        assert line[0] == "0", line
        found.append((int(line[1]), int(line[2])))
    return found
