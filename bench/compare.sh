#!/usr/bin/env bash
# Kazeia vs llama.cpp on the same random-weight GGUFs (generated once into build/bench-models/),
# same threads, same prefill/decode schedule. Table on stdout, JSON in build/bench-results.json.
#   bench/compare.sh                                   # qwen35-0.8b pp512/tg128 + qwen35-4b pp128/tg16
#   bench/compare.sh -t 2 -r 2 --models qwen35-0.8b:512:128,qwen35-4b:128:16
#   bench/compare.sh --help                            # all options (bench/compare_llamacpp.py)
# KZ_BUILD selects the build dir (default build); KZ_NO_BUILD=1 skips `make`. Run under `nice` on
# a shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KZ_BUILD:-build}

# llama-cpp-python (builds llama.cpp: several minutes the first time) and numpy, with the same
# build options as the tests' (tests/install_deps.sh); a no-op when present
bash tests/install_deps.sh --bench >&2
# build first so the numbers are those of the current sources; KZ_NO_BUILD=1 uses the binaries
# already in $BUILD (e.g. while someone's half-written file breaks the build)
if [ "${KZ_NO_BUILD:-0}" != 1 ]; then
    make BUILD="$BUILD" -j2 all dev >&2 || { echo "compare.sh: make failed (KZ_NO_BUILD=1 skips the build)" >&2; exit 1; }
fi
exec python3 bench/compare_llamacpp.py --build "$BUILD" "$@"
