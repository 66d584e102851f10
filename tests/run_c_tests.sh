#!/usr/bin/env bash
# Runs each C test binary given; a binary passes when it exits 0. Prints 'N passed, N failed'.
# A test that runs past KZ_TEST_TIMEOUT seconds (default 1200) is killed and counted as failed,
# so a hang fails loudly instead of eating the CI budget.
set -u
lim=${KZ_TEST_TIMEOUT:-1200}
pass=0; fail=0; failed=()
for t in "$@"; do
  timeout -k 10 "$lim" "$t"; rc=$?
  if [ "$rc" -eq 0 ]; then pass=$((pass+1)); else
    [ "$rc" -eq 124 ] && echo "TIMEOUT: $t ran past ${lim} s"
    fail=$((fail+1)); failed+=("$t")
  fi
done
for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "C tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
