#!/usr/bin/env bash
# JVM tests of libkazeia_engine.so (make test-jni): compiles the Java wrapper
# (android/kazeia-android/src/main/java) and its JUnit 4 tests, writes the tiny models, and runs
# JUnit on a JVM with -Xcheck:jni (the JNI checker aborts on modified-UTF-8 misuse, bad local
# references and calls with an exception pending). With Debian's kotlinc installed, the
# coroutine-free Kotlin sources are compiled too (see docs/android.md for what that covers).
#   KZ_BUILD (build), JUNIT_CP (junit4 + hamcrest jars)
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${KZ_BUILD:-build}
JUNIT_CP=${JUNIT_CP:-/usr/share/java/junit4.jar:/usr/share/java/hamcrest-core.jar}
OUT=$B/jvm
MOD=android/kazeia-android/src
for j in ${JUNIT_CP//:/ }; do
  [ -f "$j" ] || { echo "run_jvm_tests: $j missing (apt-get install junit4)"; exit 1; }
done
command -v javac >/dev/null || { echo "run_jvm_tests: javac missing (apt-get install default-jdk-headless)"; exit 1; }
rm -rf "$OUT/classes" "$OUT/tmp"
mkdir -p "$OUT/classes" "$OUT/tmp"
javac -Xlint:all -Werror -d "$OUT/classes" -cp "$JUNIT_CP" \
  $(find "$MOD/main/java" "$MOD/test/java" -name '*.java' | sort)
[ -f "$OUT/tiny.gguf" ] || "$B/kz-mkmodel" --arch qwen35 --type q8_0 -q -o "$OUT/tiny.gguf"
[ -f "$OUT/emoji.gguf" ] || "$B/jni_fixture" emoji-model "$OUT/emoji.gguf"
[ -f "$OUT/guard.gguf" ] || "$B/kz-mkmodel" --arch qwen3 --type q8_0 -q -o "$OUT/guard.gguf"
KOTLIN_RUN=
KX=/usr/share/java/kotlinx-coroutines-core.jar:/usr/share/java/atomicfu.jar
if command -v kotlinc >/dev/null && [ -f "${KX%%:*}" ]; then
  # Debian has kotlinc 1.3 and kotlinx-coroutines 1.0 (no Flow): every source but the Flow
  # layer (KazeiaFlow.kt) is compiled and the interop test runs on them
  kt=$(grep -L 'kotlinx\.coroutines\.flow' $(find "$MOD/main/kotlin" -name '*.kt') | sort)
  echo "run_jvm_tests: $(kotlinc -version 2>&1 | grep -o 'kotlinc-jvm [0-9.]*') + kotlinx-coroutines 1.0 on: $(echo $kt | xargs -n1 basename | tr '\n' ' ')+ KotlinInterop.kt"
  rm -f "$OUT/kotlin.jar"
  kotlinc -nowarn -cp "$OUT/classes:$KX" -d "$OUT/kotlin.jar" $kt "$MOD/test/kotlin/org/kazeia/engine/KotlinInterop.kt" 2>&1 |
    grep -v 'Xverify\|^warning' || true
  [ -f "$OUT/kotlin.jar" ] || { echo "run_jvm_tests: kotlinc failed"; exit 1; }
  KOTLIN_RUN=1
else
  echo "run_jvm_tests: kotlinc or kotlinx-coroutines missing, Kotlin sources not compiled (apt-get install kotlin libkotlinx-coroutines-java)"
fi
timeout -k 10 600 java -Xcheck:jni -Dkazeia.library="$(realpath "$B/libkazeia_engine.so")" \
  -Dkazeia.model="$OUT/tiny.gguf" -Dkazeia.emoji="$OUT/emoji.gguf" -Dkazeia.fixture="$(realpath "$B/jni_fixture")" \
  -Dkazeia.guard="$OUT/guard.gguf" -Dkazeia.cli="$(realpath "$B/kazeia")" \
  -Dkazeia.tmp="$OUT/tmp" -cp "$OUT/classes:$JUNIT_CP" org.junit.runner.JUnitCore \
  org.kazeia.engine.EngineTest org.kazeia.engine.ConversationTest
if [ -n "$KOTLIN_RUN" ]; then
  KT_STD=$(ls /usr/share/java/kotlin-stdlib.jar 2>/dev/null || echo "$(dirname "$(realpath "$(command -v kotlinc)")")/../lib/kotlin-stdlib.jar")
  timeout -k 10 300 java -Xcheck:jni -Dkazeia.library="$(realpath "$B/libkazeia_engine.so")" \
    -cp "$OUT/classes:$OUT/kotlin.jar:$KT_STD:$KX" org.kazeia.engine.KotlinInteropKt "$OUT/tiny.gguf" "$OUT/guard.gguf" "$(realpath "$B/jni_fixture")"
fi
