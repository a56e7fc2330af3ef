#!/usr/bin/env bash
# The whole test suite: set-up, lint, the tests, and the shim's tests again under
# AddressSanitizer and ThreadSanitizer builds of the shim.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
export PATH="$(pwd)/.venv/bin:$PATH"

echo "== ruff"
$PY -m ruff check cgpu deviceplugin hooks tests benchmarks examples

echo "== pytest"
# The tests import cgpu through the editable install (scripts/dev-install.sh), which maps the
# checkout's deviceplugin/ and hooks/ into it; -P keeps the bare checkout off sys.path.
$PY -P -m pytest -q -p no:cacheprovider tests

for san in address thread; do
  echo "== shim tests under -fsanitize=$san"
  cmake -S . -B "build/$san" -DCGPU_SANITIZE="$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "build/$san" --target cgpu -j2 >/dev/null
  CGPU_TEST_SHIM="$(pwd)/build/$san/native-out/libcgpu.so" CGPU_TEST_SANITIZER="$san" \
    $PY -P -m pytest -q -p no:cacheprovider tests/shim
done
