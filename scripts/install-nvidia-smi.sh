#!/usr/bin/env bash
# Fetch NVIDIA's nvidia-smi from Debian bookworm's non-free component, at the version pinned in
# tests/realstack/requirements.txt (`deb: nvidia-smi=<version>`), and unpack it into
# build/nvidia-smi/<version>/.  It is never installed: it runs on the simulated NVML
# (cgpu/_native/sim/libnvidia-ml.so.1), not on a driver, and its libnvidia-ml1 dependency is
# not fetched.  Safe to run again: an unpacked binary of the pinned version is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
REQ=tests/realstack/requirements.txt
version="$(sed -n 's/^deb:[[:space:]]*nvidia-smi=\([^[:space:]]*\).*/\1/p' "$REQ")"
if [ -z "$version" ]; then
  echo "install-nvidia-smi: no 'deb: nvidia-smi=<version>' line in $REQ" >&2
  exit 1
fi
dest="build/nvidia-smi/$version"
if [ -x "$dest/nvidia-smi" ]; then
  exit 0
fi

# Whether the apt lists name the pinned version.
served() { apt-cache madison nvidia-smi 2>/dev/null | awk -F' *[|] *' -v v="$version" '$2 == v {f=1} END {exit !f}'; }

. /etc/os-release
if [ "${ID:-}" != debian ]; then
  echo "install-nvidia-smi: needs Debian (its non-free nvidia-smi package); this is ${ID:-unknown}" >&2
  exit 1
fi
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# The non-free component of the machine's own Debian release, in a list file of its own.
if ! grep -rqsE '(^|[[:space:]])non-free([[:space:]]|$)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  codename="${VERSION_CODENAME:?no VERSION_CODENAME in /etc/os-release}"
  echo "install-nvidia-smi: enabling Debian $codename non-free"
  $SUDO tee /etc/apt/sources.list.d/cgpu-non-free.sources >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  $SUDO apt-get update -qq
elif ! served; then
  $SUDO apt-get update -qq
fi

if ! served; then
  echo "install-nvidia-smi: Debian no longer serves nvidia-smi=$version; pin one that" \
    "'apt-cache policy nvidia-smi' lists in $REQ" >&2
  exit 1
fi
echo "install-nvidia-smi: fetching nvidia-smi $version"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 777 "$tmp"  # apt's _apt user writes the download
(cd "$tmp" && apt-get download -qq "nvidia-smi=$version")
dpkg -x "$tmp"/nvidia-smi_*.deb "$tmp/root"
mkdir -p "$dest"
install -m 0755 "$tmp/root/usr/lib/nvidia/current/nvidia-smi" "$dest/nvidia-smi.tmp"
mv "$dest/nvidia-smi.tmp" "$dest/nvidia-smi"
echo "install-nvidia-smi: $dest/nvidia-smi"
