#!/usr/bin/env bash
# Where a get's server CPU goes, by symbol, in three builds side by side:
# the build before issue 21 ("old"), a build of issue 21 without DecodeSelect
# aligned to a cache line ("unaligned", 1cfe2c5) and this build ("new").
# bench/issue21/run.sh found a get that asks for no field 9 to 11 % dearer
# in server CPU on main than before issue 21, though the get path's code was
# the same; this run tells code from code layout.
#
# In one run, from the repository's root:
#   - profile_bench BM_GetAnswer of old and new, interleaved (ROUNDS rounds);
#   - the three servers at once, each loaded with the same USERS users;
#   - ROUNDS rounds of segbench get against each, their order rotating
#     between rounds, each with `perf record` (software clock, 1999 Hz)
#     attached to the server under test;
#   - a summary: server CPU a get (segbench, from /proc), and the time a get
#     spends in the segstored binary's own code, by symbol (perf samples /
#     gets / 1999 Hz).
# perf is linux-perf (Debian); hardware counters are not needed (many VMs
# have none). Run as root or with kernel.perf_event_paranoid <= 1.
#
# Usage: bench/issue21/layout.sh OLD_BUILD UNALIGNED_BUILD NEW_BUILD
#   each a Release build directory holding src/server/segstored (and, for
#   OLD_BUILD and NEW_BUILD, bench/profile_bench); segbench comes from
#   NEW_BUILD. The 2026-11-27 run's: OLD_BUILD was run.sh's ($OLD_SRC/build,
#   b3ae6b1), NEW_BUILD a Release build of this revision (configured as
#   run.sh does), and UNALIGNED_BUILD that build's segstored at 1cfe2c5
#   (before DecodeSelect's alignment), copied into DIR/src/server/.
# Environment (defaults): USERS (100000) CONNECTIONS (16) SECONDS_PER_ROUND
#   (5) ROUNDS (9) DATA_DIR (/tmp/issue21-layout) OUT (/tmp/issue21-layout-out)
set -euo pipefail

