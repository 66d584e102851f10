#!/usr/bin/env bash
# The app-facing shared library exports exactly the functions include/kazeia.h declares with
# KZ_API: nothing internal leaks (apps cannot come to depend on it) and nothing public is missing.
# usage: tests/check_exports.sh build/libkazeia.so include/kazeia.h
set -euo pipefail
so=${1:-build/libkazeia.so}
hdr=${2:-include/kazeia.h}
[ -f "$so" ] || { echo "check_exports: $so not found"; exit 1; }
want=$(tr '\n' ' ' <"$hdr" | grep -oE 'KZ_API[^;(){}]*\(' | grep -oE 'kz_[A-Za-z0-9_]+ *\($' | tr -d ' (' | sort -u)
# linker-defined symbols and sanitizer runtime hooks (SAN=1) are not the library's API
got=$(nm -D --defined-only "$so" | awk '{print $NF}' |
      grep -vE '^(_init|_fini|_edata|_end|__bss_start)$|^(__asan|__ubsan|__odr_asan|__sancov|___asan)' | sort -u)
[ -n "$want" ] || { echo "check_exports: no KZ_API declarations found in $hdr"; exit 1; }
extra=$(comm -13 <(echo "$want") <(echo "$got"))
missing=$(comm -23 <(echo "$want") <(echo "$got"))
if [ -n "$extra" ] || [ -n "$missing" ]; then
  [ -n "$extra" ] && echo "check_exports: $so exports symbols kazeia.h does not declare:" && echo "$extra" | sed 's/^/  /'
  [ -n "$missing" ] && echo "check_exports: kazeia.h declares functions $so does not export:" && echo "$missing" | sed 's/^/  /'
  exit 1
fi
echo "check_exports: $so exports the $(echo "$want" | wc -l) functions of $hdr and nothing else"
