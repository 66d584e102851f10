#!/usr/bin/env bash
# ARM64 check on an x86-64 host: cross-builds the tree with aarch64-linux-gnu-gcc into
# build-arm64/ and runs the kernel tests under qemu-user:
#   - test_quant once per ISA level (KZ_ISA=scalar, neon, dotprod, i8mm) on `-cpu max`
#     and every tests/test_quant_<family>.c (each compares all levels with scalar itself);
#     (matmul through the dispatched kernels of that level);
#   - test_repack (16-row packed Q4_0 weights: logits identical to the plain rows) with
#     KZ_ISA=neon (no packed kernel: no copy), dotprod and i8mm on `-cpu max`, and on
#     cortex-a76 (auto level = dotprod), plus test_quant on cortex-a76;
#   - test_simd on `-cpu max` (every level vs scalar, greedy tokens across levels) and on
#     cortex-a76 (dotprod, no i8mm) and cortex-a53 (plain NEON), so feature detection and the
#     refusal of a level the CPU lacks are exercised too;
#   - test_ops on `-cpu max` (the NEON build of the float row ops and decode kernels), and
#     test_gdn_chunk (the GDN decode step of every level = the plain one, bit for bit).
# Installs the Debian cross toolchain and qemu-user when missing. Prints
# 'arm64: N passed, N failed' and exits non-zero on any failure. About 15 minutes on 2 cores.
#   KZ_ARM64_JOBS=N   make -j (default 2); KZ_ARM64_PAR=N   emulators at a time (default 2)
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${KZ_ARM64_BUILD:-build-arm64}
JOBS=${KZ_ARM64_JOBS:-2}
SYSROOT=/usr/aarch64-linux-gnu

