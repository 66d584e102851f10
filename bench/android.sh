#!/usr/bin/env bash
# On-phone benchmark in one command: pushes the kazeia binary and MODEL.gguf with adb, runs
# `kazeia bench` at each thread count (warm-ups included), and prints one table: prefill and
# decode tok/s, peak RSS, the decode's share of the phone's read bandwidth (measured by the bench
# with the same threads), and the hottest CPU/SoC thermal zone before and after each run.
# Records the SoC (ro.soc.model), the cpufreq governors and every thermal zone before/after; it
# refuses to measure while the phone is hot (waits up to --cool-wait s for it to cool first).
#
#   bench/android.sh MODEL.gguf [options]
#     --threads LIST    thread counts (default 4,5,6,7)
#     -p N / -n N       prefill / decode tokens (default 512 / 128)
#     -r R / --warmup W measured / warm-up runs per thread count (default 3 / 1)
#     --max-temp C      refuse to start a run above C degrees (default 45)
#     --cool-wait S     seconds to wait for the phone to cool before refusing (default 180)
#     --bin PATH        the Android build of kazeia (default build-android/kazeia; see
#                       docs/android.md for the NDK build)
#     --dir DIR         folder on the phone (default /data/local/tmp/kazeia)
#     --log FILE        also keep every bench's JSON and the thermal readings (default: none)
#     --bench-args "..."  more `kazeia bench` options (e.g. "--kv q8_0", "--membw-mib 256")
#     --poll S          seconds between thermal readings while cooling down (default 10)
#   ADB=path overrides the adb binary (tests use tests/fake_adb/adb); ANDROID_SERIAL picks a phone.
# Exit status: 0 all measured, 3 when a run was refused because the phone stayed hot, 1 on errors.
set -euo pipefail
ADB=${ADB:-adb}
THREADS=4,5,6,7 P=512 N=128 R=3 W=1 MAXT=45 COOL=180 BIN=build-android/kazeia DIR=/data/local/tmp/kazeia LOG=
BARGS= POLL=10
MODEL=
usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    -p) P=$2; shift 2 ;;
    -n) N=$2; shift 2 ;;
    -r) R=$2; shift 2 ;;
    --warmup) W=$2; shift 2 ;;
    --max-temp) MAXT=$2; shift 2 ;;
    --cool-wait) COOL=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --log) LOG=$2; shift 2 ;;
    --bench-args) BARGS=$2; shift 2 ;;
    --poll) POLL=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "android.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
    *) MODEL=$1; shift ;;
  esac
done
[ -n "$MODEL" ] || { usage >&2; exit 1; }
[ -f "$MODEL" ] || { echo "android.sh: $MODEL not found" >&2; exit 1; }
[ -x "$BIN" ] || { echo "android.sh: $BIN not found: build it with the NDK (docs/android.md) or pass --bin" >&2; exit 1; }
case "$MAXT" in ''|*[!0-9.]*) echo "android.sh: --max-temp wants degrees C, got '$MAXT'" >&2; exit 1 ;; esac
log() { [ -z "$LOG" ] || printf '%s\n' "$*" >>"$LOG"; }
[ -z "$LOG" ] || : >"$LOG"

sh_() { "$ADB" shell "$@" | tr -d '\r'; }
state=$("$ADB" get-state 2>&1 | tr -d '\r') || true
[ "$state" = device ] || { echo "android.sh: no phone ready ($ADB get-state: $state)" >&2; exit 1; }

soc=$(sh_ getprop ro.soc.model); maker=$(sh_ getprop ro.soc.manufacturer); phone=$(sh_ getprop ro.product.model)
abi=$(sh_ getprop ro.product.cpu.abi)
[ "$abi" = arm64-v8a ] || echo "android.sh: warning: the phone's ABI is '$abi', not arm64-v8a" >&2
# one governor per cpufreq policy: "policy0=schedutil policy6=performance"
gov=$(sh_ 'for p in /sys/devices/system/cpu/cpufreq/policy*; do printf "%s=%s " "${p##*/}" "$(cat $p/scaling_governor 2>/dev/null)"; done' | sed 's/ *$//')

# every thermal zone as "type=milli-degrees" (readable without root on most phones)
zones() { sh_ 'for z in /sys/class/thermal/thermal_zone*; do printf "%s=%s\n" "$(cat $z/type 2>/dev/null)" "$(cat $z/temp 2>/dev/null)"; done'; }
# the hottest CPU / SoC zone in degrees C (all zones when none is named so); "?" when none reads
hottest() {
  awk -F= '
    function deg(v) { return v > 1000 ? v / 1000.0 : v }   # some zones report degrees, most milli
    $2 ~ /^-?[0-9]+$/ { t = deg($2); all = (all == "" || t > all) ? t : all
      if (tolower($1) ~ /cpu|soc|tsens|cluster|big|little|mid|prime/) cpu = (cpu == "" || t > cpu) ? t : cpu }
    END { v = cpu != "" ? cpu : all; if (v == "") print "?"; else printf "%.1f\n", v }'
}
hot() { [ "$1" != "?" ] && awk -v t="$1" -v m="$MAXT" 'BEGIN { exit !(t > m) }'; }

