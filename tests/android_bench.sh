#!/usr/bin/env bash
# bench/android.sh end to end against tests/fake_adb/adb (a folder as the phone, commands run
# here with the host build of kazeia on a tiny model): the table has one measured row per thread
# count with the SoC and governors of the fake phone; a phone that stays hot is refused (exit 3);
# one that cools down within --cool-wait is measured. Prints the tables. KZ_BUILD (build).
set -uo pipefail
cd "$(dirname "$0")/.."
B=${KZ_BUILD:-build}
W=$(mktemp -d /tmp/kz-android-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
[ -x "$B/kazeia" ] && [ -x "$B/kz-mkmodel" ] || { echo "android_bench: build $B/kazeia and $B/kz-mkmodel first"; exit 1; }
"$B/kz-mkmodel" --arch qwen35 --type q4_0 -q -o "$W/tiny.gguf" || exit 1
fail=0
check() { if eval "$2"; then echo "  ok   $1"; else echo "  FAIL $1"; fail=1; fi; }

phone() { # phone DIR TEMP_C: a fake SM8750 with two cpufreq policies and three thermal zones
  local d=$1
  mkdir -p "$d/data/local/tmp" "$d/sys/devices/system/cpu/cpufreq/policy0" "$d/sys/devices/system/cpu/cpufreq/policy6"
  echo schedutil >"$d/sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
  echo performance >"$d/sys/devices/system/cpu/cpufreq/policy6/scaling_governor"
  local i=0
  for z in cpu-0-0-0:$2 cpu-1-0-0:$(($2 - 2)) battery:31; do
    mkdir -p "$d/sys/class/thermal/thermal_zone$i"
    echo "${z%%:*}" >"$d/sys/class/thermal/thermal_zone$i/type"
    echo "$(( ${z##*:} * 1000 ))" >"$d/sys/class/thermal/thermal_zone$i/temp"
    i=$((i + 1))
  done
  printf 'ro.soc.model=SM8750\nro.soc.manufacturer=QTI\nro.product.model=FakePhone\nro.product.cpu.abi=arm64-v8a\n' >"$d/props"
}
ARGS=(--bin "$B/kazeia" -p 32 -n 8 -r 1 --warmup 1 --poll 0 --bench-args "--membw-mib 64 --membw-passes 1")

echo "android_bench: a cool phone, 4/5/6/7 threads"
phone "$W/p1" 38
FAKE_ADB_ROOT=$W/p1 ADB=tests/fake_adb/adb nice bash bench/android.sh "$W/tiny.gguf" "${ARGS[@]}" --log "$W/log1" >"$W/out1" 2>"$W/err1"
rc=$?
cat "$W/out1"
check "exit 0" "[ $rc -eq 0 ]"
check "SoC and governors recorded" "grep -q 'SoC: QTI SM8750 (FakePhone, arm64-v8a); governors: policy0=schedutil policy6=performance$' '$W/out1'"
for t in 4 5 6 7; do
  check "row for $t threads with speeds, RSS, bandwidth share, temperatures" \
    "grep -Eq '^\\| +$t \\| +[0-9]+\\.[0-9]{2} \\| +[0-9]+\\.[0-9]{2} \\| +[0-9]+ \\| +[0-9]+\\.[0-9]{2} \\| +[0-9.]+ % \\| +38\\.0 -> 38\\.0 C \\|' '$W/out1'"
done
check "binary and model pushed into the fake phone" "[ -x '$W/p1/data/local/tmp/kazeia/kazeia' ] && cmp -s '$W/tiny.gguf' '$W/p1/data/local/tmp/kazeia/tiny.gguf'"
check "thermal zones logged before and after" "[ \$(grep -c 'thermal before: cpu-0-0-0=38000' '$W/log1') -eq 4 ] && grep -q 'thermal after:' '$W/log1'"

echo "android_bench: a phone that stays hot (50 C, --max-temp 45, no cool-down time)"
phone "$W/p2" 50
FAKE_ADB_ROOT=$W/p2 ADB=tests/fake_adb/adb bash bench/android.sh "$W/tiny.gguf" "${ARGS[@]}" --threads 4 --cool-wait 0 >"$W/out2" 2>"$W/err2"
rc=$?
cat "$W/out2"
check "exit 3 (refused)" "[ $rc -eq 3 ]"
check "the refusal says why" "grep -q 'refusing to measure 4 threads: 50.0 C is above --max-temp 45 C' '$W/err2'"
check "no bench ran" "! grep -q 'tok/s.*[0-9]' <(grep '^| *4 ' '$W/out2')"

echo "android_bench: a hot phone that cools (56 C, -4 C a reading) and heats while measured (+6 C a run)"
phone "$W/p3" 56
FAKE_ADB_ROOT=$W/p3 FAKE_ADB_COOL=4 FAKE_ADB_HEAT=6 ADB=tests/fake_adb/adb bash bench/android.sh "$W/tiny.gguf" "${ARGS[@]}" \
  --threads 5 --cool-wait 60 >"$W/out3" 2>"$W/err3"
rc=$?
cat "$W/out3"
check "exit 0 after cooling" "[ $rc -eq 0 ]"
check "it waited for the phone to cool" "[ \$(grep -c 'cooling down before 5 threads' '$W/err3') -ge 2 ]"
check "before/after temperatures show the heating" "grep -Eq '^\\| +5 \\|.* 44\\.0 -> 46\\.0 C \\|' '$W/out3'"
[ $fail -eq 0 ] && echo "android_bench: all passed" || echo "android_bench: FAILED"
exit $fail
