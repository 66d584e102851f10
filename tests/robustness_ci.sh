#!/usr/bin/env bash
# Robustness checks for CI (about 5 minutes on 2 cores):
#   1. make fuzz-smoke: each libFuzzer target (gguf, model, tokenizer, chat) for FUZZ_SECS
#      seconds from its committed seeds, ASan + UBSan; any crash, leak or report fails
#   2. tests/valgrind_cli.sh: the CLI paths and hostile files under valgrind memcheck
#   3. tests/test_concurrency.c under ThreadSanitizer (two contexts on one model, cancel)
# Needs clang with the libFuzzer runtime, valgrind and python3 (Debian: clang, libclang-rt-14-dev
# on bookworm and later, valgrind); installs them with apt-get when missing and possible.
#   bash tests/robustness_ci.sh        (FUZZ_SECS=25, KZ_BUILD=build by default)
set -euo pipefail
cd "$(dirname "$0")/.."
export FUZZ_SECS=${FUZZ_SECS:-25}
B=${KZ_BUILD:-build}
N=$(nproc)
T=$(mktemp -d /tmp/kz_robust.XXXXXX)
trap 'rm -rf "$T"' EXIT

fuzz_ok() { # clang can build and link a libFuzzer binary
  command -v clang >/dev/null &&
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' |
    clang -x c -fsanitize=fuzzer,address,undefined -o "$T/probe" - 2>/dev/null
}
need=()
fuzz_ok || need+=(clang libclang-rt-14-dev)
command -v valgrind >/dev/null || need+=(valgrind)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null; then
    echo "== installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # libclang-rt-14-dev only exists as a separate package on newer Debian; older clang ships it
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null ||
      apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${need[@]}" | grep -v libclang-rt) >/dev/null
  fi
  fuzz_ok || { echo "robustness_ci: clang with libFuzzer is not available"; exit 1; }
fi

echo "== fuzz smoke (${FUZZ_SECS} s per target)"
t0=$SECONDS
make -s -j"$N" fuzz
make -s fuzz-smoke
echo "   ($((SECONDS - t0)) s)"

echo "== CLI under valgrind"
t0=$SECONDS
make -s -j"$N" BUILD="$B" all
KZ_BUILD="$B" bash tests/valgrind_cli.sh
echo "   ($((SECONDS - t0)) s)"

echo "== test_concurrency under ThreadSanitizer"
t0=$SECONDS
clang -std=c11 -D_GNU_SOURCE -O1 -g -fsanitize=thread -Iinclude -Isrc -I. -o "$T/test_concurrency_tsan" \
  tests/test_concurrency.c $(make -s print-src) -lm -lpthread
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$T/test_concurrency_tsan"
echo "   ($((SECONDS - t0)) s)"
echo "== robustness OK"
