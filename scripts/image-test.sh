#!/usr/bin/env bash
# Builds docker/Dockerfile with podman and runs the image as an operator would
# (docs/container.md). Run by hand, as root, not by CI: the first run
# debootstraps a Debian 12 base and builds the whole project in a container
# (17 minutes on our 2 cores); later runs reuse both. Where crun or podman's
# default limits cannot run here it says so and uses runc and lower limits.
#
#   scripts/image-test.sh [--rebuild-base] [--no-build]
#
# 1. The base: no registry is reachable, so `debootstrap --variant=minbase
#    bookworm`, imported as localhost/debian:12 (the Dockerfile's FROM
#    debian:12 finds it). Kept; --rebuild-base makes it again.
# 2. The image, localhost/segstore:test, from the Dockerfile as it is (layers
#    reused: only what changed is rebuilt). --no-build uses the one there is.
# 3. With docker/seccomp-segstored.json: serves on io_uring; an upsert and a
#    get through the port published on 127.0.0.1; the image's health check;
#    SIGTERM stops it with exit code 0 and "stopped cleanly"; a new container
#    on the same volume, with io_backend = io_uring forced, reads the data back.
# 4. Without the profile (podman's default one, which blocks io_uring as
#    Docker's does): the logged fallback to pread/pwrite, data still served;
#    with io_backend = io_uring, a refusal to start that says why.
#
# It removes the containers and the volume it made (only those). SEGCTL=path
# uses a host segctl; by default the image's own runs in a throwaway
# container on the host's network, so it too goes through the published port.
# Where podman cannot run containers here, it says why and exits 2.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stage.sh

base=localhost/debian:12
image=localhost/segstore:test
profile=docker/seccomp-segstored.json
rebuild_base=0
build=1
for arg in "$@"; do
  case "$arg" in
    --rebuild-base) rebuild_base=1 ;;
    --no-build) build=0 ;;
    *) sed -n '2,26p' "$0" >&2; exit 1 ;;
  esac
done

tag=segstore-imgtest-$$
work=$(mktemp -d /tmp/segstore-imgtest.XXXXXX)
containers=()
volume_made=0

say() { echo "image-test: $*"; }
fail() { echo "image-test: FAIL: $*" >&2; exit 1; }
# This machine cannot run what the test needs: said with the evidence, exit 2.
cannot() { echo "image-test: CANNOT RUN HERE: $*" >&2; exit 2; }

