#!/usr/bin/env bash
# Issue 21's measurements (profile fields' costs), in one run, on a quiet
# machine, from the repository's root:
#   - segbench limits (the device and the ping round trip);
#   - profile_bench BM_GetAnswer on the build before issue 21 and on this
#     one, in interleaved rounds, and this build's field benchmarks
#     (BM_GetAnswerWithFields, BM_UpsertOneRewrite, BM_IncrementRewrite,
#     BM_EncodeWithFields) in the same rounds;
#   - three servers at once: segstored before issue 21 ("old") and this one
#     ("new"), the same users loaded without fields, and this one with every
#     user's 25 fields loaded too ("fields", segbench load --fields); a
#     pause until none defragments any more (a load leaves garbage);
#     segbench get in interleaved rounds against the three (the fields
#     server's gets ask for no field); then rounds of get-fields, incr and
#     upsert-1 on the fields server (incr and upsert-1 in alternating order)
#     and of upsert-1 on the new one;
#   - bytes on the device per user with and without the fields: the growth
#     of each server's storage.live_bytes over its load / users, and the
#     bytes of the string values (which issue 21's budget of 120 leaves out).
# Then a summary (also in $OUT/summary.txt; profile_bench's figures are its
# CPU times, segbench's the medians of the rounds, each round's beside them,
# with the write blocks defragmented in them); every run's JSON is in $OUT
# (load-*.json, round-N-*.json, pb-*-N.json, limits.json), the servers' logs
# too. Needs jq and python3.
#
# The build before issue 21 is b3ae6b1 ("ARCHITECTURE.md: a merged get
# selects with SelectMerged, not MergeProfiles and Select"): the parent of
# d3234fc ("Profile fields (issue 21, milestone 1)"), the first commit of
# issue 21; in `git log --oneline | grep -n` the two are neighbours and
# every commit above d3234fc came after it. The script checks that parent
# again, and builds OLD_REV in a worktree of its own ($OLD_SRC, detached,
# kept for the next run) with a build directory of its own.
#
# Usage: bench/issue21/run.sh
# Environment (defaults): USERS (100000) CONNECTIONS (16) SECONDS_PER_ROUND
#   (10) WARMUP (3) ROUNDS (3) PB_MIN_TIME (1, seconds a profile_bench
#   benchmark) LIMITS_FILE_MIB (1024) FILE_SIZE (4GiB, each server's data
#   file) BUILD (build) OLD_REV (b3ae6b1) OLD_SRC (/tmp/segstore-issue21-old)
#   OLD_BUILD ($OLD_SRC/build) DATA_DIR (/tmp/issue21-bench) OUT
#   (/tmp/issue21-out) JOBS (2) SKIP_BUILD (0: build both first).
# A smoke run: USERS=3000 SECONDS_PER_ROUND=2 WARMUP=0.5 ROUNDS=1
#   PB_MIN_TIME=0.05 LIMITS_FILE_MIB=64 FILE_SIZE=512MiB bench/issue21/run.sh
# Servers listen on ephemeral loopback ports (read from their logs). Keep the
# run within one UTC day: the loaded counters expire at its end (the summary
# warns when a midnight passed).
set -euo pipefail

SRC=$(pwd)
[ -f "$SRC/bench/issue21/run.sh" ] || { echo "run from the repository's root"; exit 2; }
USERS=${USERS:-100000}
CONNECTIONS=${CONNECTIONS:-16}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-10}
WARMUP=${WARMUP:-3}
ROUNDS=${ROUNDS:-3}
PB_MIN_TIME=${PB_MIN_TIME:-1}
LIMITS_FILE_MIB=${LIMITS_FILE_MIB:-1024}
FILE_SIZE=${FILE_SIZE:-4GiB}
BUILD=${BUILD:-build}
OLD_REV=${OLD_REV:-b3ae6b1}
OLD_SRC=${OLD_SRC:-/tmp/segstore-issue21-old}
OLD_BUILD=${OLD_BUILD:-$OLD_SRC/build}
D=${DATA_DIR:-/tmp/issue21-bench}
OUT=${OUT:-/tmp/issue21-out}
JOBS=${JOBS:-2}
SKIP_BUILD=${SKIP_BUILD:-0}

# The build before issue 21 must be the parent of its first commit.
first=$(git -C "$SRC" log --format=%H --grep='^Profile fields (issue 21, milestone 1)' | tail -1)
if [ -z "$first" ] || [ "$(git -C "$SRC" rev-parse "$first^")" != "$(git -C "$SRC" rev-parse "$OLD_REV^{commit}")" ]; then
  echo "warning: $OLD_REV is not the parent of issue 21's first commit (${first:-not found})"
fi

