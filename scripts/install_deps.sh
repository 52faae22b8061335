#!/usr/bin/env bash
# Installs what ringfold needs to build, test and benchmark, from Debian's packages only.
# Idempotent and non-interactive: packages already present are skipped, and apt is not touched
# at all when nothing is missing. CUDA (nvcc) is optional and never installed here; rdma-core's headers are, its providers need
# RDMA hardware.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache git        # toolchain
  liburing-dev                                       # io_uring TCP transport
  libssl-dev                                         # HMAC for the rendezvous store
  libfabric-dev libfabric-bin                        # RDMA transport's libfabric fabric (tcp;ofi_rxm
                                                     # runs anywhere; verbs/efa on clusters), fi_info
  libibverbs-dev                                     # ibverbs headers (the library is dlopened)
  libcxxopts-dev                                     # bench flags
  libgtest-dev libgmock-dev libbenchmark-dev         # tests, micro-benchmarks
  libgloo-dev libopenmpi-dev openmpi-bin             # comparison baselines (bench/compare)
  iproute2 iperf3 procps                             # emulated multi-host tests and benchmarks
  iptables iputils-ping                              # their delay emulator's NFQUEUE rule, ping
  openssh-client                                     # ringfoldrun starts remote ranks over ssh
  openssh-server                                     # tests/netns runs one sshd per emulated host
                                                     # (its own config and keys; never the system's)
  python3 python3-venv                               # deploy/ checks run in a cached venv
  clang libclang-rt-dev                              # sanitizer builds and libFuzzer targets
                                                     # (scripts/sanitize.sh, scripts/fuzz.sh)
)
# --- Spark (ringfold.spark; tests/python/run.sh spark): Spark 4 needs Java 17 or 21 and
# Debian 12 has 17 (44 MB download); pyspark itself comes from PyPI (requirements-spark.txt).
packages+=(openjdk-17-jre-headless)
# --- end Spark ---

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install_deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