echo "android.sh: pushing $(basename "$BIN") and $(basename "$MODEL") to $DIR" >&2
sh_ "mkdir -p $DIR" >/dev/null
"$ADB" push "$BIN" "$DIR/kazeia" >/dev/null
sh_ "chmod 755 $DIR/kazeia" >/dev/null
msize=$(wc -c <"$MODEL" | tr -d ' ')
rsize=$(sh_ "stat -c %s $DIR/$(basename "$MODEL") 2>/dev/null || echo 0")
[ "$rsize" = "$msize" ] || "$ADB" push "$MODEL" "$DIR/$(basename "$MODEL")" >/dev/null
RMODEL=$DIR/$(basename "$MODEL")

# a number after "key": in the bench's JSON (for {"median": ...} objects: the median)
jget() { sed -n "s/^ *\"$1\": *{\"median\": *\([-0-9.e+]*\).*/\1/p; s/^ *\"$1\": *\([-0-9.e+]*\),\{0,1\}$/\1/p" | head -1; }

rows=() refused=0
for t in ${THREADS//,/ }; do
  z0=$(zones); t0=$(printf '%s\n' "$z0" | hottest)
  waited=0
  while hot "$t0" && [ "$waited" -lt "$COOL" ]; do
    echo "android.sh: $t0 C > $MAXT C, cooling down before $t threads ($waited/$COOL s)" >&2
    sleep "$POLL"; waited=$((waited + (POLL > 0 ? POLL : 1)))
    z0=$(zones); t0=$(printf '%s\n' "$z0" | hottest)
  done
  log "threads $t: thermal before: $(echo $z0)"
  if hot "$t0"; then
    echo "android.sh: refusing to measure $t threads: $t0 C is above --max-temp $MAXT C after ${COOL} s" >&2
    rows+=("$(printf '| %7s | %13s | %12s | %13s | %12s | %9s | %17s |' "$t" - - - - - "hot: $t0 C")")
    refused=1
    continue
  fi
  out=$(sh_ "cd $DIR && ./kazeia bench -m $RMODEL -p $P -n $N -t $t -r $R --warmup $W --membw-every 0 $BARGS --json" 2>&1) || {
    echo "android.sh: kazeia bench failed at $t threads:" >&2; printf '%s\n' "$out" >&2; exit 1; }
  log "threads $t: $out"
  z1=$(zones); t1=$(printf '%s\n' "$z1" | hottest)
  log "threads $t: thermal after: $(echo $z1)"
  pp=$(printf '%s\n' "$out" | jget prefill_tok_s); tg=$(printf '%s\n' "$out" | jget decode_tok_s)
  rss=$(printf '%s\n' "$out" | jget peak_rss_bytes); bw=$(printf '%s\n' "$out" | jget membw_gbs)
  pct=$(printf '%s\n' "$out" | jget decode_bw_pct)
  [ -n "$pp$tg" ] || { echo "android.sh: no speeds in the bench output:" >&2; printf '%s\n' "$out" >&2; exit 1; }
  rows+=("$(awk -v t="$t" -v pp="${pp:-0}" -v tg="${tg:-0}" -v rss="${rss:-0}" -v bw="${bw:-0}" -v pct="${pct:--1}" \
              -v a="$t0" -v b="$t1" 'BEGIN { printf "| %7s | %13.2f | %12.2f | %13.0f | %12.2f | %9s | %17s |",
              t, pp, tg, rss / 1048576, bw, (pct < 0 ? "-" : sprintf("%.1f %%", pct)), a " -> " b " C" }')")
done

echo
echo "SoC: ${maker:+$maker }${soc:-unknown} ($phone, $abi); governors: ${gov:-unknown}"
echo "model: $(basename "$MODEL") ($((msize / 1048576)) MiB); -p $P -n $N, $R runs after $W warm-up per thread count (median)"
echo "| threads | prefill tok/s | decode tok/s |  peak RSS MiB | read BW GB/s |   % of BW | temp before/after |"
echo "|---------|---------------|--------------|---------------|--------------|-----------|-------------------|"
printf '%s\n' "${rows[@]}"
echo "(% of BW: weight bytes read per decoded token x decode tok/s over the read bandwidth the bench measured with the same threads)"
[ "$refused" -eq 0 ] || exit 3
