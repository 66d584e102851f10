#!/usr/bin/env bash
# Bit-identity against another commit: builds BASE (default: the last commit before the legibility
# refactor) in a temporary worktree beside this tree, writes tiny qwen35 / qwen3 models (F32, Q8_0,
# Q4_0, Q4_K_M) once, and compares `kazeia logits` (a chunked prefill, then one-token decode steps)
# of the two builds byte for byte: every x86 KZ_ISA level, repack on and off, KV f32/f16/q8_0, 1 and
# 2 threads; and, where aarch64-linux-gnu-gcc and qemu-aarch64 exist, every ARM64 level under qemu,
# against ARM_BASE: the AArch64 f32 products (nn/sgemm.c) fuse multiply-adds since that commit (all
# ARM levels alike), so ARM logits with a chunked GDN / tiled attention differ from older commits'.
#   bash tests/bitident.sh [BASE]        prints 'bitident: N passed, N failed'
#   KZ_BITIDENT_ARM=0                    skip the ARM64 half
#   KZ_BITIDENT_ARM_BASE=COMMIT          the ARM64 half's base (default: ARM_BASE below)
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BASE=${1:-be3f7de}
ARM_BASE=${KZ_BITIDENT_ARM_BASE:-eed97ea}
T=$(mktemp -d /tmp/kz_bitident.XXXXXX)
OLD="$T/old"
OLD_ARM="$T/old-arm"
cleanup() {
  git -C "$ROOT" worktree remove --force "$OLD" >/dev/null 2>&1
  git -C "$ROOT" worktree remove --force "$OLD_ARM" >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT

git worktree add -q --detach "$OLD" "$BASE" || { echo "bitident: cannot check out $BASE"; exit 1; }
echo "bitident: $BASE ($(git rev-parse --short "$BASE")) vs the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', with changes'))"
make -s -j2 BUILD=build-bitident all >/tmp/kz-bitident-new.log 2>&1 || { tail -20 /tmp/kz-bitident-new.log; echo "bitident: build of the tree failed"; exit 1; }
make -s -C "$OLD" -j2 all >/tmp/kz-bitident-old.log 2>&1 || { tail -20 /tmp/kz-bitident-old.log; echo "bitident: build of $BASE failed"; exit 1; }
NEW_BIN="$ROOT/build-bitident/kazeia"
OLD_BIN="$OLD/build/kazeia"

# models: n_embd 256 so that Q4_K_M is possible; 40 prompt tokens in chunks of 32 (the chunked GDN
# and the tiled attention) + 8, then 8 decode steps
M="$T/models"; mkdir -p "$M"
for arch in qwen35 qwen3; do
  for ty in f32 q8_0 q4_0 q4_k_m; do
    "$ROOT/build-bitident/kz-mkmodel" -q --arch $arch --type $ty --n-embd 256 --n-ff 512 --seed 7 -o "$M/$arch-$ty.gguf" \
      || { echo "bitident: kz-mkmodel $arch $ty failed"; exit 1; }
  done
done
TOKS=$(python3 -c "import random; r=random.Random(5); print(','.join(str(r.randrange(0, 250)) for _ in range(48)))")
COMMON=(--tokens "$TOKS" --prefill 40 --n-batch 32)

pass=0; fail=0; failed=()
check() { # check NAME RUNNER... -- ARGS  (RUNNER: prefix command, e.g. env KZ_ISA=avx2)
  local name=$1; shift
  local pre=()
  while [ "$1" != "--" ]; do pre+=("$1"); shift; done
  shift
  local a="$T/a.bin" b="$T/b.bin"
  rm -f "$a" "$b"
  if ! "${pre[@]}" "$OLD_BIN_RUN" logits "$@" "${COMMON[@]}" -o "$a" >/dev/null 2>"$T/err.old"; then
    fail=$((fail + 1)); failed+=("$name (old build failed: $(tail -1 "$T/err.old"))"); return
  fi
  if ! "${pre[@]}" "$NEW_BIN_RUN" logits "$@" "${COMMON[@]}" -o "$b" >/dev/null 2>"$T/err.new"; then
    fail=$((fail + 1)); failed+=("$name (new build failed: $(tail -1 "$T/err.new"))"); return
  fi
  if cmp -s "$a" "$b" && [ -s "$a" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); failed+=("$name (logits differ)"); fi
}

levels=(scalar avx2)
grep -q avx512_vnni /proc/cpuinfo && levels+=(avx512)
OLD_BIN_RUN=$OLD_BIN NEW_BIN_RUN=$NEW_BIN
for f in "$M"/*.gguf; do
  mn=$(basename "$f" .gguf)
  for isa in "${levels[@]}"; do
    for t in 1 2; do
      check "x86 $mn $isa -t$t" env KZ_ISA=$isa -- -m "$f" -t $t
    done
    check "x86 $mn $isa no-repack" env KZ_ISA=$isa -- -m "$f" -t 2 --no-repack
    for kv in f16 q8_0; do check "x86 $mn $isa kv=$kv" env KZ_ISA=$isa -- -m "$f" -t 2 --kv $kv; done
  done
done
echo "bitident: x86 ${levels[*]}: $pass passed, $fail failed so far"

if [ "${KZ_BITIDENT_ARM:-1}" != 0 ] && command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null; then
  make -s -j2 CC=aarch64-linux-gnu-gcc BUILD=build-bitident-arm64 build-bitident-arm64/kazeia >/tmp/kz-bitident-new-arm.log 2>&1 \
    || { tail -20 /tmp/kz-bitident-new-arm.log; echo "bitident: ARM64 build of the tree failed"; exit 1; }
  git worktree add -q --detach "$OLD_ARM" "$ARM_BASE" || { echo "bitident: cannot check out $ARM_BASE"; exit 1; }
  echo "bitident: ARM64 half against $ARM_BASE ($(git rev-parse --short "$ARM_BASE"))"
  make -s -C "$OLD_ARM" -j2 CC=aarch64-linux-gnu-gcc BUILD=build-arm64 build-arm64/kazeia >/tmp/kz-bitident-old-arm.log 2>&1 \
    || { tail -20 /tmp/kz-bitident-old-arm.log; echo "bitident: ARM64 build of $ARM_BASE failed"; exit 1; }
  OLD_BIN_RUN=$OLD_ARM/build-arm64/kazeia NEW_BIN_RUN=$ROOT/build-bitident-arm64/kazeia
  Q=(qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu)
  for f in "$M"/*.gguf; do
    mn=$(basename "$f" .gguf)
    for isa in scalar neon dotprod i8mm; do
      check "arm64 $mn $isa" env KZ_ISA=$isa "${Q[@]}" -- -m "$f" -t 2
    done
    check "arm64 $mn i8mm no-repack kv=q8_0" env KZ_ISA=i8mm "${Q[@]}" -- -m "$f" -t 2 --no-repack --kv q8_0
  done
else
  echo "bitident: ARM64 half skipped (KZ_BITIDENT_ARM=0, or no aarch64-linux-gnu-gcc / qemu-aarch64)"
fi

for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "bitident: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
