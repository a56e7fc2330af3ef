#!/bin/bash
# check23: every mix twice (2 machines at once, as benchmarks/compute_share.py runs), once one
# machine at a time, then the project's own benchmark once as a control in the same session.
set -u
cd /work/wt/check23
export PYTHONDONTWRITEBYTECODE=1
PY=/work/main/.venv/bin/python
log=results/runall-$(date -u +%Y%m%dT%H%M%SZ).log
mkdir -p results
{
  date -u; uptime; lscpu | grep -E 'Model name|^CPU\(s\)'; uname -r; git -C /work/main log --oneline -1
  echo "=== run 1: --parallel 2"; $PY -P check23.py --parallel 2; date -u; uptime
  echo "=== run 2: --parallel 2"; $PY -P check23.py --parallel 2; date -u; uptime
  echo "=== run 3: --parallel 1"; $PY -P check23.py --parallel 1; date -u; uptime
  echo "=== control: the project's benchmark"; (cd /work/main && $PY -P benchmarks/compute_share.py --launches 2000); date -u; uptime
} 2>&1 | tee "$log"
