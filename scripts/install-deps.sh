#!/usr/bin/env bash
# Installs everything segstore needs to build, test and run, from Debian 12's
# archive only: the toolchain and the libraries. README, .ci/run and
# docker/Dockerfile all use this one script. Safe to run again.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config ca-certificates
  liburing-dev        # io_uring: every device I/O
  libboost-dev        # Boost 1.74 headers (Asio); msgpack-cxx depends on this version
  libmsgpack-cxx-dev  # wire bodies
  libspdlog-dev       # logging (pulls libfmt-dev)
  libxxhash-dev       # digests and checksums
  zlib1g-dev          # gzip-compressed DMP files (segctl load)
  libzstd-dev         # segctl backup files (zstd chunks)
  libtomlplusplus-dev # config file
  libsystemd-dev      # sd_notify readiness
  libssl-dev          # TLS on the client port (OpenSSL 3, through Asio SSL)
  libcli11-dev        # command-line parsing (segstored, segctl, segbench)
  libhiredis-dev      # Redis client: segbench's comparison, and tests that talk to a real Redis
  redis-tools         # Redis 7.0 itself (its server binary): the comparison, its tests, the routing test
  nlohmann-json3-dev  # segctl --json output; the cluster's map and etcd's JSON gateway
  etcd-server         # etcd 3.4: the cluster tests start real members (operators run their own)
  librdkafka-dev      # Kafka client (librdkafka 2.0): the replicated log; its mock cluster runs the log tests
  libgtest-dev libgmock-dev libbenchmark-dev
  # The Python client (clients/python) and its tests, with Debian's own python3:
  python3-msgpack     # its one dependency: the wire bodies
  python3-pytest      # its test suite (tests/python/run.sh)
  python3-venv        # the suite's virtual environment (--system-site-packages)
  python3-pip         # installs the client into it, offline (--no-index)
  python3-setuptools python3-wheel  # the build backend pip uses without build isolation
  python3-redis       # redis-py 4.3: the RESP port's tests drive it as bidders' code would (RedisCluster too)
  # scripts/fuzz.sh only: clang 14, its runtimes (libFuzzer, ASan, UBSan: only
  # recommended by clang, so named here) and llvm-symbolizer (readable stacks)
  clang libclang-rt-14-dev llvm
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: run as root (missing: ${missing[*]})" >&2; exit 1; }
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