if [ "$SKIP_BUILD" != 1 ]; then
  if [ ! -d "$OLD_SRC" ]; then
    git -C "$SRC" worktree add --detach "$OLD_SRC" "$OLD_REV"
  fi
  [ "$(git -C "$OLD_SRC" rev-parse HEAD)" = "$(git -C "$SRC" rev-parse "$OLD_REV^{commit}")" ] ||
    { echo "$OLD_SRC is not at $OLD_REV"; exit 1; }
  for tree in "$OLD_SRC:$OLD_BUILD:segstored profile_bench" \
    "$SRC:$BUILD:segstored profile_bench segbench segctl"; do
    IFS=: read -r s b targets <<< "$tree"
    cmake -S "$s" -B "$b" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
      -DCMAKE_C_COMPILER_LAUNCHER=ccache > /dev/null
    # shellcheck disable=SC2086
    nice -n 10 cmake --build "$b" -j"$JOBS" --target $targets
  done
fi
OLD=$OLD_BUILD/src/server/segstored
NEW=$BUILD/src/server/segstored
OLDPB=$OLD_BUILD/bench/profile_bench
NEWPB=$BUILD/bench/profile_bench
SB=$BUILD/bench/segbench/segbench
SEGCTL=$BUILD/src/tools/segctl
for f in "$OLD" "$NEW" "$OLDPB" "$NEWPB" "$SB" "$SEGCTL"; do [ -x "$f" ] || { echo "missing $f"; exit 1; }; done

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.log "$OUT"/*.txt
rm -rf "$D"; mkdir -p "$D"/{old,new,fields}
declare -A PID ADDR
cleanup() {
  for who in "${!PID[@]}"; do kill -TERM "${PID[$who]}" 2>/dev/null || true; done
  for who in "${!PID[@]}"; do wait "${PID[$who]}" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT
start() {  # name binary
  "$2" --listen 127.0.0.1:0 --admin-listen off --data "$D/$1/segstore.dat" --file-size "$FILE_SIZE" \
    > "$OUT/$1.log" 2>&1 &
  PID[$1]=$!
  local port=""
  for _ in $(seq 1 300); do
    port=$(sed -n 's/.*serving on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$OUT/$1.log" | head -1)
    [ -n "$port" ] && break
    kill -0 "${PID[$1]}" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] || { echo "server $1 did not start:"; cat "$OUT/$1.log"; exit 1; }
  ADDR[$1]=127.0.0.1:$port
  echo "$1: $2, pid ${PID[$1]}, at ${ADDR[$1]}"
}
defrag_blocks() {  # name
  "$SEGCTL" --server "${ADDR[$1]}" --json stats | jq '."storage.defrag_blocks"'
}
# Until no server has defragmented a write block for 5 s (at most 120 s): a
# load leaves garbage (the fields load, each user's record before its
# fields), and a defragmentation running beside a round would count in it.
settle() {
  local last="" now waited=0 quiet=0
  while [ "$waited" -lt 120 ] && [ "$quiet" -lt 5 ]; do
    now="$(defrag_blocks old) $(defrag_blocks new) $(defrag_blocks fields)"
    if [ "$now" = "$last" ]; then quiet=$((quiet + 1)); else quiet=0; fi
    last=$now
    sleep 1
    waited=$((waited + 1))
  done
  echo "settled after ${waited} s (write blocks defragmented, old new fields: $last)"
}
sb() {  # name json-file workloads...
  local who=$1 json=$2; shift 2
  "$SB" --segstore "${ADDR[$who]}" --users "$USERS" --connections "$CONNECTIONS" \
    --seconds "$SECONDS_PER_ROUND" --warmup "$WARMUP" --json-file "$OUT/$json" "$@"
}

date -u
day=$(date -u +%F)
echo "=== $(git -C "$SRC" rev-parse --short HEAD) against $OLD_REV; $USERS users"
start old "$OLD"
start new "$NEW"
start fields "$NEW"

echo "=== limits"
sb new limits.json --limits-file-mib "$LIMITS_FILE_MIB" --limits-dir "$D" limits

echo "=== loads: old and new without fields, fields with them"
sb old load-old.json load
sb new load-new.json load
sb fields load-fields.json --fields load
settle

echo "=== profile_bench: before issue 21 ($OLD_REV) and this build, interleaved"
for r in $(seq 1 "$ROUNDS"); do
  for who in old new; do
    echo "--- round $r: $who"
    if [ "$who" = old ]; then
      "$OLDPB" --benchmark_filter='^BM_GetAnswer/' --benchmark_min_time="$PB_MIN_TIME" \
        --benchmark_out="$OUT/pb-old-$r.json" --benchmark_out_format=json 2>&1 | grep -E "^BM_"
    else
      "$NEWPB" --benchmark_filter='^BM_(GetAnswer|UpsertOneRewrite|IncrementRewrite|EncodeWithFields)' \
        --benchmark_min_time="$PB_MIN_TIME" \
        --benchmark_out="$OUT/pb-new-$r.json" --benchmark_out_format=json 2>&1 | grep -E "^BM_|issue 21|string values"
    fi
  done
done

echo "=== get, asking for no field: old, new, new with fields loaded; interleaved"
for r in $(seq 1 "$ROUNDS"); do
  for who in old new fields; do
    echo "--- round $r: $who"
    sb "$who" "round-$r-get-$who.json" get
  done
done

echo "=== the fields server: get-fields, incr and upsert-1 (order alternating); new: upsert-1"
for r in $(seq 1 "$ROUNDS"); do
  echo "--- round $r"
  settle
  if [ $((r % 2)) = 1 ]; then
    sb fields "round-$r-fields.json" get-fields incr upsert-1
  else
    sb fields "round-$r-fields.json" get-fields upsert-1 incr
  fi
  sb new "round-$r-upsert-new.json" upsert-1
done
date -u
if [ "$(date -u +%F)" != "$day" ]; then
  echo "warning: a UTC midnight passed during the run: the loaded counters expired then" |
    tee "$OUT/warning.txt"
fi

echo
python3 - "$OUT" "$ROUNDS" "$OLD_REV" <<'EOF' | tee "$OUT/summary.txt"
import json, os, statistics, sys

out, rounds, old_rev = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)
def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(v, digits=1):
    return "?" if v is None else f"{v:,.{digits}f}"
def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b
def run_of(j, workload):
    for r in j["runs"]:
        if r["workload"] == workload:
            return r
    return None

print(f"issue 21: profile fields' costs against {old_rev} (the build before issue 21)")
lim = load("limits.json")
print(lim["setup"])
m = lim["machine"]
print(f"machine: {m['cores']} cores ({m['cpu']}), kernel {m['kernel']}; data on {m['storage']}")
dev, ping = lim.get("limits", {}).get("device"), lim.get("limits", {}).get("ping")
if dev:
    print(f"limits: device {fmt(dev['reads_per_second'], 0)} 4 KiB reads/s at QD{dev['queue_depth']}"
          f" (p50 {fmt(dev['latency']['p50_us'])} us)", end="")
if ping:
    print(f"; ping round trip p50 {fmt(ping['round_trip']['p50_us'])} us,"
          f" {fmt(ping['pings_per_second'], 0)} pings/s", end="")
print()

print("\n1. bytes on the device per user (storage.live_bytes' growth over the load / users)")
servers = {w: load(f"load-{w}.json")["servers"][0] for w in ("old", "new", "fields")}
for w, s in servers.items():
    print(f"  {w:7s} {fmt(s['live_bytes_per_user'])} B/user"
          f" (write blocks in use: {fmt(s['disk_bytes_per_user'])} B/record)")
without, with_ = servers["new"]["live_bytes_per_user"], servers["fields"]["live_bytes_per_user"]
strings = servers["fields"].get("field_string_bytes_per_user")
names = servers["fields"]["load"].get("field_names_registered")
if None not in (without, with_, strings):
    cost = with_ - without - strings
    print(f"  the 25 fields: {fmt(with_ - without)} B/user, of which {fmt(strings)} B string values;"
          f" not counting those {fmt(cost)} B/user (goal: at most 120): "
          f"{'met' if cost <= 120 else 'NOT met'}")
print(f"  ({names} field names numbered before the fields load)")

print("\n2. a get asking for no field costs no more than before issue 21")
pb = {w: [load(f"pb-{w}-{r}.json") for r in range(1, rounds + 1)] for w in ("old", "new")}
def pb_times(w, name):
    return [next((b["cpu_time"] for b in j["benchmarks"] if b["name"] == name), None) for j in pb[w]]
print("  profile_bench (CPU ns a get's answer, the median of the rounds; each round's in brackets)")
for name in ("BM_GetAnswer/second_ttl:0", "BM_GetAnswer/second_ttl:1"):
    o, n = pb_times("old", name), pb_times("new", name)
    print(f"  {name:34s} old {fmt(median(o), 0)} {[fmt(x, 0) for x in o]}"
          f"  new {fmt(median(n), 0)} {[fmt(x, 0) for x in n]}  new/old {fmt(ratio(median(n), median(o)), 3)}")
for ttl in (0, 1):
    base = median(pb_times("new", f"BM_GetAnswer/second_ttl:{ttl}"))
    for asked in (0, 1):
        name = f"BM_GetAnswerWithFields/second_ttl:{ttl}/asked:{asked}"
        t = median(pb_times("new", name))
        print(f"  {name:48s} new {fmt(t, 0)} ns, {fmt(ratio(t, base), 3)}x"
              f" BM_GetAnswer/second_ttl:{ttl}{' (no field asked)' if asked == 0 else ' (the 20 counters asked)'}")
print("  segbench get (the median of the rounds: requests/s, p50 / p99 us, server CPU us a request)")
gets = {w: [run_of(load(f"round-{r}-get-{w}.json"), "get") for r in range(1, rounds + 1)]
        for w in ("old", "new", "fields")}
def defragged(rs):
    return sum(r["after"]["defrag_blocks"] - r["before"]["defrag_blocks"] for r in rs)
med = {}
for w, rs in gets.items():
    med[w] = {k: median([r[k] if k in ("ops_per_second", "server_cpu_us_per_op")
                         else r["latency"][k] for r in rs])
              for k in ("ops_per_second", "p50_us", "p99_us", "server_cpu_us_per_op")}
    rounds_txt = ", ".join(f"{fmt(r['ops_per_second'], 0)}/s {fmt(r['server_cpu_us_per_op'])} us"
                           for r in rs)
    print(f"  {w:7s} {fmt(med[w]['ops_per_second'], 0)}/s, p50 {fmt(med[w]['p50_us'])} /"
          f" p99 {fmt(med[w]['p99_us'])} us, CPU {fmt(med[w]['server_cpu_us_per_op'], 2)} us"
          f"  [rounds: {rounds_txt}; {defragged(rs)} write blocks defragmented in them]")
for w in ("new", "fields"):
    print(f"  {w}/old: requests/s {fmt(ratio(med[w]['ops_per_second'], med['old']['ops_per_second']), 3)},"
          f" CPU a request {fmt(ratio(med[w]['server_cpu_us_per_op'], med['old']['server_cpu_us_per_op']), 3)},"
          f" p99 {fmt(ratio(med[w]['p99_us'], med['old']['p99_us']), 3)}")

print("\n3. an increment costs no more than an upsert of one segment")
print("  profile_bench (CPU ns): an increment against an upsert of one segment of the same profile")
print("  (swept:1: none of its segments expired, or fewer than the sweeper's share;"
      " swept:0: a third expired, due for the sweeper)")
for swept in (1, 0):
    up = median(pb_times("new", f"BM_UpsertOneRewrite/fields:1/swept:{swept}"))
    for sliding in ((0, 1) if swept else (0,)):
        name = f"BM_IncrementRewrite/swept:{swept}/sliding:{sliding}"
        t = median(pb_times("new", name))
        print(f"  {name:40s} {fmt(t, 0)} ns against BM_UpsertOneRewrite/fields:1/swept:{swept}"
              f" {fmt(up, 0)} ns: {fmt(ratio(t, up), 3)}x")
rows = {w: [] for w in ("get-fields", "incr", "upsert-1")}
for r in range(1, rounds + 1):
    j = load(f"round-{r}-fields.json")
    for w in rows:
        rows[w].append(run_of(j, w))
rows["upsert-1 (new, no fields)"] = [run_of(load(f"round-{r}-upsert-new.json"), "upsert-1")
                                     for r in range(1, rounds + 1)]
fm = {}
for w, rs in rows.items():
    fm[w] = {"ops": median([r["ops_per_second"] for r in rs]),
             "cpu": median([r["server_cpu_us_per_op"] for r in rs]),
             "p50": median([r["latency"]["p50_us"] for r in rs]),
             "p99": median([r["latency"]["p99_us"] for r in rs])}
    extra = ""
    if w == "get-fields":
        extra = f", {fmt(median([r.get('fields_per_op') for r in rs]))} fields an answer"
    print(f"  {w:26s} {fmt(fm[w]['ops'], 0)}/s, p50 {fmt(fm[w]['p50'])} / p99 {fmt(fm[w]['p99'])} us,"
          f" CPU {fmt(fm[w]['cpu'], 2)} us a request{extra}"
          f"  [rounds' CPU: {', '.join(fmt(r['server_cpu_us_per_op'], 2) for r in rs)};"
          f" {defragged(rs)} write blocks defragmented in them]")
print("  (a write's CPU includes the defragmentation its garbage brings, alike for both)")
print(f"  incr / upsert-1 (both on the fields server): server CPU a request"
      f" {fmt(ratio(fm['incr']['cpu'], fm['upsert-1']['cpu']), 3)}x, requests/s"
      f" {fmt(ratio(fm['incr']['ops'], fm['upsert-1']['ops']), 3)}x, p99"
      f" {fmt(ratio(fm['incr']['p99'], fm['upsert-1']['p99']), 3)}x")
print(f"  get-fields / get (fields server): server CPU a request"
      f" {fmt(ratio(fm['get-fields']['cpu'], med['fields']['server_cpu_us_per_op']), 3)}x")
EOF