[ $# = 3 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2; }
declare -A BIN=([old]=$1/src/server/segstored [unaligned]=$2/src/server/segstored
                [new]=$3/src/server/segstored)
OLDPB=$1/bench/profile_bench
NEWPB=$3/bench/profile_bench
SB=$3/bench/segbench/segbench
USERS=${USERS:-100000}
CONNECTIONS=${CONNECTIONS:-16}
SECONDS_PER_ROUND=${SECONDS_PER_ROUND:-5}
ROUNDS=${ROUNDS:-9}
D=${DATA_DIR:-/tmp/issue21-layout}
OUT=${OUT:-/tmp/issue21-layout-out}
for f in "${BIN[@]}" "$OLDPB" "$NEWPB" "$SB"; do [ -x "$f" ] || { echo "missing $f"; exit 1; }; done
command -v perf > /dev/null || { echo "needs perf (apt-get install linux-perf)"; exit 1; }

rm -rf "$D" "$OUT"
mkdir -p "$D"/{old,unaligned,new} "$OUT"
declare -A PID ADDR
cleanup() {
  for who in "${!PID[@]}"; do kill -TERM "${PID[$who]}" 2>/dev/null || true; done
  for who in "${!PID[@]}"; do wait "${PID[$who]}" 2>/dev/null || true; done
  rm -rf "$D"
}
trap cleanup EXIT
start() {  # name
  "${BIN[$1]}" --listen 127.0.0.1:0 --admin-listen off --data "$D/$1/segstore.dat" \
    --file-size 4GiB > "$OUT/$1.log" 2>&1 &
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
  echo "$1: ${BIN[$1]}, pid ${PID[$1]}, at ${ADDR[$1]}"
}

date -u
echo "=== profile_bench BM_GetAnswer: old and new, interleaved"
for r in $(seq 1 "$ROUNDS"); do
  for who in old new; do
    pb=$OLDPB
    [ "$who" = new ] && pb=$NEWPB
    "$pb" --benchmark_filter='^BM_GetAnswer/' --benchmark_min_time=1 \
      --benchmark_out="$OUT/pb-$who-$r.json" --benchmark_out_format=json > /dev/null 2>&1
  done
done

for who in old unaligned new; do start "$who"; done
"$SB" --segstore "${ADDR[new]}" --seconds 3 --warmup 0.5 --limits-file-mib 1024 \
  --limits-dir "$D" --json-file "$OUT/limits.json" limits | tail -4
for who in old unaligned new; do
  "$SB" --segstore "${ADDR[$who]}" --users "$USERS" --json-file "$OUT/load-$who.json" load | tail -1
done
sleep 15  # the loads' defragmentation settles
orders=("old unaligned new" "new old unaligned" "unaligned new old")
echo "=== segbench get, each round's order rotating, perf on the server under test"
for r in $(seq 1 "$ROUNDS"); do
  for who in ${orders[$((r % 3))]}; do
    perf record -F 1999 -p "${PID[$who]}" -o "$OUT/perf-$who-$r.data" \
      -- sleep "$(awk "BEGIN { print $SECONDS_PER_ROUND + 2 }")" > /dev/null 2>&1 &
    perf_pid=$!
    "$SB" --segstore "${ADDR[$who]}" --users "$USERS" --connections "$CONNECTIONS" \
      --seconds "$SECONDS_PER_ROUND" --warmup 1 --json-file "$OUT/get-$who-$r.json" get |
      grep -E '^segstore +get' | sed "s/^/round $r $who: /"
    wait "$perf_pid" || true
  done
done
date -u

for who in old unaligned new; do
  for r in $(seq 1 "$ROUNDS"); do
    perf report -i "$OUT/perf-$who-$r.data" --stdio --no-children \
      --dsos "$(basename "${BIN[$who]}")" --sort symbol -F sample,sym 2> /dev/null \
      > "$OUT/symbols-$who-$r.txt"
  done
done

python3 - "$OUT" "$ROUNDS" <<'EOF' | tee "$OUT/summary.txt"
import collections, json, os, re, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
who = ["old", "unaligned", "new"]
def load(name):
    with open(os.path.join(out, name)) as f:
        return json.load(f)

# The minimum too: on a busy host a round's CPU time only grows (the cache
# and the core shared), so the least is the cleanest figure.
print("profile_bench BM_GetAnswer (CPU ns: the median and the least of the rounds; each round's in brackets)")
for case in ("second_ttl:0", "second_ttl:1"):
    m = {}
    for w in ("old", "new"):
        xs = [b["cpu_time"] for r in range(1, rounds + 1) for b in load(f"pb-{w}-{r}.json")["benchmarks"]
              if b["name"] == f"BM_GetAnswer/{case}"]
        m[w] = (statistics.median(xs), min(xs))
        print(f"  {case} {w:9} median {m[w][0]:7,.0f} least {m[w][1]:7,.0f}  {[round(x) for x in xs]}")
    print(f"  {case} new/old: median {m['new'][0] / m['old'][0]:.3f}, least {m['new'][1] / m['old'][1]:.3f}")

ops, cpu, syms = {}, {}, {}
for w in who:
    ops[w], cpu[w], syms[w] = 0, [], collections.Counter()
    for r in range(1, rounds + 1):
        run = load(f"get-{w}-{r}.json")["runs"][0]
        ops[w] += run["ops"]
        cpu[w].append(run["server_cpu_us_per_op"])
        with open(os.path.join(out, f"symbols-{w}-{r}.txt")) as f:
            for line in f:
                m = re.match(r"\s*(\d+)\s+\[.\]\s+(.*)", line)
                if m:
                    syms[w][m.group(2).strip()[:72]] += int(m.group(1))
print("\nsegbench get: server CPU a get (us; median, min, and each round's)")
for w in who:
    print(f"  {w:9} median {statistics.median(cpu[w]):5.1f} min {min(cpu[w]):5.1f}  "
          f"{[round(x, 1) for x in cpu[w]]}")
print(f"  new/old median {statistics.median(cpu['new']) / statistics.median(cpu['old']):.3f}, "
      f"unaligned/old {statistics.median(cpu['unaligned']) / statistics.median(cpu['old']):.3f}")
us = lambda w, n: n / ops[w] / 1999 * 1e6
print("\ntime a get spends in the segstored binary's own code, by symbol (us; perf samples, all rounds)")
print("      old unaligned    new")
keys = sorted(set().union(*syms.values()), key=lambda k: -sum(us(w, syms[w][k]) for w in who))
for k in keys[:10]:
    print("  " + " ".join(f"{us(w, syms[w][k]):7.2f}" for w in who) + f"  {k}")
print("  " + " ".join(f"{us(w, sum(syms[w].values())):7.2f}" for w in who) + "  all of it")
EOF