cleanup() {
  local c
  for c in "${containers[@]}"; do podman rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  if [ "$volume_made" = 1 ]; then podman volume rm -f "$tag" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# --- What this host allows -------------------------------------------------
# podman's global flags (the OCI runtime) and the limits every container and
# build step gets, decided from what the host is.
podman_flags=()
limits=()
check_host() {
  [ "$(id -u)" = 0 ] || cannot "run as root: rootless podman needs subordinate ID ranges" \
    "(/etc/subuid) and user namespaces, which this script does not set up"
  command -v podman >/dev/null || cannot "no podman: apt-get install podman runc debootstrap"
  say "$(podman --version), kernel $(uname -r)"

  # crun (podman's default runtime on Debian 12) refuses a hybrid cgroup
  # layout (v1 controllers, with the v2 hierarchy mounted beside them) when
  # the v2 one has controllers of its own; runc accepts it.
  local unified=/sys/fs/cgroup/unified/cgroup.controllers
  if [ -z "${SEGSTORE_OCI_RUNTIME:-}" ] && [ -n "$(cat "$unified" 2>/dev/null)" ]; then
    say "hybrid cgroups with controllers on the v2 hierarchy ($unified: $(cat "$unified")):" \
      "crun refuses those, so runc runs the containers"
    command -v runc >/dev/null || cannot "crun refuses this cgroup layout and runc is missing:" \
      "apt-get install runc"
    SEGSTORE_OCI_RUNTIME=runc
  fi
  if [ -n "${SEGSTORE_OCI_RUNTIME:-}" ]; then podman_flags+=(--runtime "$SEGSTORE_OCI_RUNTIME"); fi

  # Rootful podman gives a container RLIMIT_NOFILE and RLIMIT_NPROC of
  # 1048576; raising a hard limit takes CAP_SYS_RESOURCE. Without it, ask
  # for no more than this process has (nproc: podman lowers its own to 32768).
  local capeff
  capeff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
  if (( (0x$capeff >> 24 & 1) == 0 )); then
    local nofile
    nofile=$(ulimit -Hn)
    say "root without CAP_SYS_RESOURCE (CapEff $capeff) and a hard nofile limit of $nofile:" \
      "containers get nofile=$nofile, nproc=4096 instead of podman's 1048576"
    limits+=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
  fi

  if [ -r /proc/sys/kernel/io_uring_disabled ] &&
    [ "$(cat /proc/sys/kernel/io_uring_disabled)" != 0 ]; then
    cannot "kernel.io_uring_disabled = $(cat /proc/sys/kernel/io_uring_disabled): no container" \
      "can have io_uring here, with any profile"
  fi
  grep -q '^Seccomp:' /proc/self/status || cannot "this kernel has no seccomp (no Seccomp: in" \
    "/proc/self/status): --security-opt seccomp cannot be tested"
}

# Runs a throwaway container of the base: the proof that podman can start one.
smoke() {
  local out
  if ! out=$(podman "${podman_flags[@]}" run --rm "${limits[@]}" "$base" true 2>&1); then
    cannot "podman cannot start a container of $base: $out"
  fi
}

# --- The base and the image ------------------------------------------------
make_base() {
  command -v debootstrap >/dev/null || cannot "no debootstrap: apt-get install debootstrap"
  local root=$work/rootfs
  nice -n 19 debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian \
    >"$work/debootstrap.log" 2>&1 || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap"; }
  # The sources of Debian's own image: the point release, its updates and
  # the security archive.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  tar -C "$root" --numeric-owner -cf - . |
    podman import --change 'CMD ["bash"]' --message "debootstrap --variant=minbase bookworm" \
      - "$base" >"$work/import.log" 2>&1 || { cat "$work/import.log" >&2; fail "podman import"; }
  rm -rf "$root"
}

build_image() {
  # The build steps reach deb.debian.org through podman's own network (no
  # --network host needed where the host reaches it).
  nice -n 19 podman "${podman_flags[@]}" build --format docker --pull=never "${limits[@]}" \
    --ignorefile docker/Dockerfile.dockerignore -f docker/Dockerfile -t "$image" . \
    >"$work/build.log" 2>&1 || { tail -40 "$work/build.log" >&2; fail "podman build"; }
  grep -E '^\[[0-9]/[0-9]\] STEP|Using cache' "$work/build.log" | sed 's/^/  /' || true
}

# --- Running it ------------------------------------------------------------
# `start NAME ARGS...` starts a container of the image on the volume, both
# ports published on 127.0.0.1 at ports the kernel picks; ARGS go to podman
# (before the image). The data file is small: the test needs no 4 GiB.
start() {
  local name=$1
  shift
  containers+=("$name")
  # Without systemd, podman says on stderr it cannot set the health check's
  # timer (not an error of ours): kept apart, shown if the start fails.
  podman "${podman_flags[@]}" run -d --name "$name" "${limits[@]}" \
    -p 127.0.0.1::7700 -p 127.0.0.1::7701 -v "$tag:/data" "$@" "$image" \
    --file-size 64MiB >/dev/null 2>"$work/$name.podman" ||
    { cat "$work/$name.podman" >&2; fail "podman run $name"; }
}

# The host port published for the container's PORT.
host_port() { podman port "$1" "$2/tcp" | sed -n '1s/.*://p'; }

# `wait_ready NAME`: until /ready answers 200 through the published admin
# port; fails with the log if the container exits first.
wait_ready() {
  local name=$1 admin i
  admin=$(host_port "$name" 7701)
  for ((i = 0; i < 300; i++)); do
    if [ "$(podman inspect -f '{{.State.Running}}' "$name")" != true ]; then
      podman logs "$name" >&2 || true
      fail "$name exited before it was ready"
    fi
    if curl -fsS -o /dev/null "http://127.0.0.1:$admin/ready" 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  podman logs "$name" >&2 || true
  fail "$name not ready after 60 s"
}

# `segctl NAME ARGS...`: segctl against NAME's published client port.
segctl() {
  local name=$1
  shift
  local server
  server=127.0.0.1:$(host_port "$name" 7700)
  if [ -n "${SEGCTL:-}" ]; then
    "$SEGCTL" --server "$server" "$@"
  else
    podman "${podman_flags[@]}" run --rm "${limits[@]}" --network host --no-healthcheck \
      --entrypoint segctl "$image" --server "$server" "$@"
  fi
}

# `expect_metric NAME LINE`: NAME's /metrics has LINE (a grep -E pattern).
expect_metric() {
  local metrics
  metrics=$(curl -fsS "http://127.0.0.1:$(host_port "$1" 7701)/metrics") ||
    fail "$1: no /metrics"
  grep -E -q -- "^$2\$" <<<"$metrics" || fail "$1: /metrics has no line \"$2\""
  say "$1 /metrics: $(grep -E -m1 -- "^$2\$" <<<"$metrics")"
}

# `expect_log NAME TEXT`: the container's log has TEXT (a grep -E pattern).
expect_log() {
  local log
  log=$(podman logs "$1" 2>&1)
  grep -E -q -- "$2" <<<"$log" || { echo "$log" >&2; fail "$1: no \"$2\" in its log"; }
  say "$1 logged: $(grep -E -m1 -o -- ".{0,60}($2).{0,100}" <<<"$log")"
}

# `stop_cleanly NAME`: SIGTERM (the image's STOPSIGNAL); exit code 0 and
# "stopped cleanly", within 30 s (shutdown_timeout_seconds is 10).
stop_cleanly() {
  local name=$1 code
  podman stop -t 30 "$name" >/dev/null 2>>"$work/$name.podman" ||
    { cat "$work/$name.podman" >&2; fail "podman stop $name"; }
  code=$(podman inspect -f '{{.State.ExitCode}}' "$name")
  [ "$code" = 0 ] || { podman logs "$name" >&2; fail "$name exited $code on SIGTERM"; }
  expect_log "$name" "SIGTERM|Terminated"
  expect_log "$name" "stopped cleanly"
}

expect_segments() {
  local out=$1
  shift
  local id
  for id in "$@"; do
    grep -qw -- "$id" <<<"$out" || { echo "$out" >&2; fail "segment $id missing from the get"; }
  done
}

with_profile() {
  start "$tag-a" --security-opt "seccomp=$profile"
  wait_ready "$tag-a"
  say "$tag-a ready: client port 127.0.0.1:$(host_port "$tag-a" 7700)," \
    "admin 127.0.0.1:$(host_port "$tag-a" 7701)"
  expect_log "$tag-a" "serving on 0\.0\.0\.0:7700 .* io io_uring"
  expect_metric "$tag-a" 'segstore_info\{.*io_backend="io_uring".*\} 1'
  segctl "$tag-a" upsert imgtest-user 4101@never 4202@+30d
  local out
  out=$(segctl "$tag-a" get imgtest-user)
  printf '  %s\n' "${out//$'\n'/$'\n  '}"
  expect_segments "$out" 4101 4202
  # The image's HEALTHCHECK (segctl ping inside the container, under the same
  # profile), run once by hand: podman runs it on a timer only under systemd.
  podman healthcheck run "$tag-a" >/dev/null || fail "the image's health check failed"
  say "health check: healthy"
  stop_cleanly "$tag-a"

  # A new container on the same volume. io_backend = io_uring: had the profile
  # not let io_uring through, this would refuse to start, not fall back.
  printf '[storage]\nio_backend = "io_uring"\n' >"$work/io_uring.toml"
  chmod 644 "$work/io_uring.toml"
  start "$tag-b" --security-opt "seccomp=$profile" \
    -v "$work/io_uring.toml:/etc/segstore/segstored.toml:ro"
  wait_ready "$tag-b"
  expect_log "$tag-b" "io io_uring; recovered 1 live records"
  # The clean stop wrote the index checkpoint, and this start loaded it.
  expect_metric "$tag-b" "segstore_recovery_from_checkpoint 1"
  out=$(segctl "$tag-b" get imgtest-user)
  expect_segments "$out" 4101 4202
  say "$tag-b read the data back from the volume"
  stop_cleanly "$tag-b"
}

without_profile() {
  start "$tag-c"
  wait_ready "$tag-c"
  # podman's default profile answers ENOSYS to what it does not list, so
  # segstored's reason reads "this kernel has no io_uring".
  expect_log "$tag-c" "io_uring is unavailable .*Falling back to synchronous pread/pwrite"
  expect_log "$tag-c" "io sync; recovered 1 live records"
  expect_metric "$tag-c" 'segstore_info\{.*io_backend="sync".*\} 1'
  local out
  out=$(segctl "$tag-c" get imgtest-user)
  expect_segments "$out" 4101 4202
  stop_cleanly "$tag-c"

  start "$tag-d" -v "$work/io_uring.toml:/etc/segstore/segstored.toml:ro"
  local code
  code=$(timeout 60 podman wait "$tag-d") || fail "$tag-d still running with io_backend = io_uring"
  [ "$code" != 0 ] || fail "$tag-d exited 0 with io_backend = io_uring and no profile"
  say "$tag-d exited $code"
  expect_log "$tag-d" "cannot open the store at .*io_uring is unavailable"
}

check_host
if [ "$rebuild_base" = 1 ] || ! podman image exists "$base"; then
  stage "base image $base (debootstrap)" make_base
else
  say "base $base: present (--rebuild-base makes it again)"
fi
smoke
if [ "$build" = 1 ]; then
  stage "image $image (podman build)" build_image
else
  podman image exists "$image" || fail "no $image: run without --no-build"
fi
say "image: $(podman image inspect -f '{{.Id}} {{.Size}} bytes' "$image")"
podman volume create "$tag" >/dev/null
volume_made=1
stage "with $profile" with_profile
stage "without a seccomp profile of ours" without_profile
say "PASS"
