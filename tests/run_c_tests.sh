#!/usr/bin/env bash
# Runs each C test binary given; a binary passes when it exits 0. Prints 'N passed, N failed'.
set -u
pass=0; fail=0; failed=()
for t in "$@"; do
  if "$t"; then pass=$((pass+1)); else fail=$((fail+1)); failed+=("$t"); fi
done
for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "C tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