need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null 2>&1 || need+=(qemu-user)
[ -f "$SYSROOT/include/stdio.h" ] || need+=(libc6-dev-arm64-cross)
command -v clang >/dev/null 2>&1 || need+=(clang)
if [ ${#need[@]} -gt 0 ]; then
  echo "arm64_ci: installing ${need[*]}"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"; } >/tmp/kz-arm64-apt.log 2>&1; then
    tail -5 /tmp/kz-arm64-apt.log
    echo "arm64_ci: could not install ${need[*]} (needs root and the Debian archive); see /tmp/kz-arm64-apt.log"
    echo "arm64: 0 passed, 1 failed"
    exit 1
  fi
fi

# every quant kernel test: test_quant (core types) and one test_quant_<family> per type family
QTESTS=$(for f in tests/test_quant*.c; do b=$(basename "$f" .c); printf '%s ' "$BUILD/$b"; done)
echo "arm64_ci: cross-building into $BUILD/"
if ! make -s CC=aarch64-linux-gnu-gcc BUILD="$BUILD" -j"$JOBS" \
      "$BUILD/libkazeia.a" $QTESTS "$BUILD/test_simd" "$BUILD/test_repack" "$BUILD/test_ops" "$BUILD/test_gdn_chunk" "$BUILD/test_mtp" "$BUILD/test_thin" >/tmp/kz-arm64-build.log 2>&1; then
  tail -30 /tmp/kz-arm64-build.log
  echo "arm64_ci: cross build failed (log: /tmp/kz-arm64-build.log)"
  echo "arm64: 0 passed, 1 failed"
  exit 1
fi
if grep -q "warning:" /tmp/kz-arm64-build.log; then
  grep "warning:" /tmp/kz-arm64-build.log
  echo "arm64_ci: the cross build has warnings (the tree must build warning-free)"
  echo "arm64: 0 passed, 1 failed"
  exit 1
fi

pass=0; fail=0; failed=()
PAR=${KZ_ARM64_PAR:-2}
RES=$(mktemp -d)
trap 'rm -rf "$RES"' EXIT
started=()
# run NAME CPU ENV... -- BINARY: starts it under qemu, PAR at a time (each run is one
# single-threaded emulator); `collect` waits for the started runs and reports them in order
run() {
  local name=$1 cpu=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n; done
  started+=("$name")
  (
    t0=$SECONDS
    # a hang under emulation must fail within minutes, not eat the CI budget
    if timeout -k 10 "${KZ_ARM64_TIMEOUT:-600}" env "${envs[@]}" qemu-aarch64 -cpu "$cpu" -L "$SYSROOT" "$@" \
         >"/tmp/kz-arm64-$name.log" 2>&1; then r=ok; else r=FAIL; fi
    echo "$r $((SECONDS - t0))" >"$RES/$name"
  ) &
}
collect() {
  wait
  local name r secs
  for name in "${started[@]}"; do
    read -r r secs <"$RES/$name" || { r=FAIL; secs=?; }
    if [ "$r" = ok ]; then
      pass=$((pass + 1)); echo "  ok   $name ($secs s)"
    else
      fail=$((fail + 1)); failed+=("$name"); echo "  FAIL $name ($secs s), log: /tmp/kz-arm64-$name.log"
      tail -20 "/tmp/kz-arm64-$name.log"
    fi
  done
  started=()
}

for isa in scalar neon dotprod i8mm; do
  run "test_quant-$isa" max KZ_ISA=$isa -- "$BUILD/test_quant"
done
# family tests compare every level with scalar themselves (bit for bit), in one run each
for t in $QTESTS; do
  [ "$(basename "$t")" = test_quant ] && continue
  run "$(basename "$t")-max" max KZ_TEST_SMALL=1 -- "$t"
done
# packed Q4_0 (repack_weights): per level on max, and a dotprod CPU without i8mm
for isa in neon dotprod i8mm; do
  run "test_repack-$isa" max KZ_ISA=$isa KZ_TEST_SMALL=1 -- "$BUILD/test_repack"
done
run test_repack-cortex-a76 cortex-a76 KZ_TEST_SMALL=1 -- "$BUILD/test_repack"
run test_quant-cortex-a76 cortex-a76 -- "$BUILD/test_quant"
run test_simd-max max KZ_TEST_SMALL=1 -- "$BUILD/test_simd"
# the float row ops and decode kernels in their NEON build: GDN conv decode = prefill (the
# shuffled K = 4 path), attention groups = per-head form, exp, norms
run test_ops-max max -- "$BUILD/test_ops"
# the GDN decode step of every NEON level = the plain one bit for bit; chunkwise vs recurrent
run test_gdn_chunk-max max -- "$BUILD/test_gdn_chunk"
# thin GEMMs (a verify's 2-4 tokens): every token's row = its one-token product, every level
run test_thin-max max KZ_TEST_SMALL=1 -- "$BUILD/test_thin"
for isa in neon dotprod i8mm; do  # MTP verify batches = plain decoding, bit for bit (issue 25)
  run "test_mtp-$isa" max KZ_ISA=$isa KZ_TEST_SMALL=1 -- "$BUILD/test_mtp"
done
run test_simd-cortex-a76 cortex-a76 KZ_TEST_SMALL=1 -- "$BUILD/test_simd"
run test_simd-cortex-a53 cortex-a53 KZ_TEST_SMALL=1 -- "$BUILD/test_simd"
collect
# the levels each emulated CPU must have reported (detection must not over- or under-claim)
for cpu_want in "max:neon dotprod i8mm" "cortex-a76:neon dotprod" "cortex-a53:neon"; do
  cpu=${cpu_want%%:*}; want=${cpu_want#*:}
  got=$(grep -m1 "levels to test against scalar:" "/tmp/kz-arm64-test_simd-$cpu.log" 2>/dev/null | sed 's/.*scalar: *//')
  if [ "$got" = "$want" ]; then
    pass=$((pass + 1)); echo "  ok   detect-$cpu ($got)"
  else
    fail=$((fail + 1)); failed+=("detect-$cpu"); echo "  FAIL detect-$cpu: levels '$got', want '$want'"
  fi
done

# the Android NDK compiles with clang: the library built by clang --target=aarch64-linux-gnu
# warning-free, and the kernels with clang-only code paths (literal-lane loads instead of GCC's
# inline asm) bit-identical to scalar under qemu
CB=$BUILD-clang
if CFLAGS=-Werror make -s CC="clang --target=aarch64-linux-gnu" BUILD="$CB" -j"$JOBS" \
     "$CB/libkazeia.a" "$CB/test_simd" "$CB/test_quant_legacy" >/tmp/kz-arm64-clang.log 2>&1; then
  pass=$((pass + 1)); echo "  ok   clang-build (-Werror)"
  run test_simd-clang max KZ_TEST_SMALL=1 -- "$CB/test_simd"
  run test_quant_legacy-clang max KZ_TEST_SMALL=1 -- "$CB/test_quant_legacy"
  collect
else
  fail=$((fail + 1)); failed+=(clang-build); echo "  FAIL clang-build, log: /tmp/kz-arm64-clang.log"
  tail -20 /tmp/kz-arm64-clang.log
fi

for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "arm64: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
