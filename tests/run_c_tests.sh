#!/usr/bin/env bash
# Runs each C test binary given; a binary passes when it exits 0. Prints 'N passed, N failed'.
# A test that runs past KZ_TEST_TIMEOUT seconds (default 1200) is killed and counted as failed,
# so a hang fails loudly instead of eating the CI budget. KZ_TEST_PAR=N runs N at a time
# (default 1; each test's output is printed whole when it ends, in the given order).
set -u
lim=${KZ_TEST_TIMEOUT:-1200}
par=${KZ_TEST_PAR:-1}
pass=0; fail=0; failed=()
report() { # report BINARY RC
  if [ "$2" -eq 0 ]; then pass=$((pass+1)); else
    [ "$2" -eq 124 ] && echo "TIMEOUT: $1 ran past ${lim} s"
    fail=$((fail+1)); failed+=("$1")
  fi
}
if [ "$par" -le 1 ]; then
  for t in "$@"; do timeout -k 10 "$lim" "$t"; report "$t" $?; done
else
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
  i=0
  for t in "$@"; do
    while [ "$(jobs -rp | wc -l)" -ge "$par" ]; do wait -n; done
    ( timeout -k 10 "$lim" "$t" >"$out/$i.log" 2>&1; echo $? >"$out/$i.rc" ) &
    i=$((i+1))
  done
  wait
  i=0
  for t in "$@"; do
    cat "$out/$i.log"; rc=$(cat "$out/$i.rc" 2>/dev/null || echo 1); report "$t" "$rc"; i=$((i+1))
  done
fi
for f in "${failed[@]:-}"; do [ -n "$f" ] && echo "FAILED: $f"; done
echo "C tests: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
