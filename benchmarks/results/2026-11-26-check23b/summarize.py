"""Summarise check23b's raw runs: one row per mix and check, with each run's range and verdict.

    .venv/bin/python -P benchmarks/results/2026-11-26-check23b/summarize.py
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

RAW = Path(__file__).resolve().parent / "raw"


def main() -> None:
    rows: dict[tuple[str, str], list[str]] = defaultdict(list)
    order: list[tuple[str, str]] = []
    for path in sorted(RAW.glob("*.json")):
        run = path.stem.split("-", 1)[1]
        for mix in json.loads(path.read_text()):
            for v in mix["verdicts"]:
                key = (f"{mix['machine']}{mix['gpu']} {mix['title']}", v["label"])
                if key not in rows:
                    order.append(key)
                if "values" in v:
                    got = f"{min(v['values']):.1f}-{max(v['values']):.1f}"
                    if v.get("bad_windows"):
                        got += f" (off in {','.join(map(str, v['bad_windows']))})"
                elif "gap_ms" in v:
                    got = f"gap {v['gap_ms']:.0f} ms"
                else:
                    got = f"{v['value']:.1f}"
                word = ("met" if v["ok"] else "MISSED") if v["verdict"] == "judge" else "info"
                rows[key].append(f"{run}: {got} {word}")
    for mix, label in order:
        print(f"| {mix} | {label} | {'; '.join(rows[(mix, label)])} |")


if __name__ == "__main__":
    main()
