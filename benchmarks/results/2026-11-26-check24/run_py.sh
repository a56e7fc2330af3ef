#!/bin/bash
# Usage: run_py.sh NAME SCRIPT.py [bare]
# Runs SCRIPT under `cgpu run --gpu-mem 3GiB --simulate --keep` on an 8 GiB simulated GPU (its own
# state file and state dir under out/NAME), logs to out/NAME/log, then prints `cgpu ledger`.
# With "bare": the same script on the simulator without cgpu (whole 8 GiB GPU), as a control.
set -u
HERE=/work/wt/check24
MAIN=/work/main
NAME=$1; SCRIPT=$2; MODE=${3:-shim}
OUT=$HERE/out/$NAME
rm -rf "$OUT"; mkdir -p "$OUT"
for v in $(env | grep -o '^\(CGPU\|PYTORCH\)_[A-Z_]*'); do unset "$v"; done
export CGPU_SIM_MEMORY=8GiB CGPU_SIM_STATE=$OUT/sim
export PYTHONPATH=$HERE:$MAIN/tests/realstack:$MAIN/tests/clients
export PATH=$MAIN/.venv/bin:$PATH PYTHONUNBUFFERED=1
export TRITON_CACHE_DIR=$OUT/triton TORCHINDUCTOR_CACHE_DIR=$OUT/inductor
start=$(date +%s)
if [ "$MODE" = bare ]; then
  export LD_LIBRARY_PATH=$($MAIN/.venv/bin/python -c 'from cgpu.core.paths import sim_lib_dir; print(sim_lib_dir())')
  $MAIN/.venv/bin/python $HERE/$SCRIPT >"$OUT/log" 2>&1; rc=$?
else
  $MAIN/.venv/bin/cgpu run --gpu-mem 3GiB --simulate --keep --state-dir "$OUT/state" -- \
    $MAIN/.venv/bin/python $HERE/$SCRIPT >"$OUT/log" 2>&1; rc=$?
fi
echo "== $NAME ($MODE): rc=$rc, $(( $(date +%s) - start )) s, finished $(date -u +%H:%M:%S) UTC"
grep '^FIG ' "$OUT/log" | sed 's/^FIG //'
[ "$rc" = 0 ] || tail -30 "$OUT/log"
if [ "$MODE" != bare ]; then echo "-- cgpu ledger --state-dir $OUT/state (after exit, --keep):"; $MAIN/.venv/bin/cgpu ledger --state-dir "$OUT/state"; fi
