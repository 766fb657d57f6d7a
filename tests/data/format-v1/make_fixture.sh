#!/usr/bin/env bash
# Writes the format-v1 fixture with the release that writes format version 1:
# starts that release's segstored on a fresh 16 MiB data file, writes the
# profiles README.md lists with its segctl, stops it with SIGTERM and gzips
# the data file. Run once, by hand, with the binaries of the release whose
# format is being pinned; never again for the same version (the point is that
# later releases read what this one wrote).
#
#   tests/data/format-v1/make_fixture.sh BUILD_DIR OUT_DIR
#
# OUT_DIR gets segstore.dat.gz, fixture.toml and segstored.log.
set -euo pipefail

build=$(realpath "$1")
out=$(realpath -m "$2")
segstored="$build/src/server/segstored"
segctl="$build/src/tools/segctl"
here=$(dirname "$(realpath "$0")")
mkdir -p "$out"
work=$(mktemp -d "$out/work.XXXXXX")

# Defragmentation and the expiry sweeper off: the file keeps every version
# written (old versions, the tombstone, expired segments), so that reading it
# exercises recovery's choice of the newest version and the read path's
# hiding of expired segments, not only the newest bytes.
cat > "$work/fixture.toml" <<'TOML'
[server]
listen = "127.0.0.1:0"
threads = 2

[admin]
listen = "off"

[storage]
path = "segstore.dat"
file_size = "16MiB"
write_block_size = "64KiB"
durability = "commit"
background_defrag = false

[profile]
sweeper = false
TOML

(cd "$work" && exec "$segstored" --config fixture.toml > segstored.log 2>&1) &
pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$work/segstored.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/segstored.log"; kill -TERM "$pid"; exit 1; }
ctl() { "$segctl" --server "127.0.0.1:$port" "$@"; }

# 1. ref-1000: the reference workload's shape, 1,000 segments with whole-hour
#    expiries, bulk-loaded from a row file the generator writes.
python3 "$here/reference_profile.py" > "$work/ref-1000.csv"
ctl load --no-progress "$work/ref-1000.csv"

# 2. seconds: second-precision expiries, one that never expires, the largest
#    expiry and segment ID there are (a raw 64-bit gap in the codec).
ctl upsert seconds 0@4000000001 1@4000000002 2@4000000059 7@4000012345 1000@4123456789 \
  81999@never 9007199254740993@4000000003 18446744073709551615@4294967295

# 3. attrs: whole-day expiries, attr1 and attr2 on some segments.
ctl upsert attrs 100@4000060800,a1=7 200@4000147200,a2=65535 \
  300@4000233600,a1=0,a2=4294967295 400@4000060800 500@never,a1=123456

# 4. Keys: binary (not UTF-8), a 36-byte UUID, 256 bytes (the default limit).
ctl upsert $'\xff\xfe\x80bin\x01\xc3\x28\x7f' 1@4000003200 2@never
ctl upsert 6f1c2a7e-3b5d-4c8e-9a0f-1d2e3f405162 42@4000003260 43@4000003320
ctl upsert "$(printf '0123456789abcdef%.0s' $(seq 16))" 65535@4000000000

# 5. deleted: a tombstone.
ctl upsert deleted 1@never 2@4000000000
ctl delete deleted

# 6. overwritten: five writes (each a new record version, on alternating
#    event loops and so in both open write blocks); only the last state shows.
ctl upsert overwritten 1@4000003200 2@4000003200 3@4000003200
ctl upsert overwritten 1@4000007200,a1=1
ctl remove overwritten 2
ctl upsert overwritten 4@4000010800 1@4000014400,a1=5
ctl upsert overwritten 3@never

# 7. resurrected: written, deleted, written again.
ctl upsert resurrected 10@never
ctl delete resurrected
ctl upsert resurrected 11@4000000000

# 8. Expired when the file was written: partly (two of four segments) and
#    wholly. The sweeper is off, so nothing rewrites them.
ctl upsert partly-expired 10@never 20@4000000000 11@+2s 21@+2s,a1=9
ctl upsert all-expired 5@+1s 6@+2s
sleep 4
ctl get partly-expired
ctl get all-expired || true

kill -TERM "$pid"
wait "$pid"
grep -q "stopped cleanly" "$work/segstored.log"

gzip -9 -n -c "$work/segstore.dat" > "$out/segstore.dat.gz"
cp "$work/fixture.toml" "$work/segstored.log" "$out/"
sha256sum "$work/segstore.dat" | sed 's| .*|  segstore.dat|' > "$out/segstore.dat.sha256"
rm -rf "$work"
