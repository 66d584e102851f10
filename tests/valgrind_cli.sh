#!/usr/bin/env bash
# The CLI paths under valgrind (memcheck, full leak check) on the normal optimised build:
# `kazeia info`, `kazeia tokenize`, `kazeia run` on tiny models (both archs, a few tokens),
# `kazeia logits`, limits (n_ctx too big, prompt > n_ctx) and hostile files (truncated, garbage,
# impossible counts, a tensor declared past the end of the file, a missing file), which must
# fail with a message and no memcheck error. Any memcheck error or leak fails the script.
#   KZ_BUILD=build bash tests/valgrind_cli.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${KZ_BUILD:-build}
command -v valgrind >/dev/null || { echo "valgrind_cli: valgrind not installed (apt-get install valgrind)"; exit 1; }
make -s BUILD="$B" "$B/kazeia" "$B/kz-mkmodel" >/dev/null
T=$(mktemp -d /tmp/kz_valgrind.XXXXXX)
trap 'rm -rf "$T"' EXIT
VG=(valgrind -q --error-exitcode=9 --leak-check=full --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes)
fails=0; runs=0

# expect: 0 = must succeed, 1 = must fail cleanly (non-zero, not 9, one-line error on stderr)
vg() {
  local expect=$1; shift
  local name=$1; shift
  runs=$((runs + 1))
  set +e
  "${VG[@]}" --log-file="$T/vg.$runs.log" "$B/kazeia" "$@" >"$T/out.$runs" 2>"$T/err.$runs"
  local rc=$?
  set -e
  local ok=1
  if [ -s "$T/vg.$runs.log" ] || [ $rc -eq 9 ]; then ok=0; fi
  if [ "$expect" = 0 ] && [ $rc -ne 0 ]; then ok=0; fi
  if [ "$expect" = 1 ] && { [ $rc -eq 0 ] || ! grep -q . "$T/err.$runs"; }; then ok=0; fi
  if [ $ok = 1 ]; then
    echo "ok   $name (rc $rc)"
  else
    fails=$((fails + 1))
    echo "FAIL $name (rc $rc)"; cat "$T/vg.$runs.log" 2>/dev/null | head -60; head -20 "$T/err.$runs"
  fi
}

"$B/kz-mkmodel" --arch qwen35 --preset qwen35-tiny --type q8_0 --n-layer 4 -q -o "$T/q35.gguf"
"$B/kz-mkmodel" --arch qwen3 --preset qwen3-tiny --type q4_0 --n-layer 2 --untied -q -o "$T/q3.gguf"

vg 0 "info qwen35"            info "$T/q35.gguf"
vg 0 "info qwen3"             info "$T/q3.gguf"
vg 0 "tokenize --special"     tokenize -m "$T/q35.gguf" -p $'Hello w\xc3\xb6rld <|im_end|> \xf0\x9f\x98\x80 cafe\xcc\x81 \xff' --special --decode
vg 0 "tokenize file, pieces"  tokenize -m "$T/q3.gguf" -f "$0" --pieces
vg 0 "run qwen35, 2 threads"  run -m "$T/q35.gguf" -p "Sea haiku." --system "Be terse." -n 6 -t 2 -c 128 --no-think --seed 1
vg 0 "run qwen3, sampled"     run -m "$T/q3.gguf" -p "Hi" -n 6 -t 1 -c 64 --temp 0.8 --top-k 20 --seed 3 --kv f32
vg 0 "logits"                 logits -m "$T/q3.gguf" --tokens 1,2,3,200,5 --prefill 3 -o "$T/logits.bin"
# hostile files
head -c 3000 "$T/q35.gguf" >"$T/trunc.gguf"
head -c 65536 /dev/urandom >"$T/garbage.gguf"
printf 'GGUF\003\000\000\000' >"$T/counts.gguf"; head -c 16 /dev/zero | tr '\0' '\377' >>"$T/counts.gguf"
# a tensor declared 2^40 x 32 floats in a 4 KiB file
python3 - "$T/huge.gguf" <<'EOF'
import struct, sys
def s(x): return struct.pack('<Q', len(x)) + x
b = b'GGUF' + struct.pack('<IQQ', 3, 1, 1)
b += s(b'general.architecture') + struct.pack('<I', 8) + s(b'qwen3')
b += s(b'token_embd.weight') + struct.pack('<IQQIQ', 2, 32, 1 << 40, 0, 0)
b += b'\0' * ((32 - len(b) % 32) % 32) + b'\0' * 4096
open(sys.argv[1], 'wb').write(b)
EOF
vg 1 "info truncated"         info "$T/trunc.gguf"
vg 1 "run truncated"          run -m "$T/trunc.gguf" -p hi -n 2
vg 1 "info garbage"           info "$T/garbage.gguf"
vg 1 "run impossible counts"  run -m "$T/counts.gguf" -p hi -n 2
vg 1 "run huge tensor"        run -m "$T/huge.gguf" -p hi -n 2
vg 1 "tokenize missing file"  tokenize -m "$T/nope.gguf" -p hi
vg 1 "run n_ctx too big"      run -m "$T/q3.gguf" -p hi -n 2 -c 2000000000
vg 1 "run prompt > n_ctx"     run -m "$T/q3.gguf" -p "a long prompt that does not fit in sixteen tokens" -n 2 -c 16

echo "valgrind_cli: $runs runs, $fails failed"
[ $fails -eq 0 ]
