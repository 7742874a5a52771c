#!/usr/bin/env bash
# Installs every Debian package FanStore needs to build, test and benchmark.
# Idempotent: a second run only checks. Run as root on Debian 12.
#   --build-only   only what the build and unit tests need (no Slurm, Python, sshfs)
set -euo pipefail

build_pkgs=(
  cmake make g++ pkg-config clang libclang-rt-14-dev
  libzstd-dev zstd libxxhash-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libslurm-dev libpmix-dev libmunge-dev libsodium-dev libssl-dev libcli11-dev libarchive-dev
  libfuse3-dev
  clang-format shellcheck scdoc dpkg-dev
  erofs-utils
)
run_pkgs=(
  slurmctld slurmd slurm-client munge openmpi-bin
  iproute2 util-linux procps psmisc strace attr
  python3 python3-pil python3-numpy python3-h5py python3-torch python3-torchvision
  python3-matplotlib sshfs openssh-server openssh-client fuse3 hyperfine
  busybox-static bubblewrap python3-dev charliecloud-runtime podman runc
  squashfs-tools squashfuse
  git libbsd-dev  # pyxis and enroot, built from their sources for slurm_pyxis
)

pkgs=("${build_pkgs[@]}")
[[ "${1:-}" == "--build-only" ]] || pkgs+=("${run_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
