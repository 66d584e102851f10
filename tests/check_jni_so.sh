#!/usr/bin/env bash
# libkazeia_engine.so is what an Android app ships beside its other native libraries, so:
#   - NEEDED only libc, libm, libdl (and liblog on Android): no libstdc++/libgcc_s/libpthread
#     an app or an old device may lack (the engine is linked in statically);
#   - it exports JNI_OnLoad and Java_* only (the engine's symbols cannot clash with another
#     library's), and every native method of NativeBridge.java has its export;
#   - every LOAD segment is aligned to 16 KB (Android 15+ devices with 16 KB pages refuse less).
# usage: tests/check_jni_so.sh build/libkazeia_engine.so [NativeBridge.java]
set -euo pipefail
so=${1:-build/libkazeia_engine.so}
java=${2:-android/kazeia-android/src/main/java/org/kazeia/engine/NativeBridge.java}
[ -f "$so" ] || { echo "check_jni_so: $so not found (make jni)"; exit 1; }
bad=0
needed=$(readelf -dW "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for n in $needed; do
  case "$n" in
    libc.so|libc.so.6|libm.so|libm.so.6|libdl.so|libdl.so.2|liblog.so) ;;
    *) echo "check_jni_so: $so needs $n (allowed: libc, libm, libdl, liblog)"; bad=1 ;;
  esac
done
# defined dynamic symbols that are not local (GLOBAL, WEAK, GNU_UNIQUE)
exports=$(readelf --dyn-syms -W "$so" | awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK" || $5 == "UNIQUE") {print $8}' | sed 's/@.*//' | sort -u)
for s in $exports; do
  case "$s" in JNI_OnLoad|Java_*) ;; *) echo "check_jni_so: $so exports $s (only JNI_OnLoad and Java_* allowed)"; bad=1 ;; esac
done
echo "$exports" | grep -qx JNI_OnLoad || { echo "check_jni_so: JNI_OnLoad is not exported"; bad=1; }
if [ -f "$java" ]; then
  cls=$(sed -n 's/^package \(.*\);/\1/p' "$java" | tr . _)_$(basename "$java" .java)
  for m in $(grep -oE 'native [A-Za-z0-9_\[\]]+ [A-Za-z0-9_]+\(' "$java" | awk '{print $3}' | tr -d '('); do
    echo "$exports" | grep -qx "Java_${cls}_$m" || { echo "check_jni_so: native method $m has no export Java_${cls}_$m"; bad=1; }
  done
fi
nload=0
while read -r off vaddr align; do
  nload=$((nload + 1))
  if [ $((align)) -lt 16384 ] || [ $(( (vaddr - off) % 16384 )) -ne 0 ]; then
    echo "check_jni_so: LOAD at offset $off vaddr $vaddr align $align is not 16 KB aligned"; bad=1
  fi
done < <(readelf -lW "$so" | awk '$1 == "LOAD" {print $2, $3, $NF}')
[ "$nload" -gt 0 ] || { echo "check_jni_so: no LOAD segments?"; bad=1; }
[ $bad -eq 0 ] || exit 1
echo "check_jni_so: $so: NEEDED $(echo $needed | tr ' ' ','), $(echo "$exports" | wc -l) exports (JNI_OnLoad + Java_*), $nload LOAD segments 16 KB aligned"
