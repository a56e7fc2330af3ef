#!/usr/bin/env bash
# Install vLLM, for tests/realstack/test_vllm.py, into a venv of its own, .venv-vllm, at the
# versions tests/realstack/requirements-vllm.txt pins (vLLM's own torch and numba are older
# than the main venv's). Safe to run again: a venv made from the same requirements file (its
# checksum is kept in .venv-vllm/cgpu-requirements.sha256) is left as it is, in a second.
# pip's wheel cache (~/.cache/pip) makes a fresh venv quicker the second time.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="$(pwd)/.venv-vllm"
REQ=tests/realstack/requirements-vllm.txt
STAMP="$VENV/cgpu-requirements.sha256"
want="$(sha256sum "$REQ" | cut -d' ' -f1)"

if [ -x "$VENV/bin/vllm" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ]; then
  exit 0
fi
echo "vllm: installing $(grep -E '^vllm==' "$REQ") and its pinned dependencies into $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
rm -f "$STAMP"
# Every dependency is pinned in the file: no resolution, and nothing else comes in.
"$VENV/bin/python" -m pip install -q --no-deps -r "$REQ"
"$VENV/bin/python" -m pip check >/dev/null
echo "$want" >"$STAMP"
