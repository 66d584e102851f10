#!/usr/bin/env bash
# Installs the Python packages the conformance tests (tests/py) need, only those missing, so it
# returns in about a second when everything is there. Used by `make py-deps` (which `make test`
# runs) and by .ci/run; `--bench` installs only what bench/compare.sh needs (numpy and
# llama-cpp-python). PYTHON picks the interpreter (default python3).
#
# llama-cpp-python builds llama.cpp from source (~15 min on 2 cores): the peer reference of the
# tests and of bench/compare.sh. Its multimodal library (LLAVA_BUILD) is not used and is skipped.
# On x86 the ISA is named instead of GGML_NATIVE: a native build on an AMX host segfaults in
# ggml_backend_amx_mul_mat where the sandbox does not grant AMX tiles (GGML_AMX_*=OFF alone does
# not stop -march=native enabling it); the repack (CPU_REPACK) kernels stay on for the bench.
set -euo pipefail
PY=${PYTHON:-python3}
LLAMA_CPP_PYTHON=llama-cpp-python==0.3.36

# pip name -> module name
PKGS=(numpy:numpy gguf:gguf tokenizers:tokenizers safetensors:safetensors pytest:pytest
      pytest-timeout:pytest_timeout transformers:transformers torch:torch)
case "${1:-}" in
  "") ;;
  --bench) PKGS=(numpy:numpy) ;;
  *) echo "usage: tests/install_deps.sh [--bench]" >&2; exit 2 ;;
esac

if ! command -v "$PY" >/dev/null; then
  echo "install_deps: $PY not found; install Python 3 (e.g. apt-get install python3 python3-pip)" >&2
  exit 1
fi

missing() { # prints the pip names of the packages whose module is not importable
  "$PY" - "$@" <<'PYEOF'
import importlib.util, sys
for spec in sys.argv[1:]:
    pip_name, mod = spec.split(":")
    if importlib.util.find_spec(mod) is None:
        print(pip_name)
PYEOF
}

pip_install() { # pip install "$@", with a fallback where the system Python refuses (PEP 668)
  local log
  log=$(mktemp)
  if "$PY" -m pip install -q --disable-pip-version-check "$@" 2>"$log"; then rm -f "$log"; return 0; fi
  if grep -q externally-managed-environment "$log"; then
    echo "install_deps: this Python is externally managed; installing into the user site instead" \
         "(--user --break-system-packages; use a virtualenv to avoid that)" >&2
    rm -f "$log"
    "$PY" -m pip install -q --disable-pip-version-check --user --break-system-packages "$@"
    return
  fi
  cat "$log" >&2
  rm -f "$log"
  return 1
}

if ! "$PY" -m pip --version >/dev/null 2>&1; then
  echo "install_deps: pip is missing for $PY (e.g. apt-get install python3-pip)" >&2
  exit 1
fi

need=$(missing "${PKGS[@]}")
if [ -n "$need" ]; then
  echo "install_deps: installing ${need//$'\n'/ } (torch alone is several GB of wheels)"
  # shellcheck disable=SC2086
  pip_install $need
fi

if [ -n "$(missing llama-cpp-python:llama_cpp)" ]; then
  CMAKE_ARGS="-DLLAVA_BUILD=OFF"
  if [ "$(uname -m)" = x86_64 ]; then
    CMAKE_ARGS="$CMAKE_ARGS -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
    grep -q avx512_vnni /proc/cpuinfo && CMAKE_ARGS="$CMAKE_ARGS -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON"
  fi
  echo "install_deps: building $LLAMA_CPP_PYTHON (compiles llama.cpp: ~15 min on 2 cores)"
  CMAKE_ARGS="$CMAKE_ARGS" pip_install "$LLAMA_CPP_PYTHON"
fi

need=$(missing "${PKGS[@]}" llama-cpp-python:llama_cpp)
if [ -n "$need" ]; then
  echo "install_deps: still missing after the install: ${need//$'\n'/ }" >&2
  exit 1
fi
echo "install_deps: python packages present (${PKGS[*]%%:*} llama-cpp-python)"
