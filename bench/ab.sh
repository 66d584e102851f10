#!/usr/bin/env bash
# A/B speed of this tree against another commit on one model: builds BASE in a temporary worktree,
# then alternates `kazeia bench --json` of the two builds (A = BASE, B = the tree) for R rounds and
# prints each round's prefill/decode tok/s and the medians and spreads of both, and of the paired
# ratios B/A. On a shared, noisy host only the alternation makes the two comparable.
#   bash bench/ab.sh [-r ROUNDS] [-t THREADS] [-p N] [-n N] MODEL.gguf [BASE]   (BASE: be3f7de)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
R=4; TH=2; P=512; N=128
while getopts "r:t:p:n:" o; do
  case $o in r) R=$OPTARG ;; t) TH=$OPTARG ;; p) P=$OPTARG ;; n) N=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
MODEL=${1:?usage: bench/ab.sh [-r R] [-t T] [-p N] [-n N] MODEL.gguf [BASE]}
BASE=${2:-be3f7de}
T=$(mktemp -d /tmp/kz_ab.XXXXXX)
trap 'git -C "$ROOT" worktree remove --force "$T/old" >/dev/null 2>&1; rm -rf "$T"' EXIT
git worktree add -q --detach "$T/old" "$BASE"
make -s -C "$T/old" -j2 build/kazeia >/dev/null
make -s -j2 build/kazeia >/dev/null
A="$T/old/build/kazeia"; B="$ROOT/build/kazeia"
BW=$("$B" bench --membw -t "$TH" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["membw_gbs"])')
echo "ab: $MODEL, A = $BASE, B = $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo '+changes'), $R rounds, -t $TH -p $P -n $N, read bandwidth $BW GB/s"
for i in $(seq "$R"); do
  for side in A B; do
    bin=$A; [ $side = B ] && bin=$B
    "$bin" bench -m "$MODEL" -t "$TH" -p "$P" -n "$N" -r 2 --membw-gbs "$BW" --json > "$T/$side.$i.json"
  done
done
python3 - "$T" "$R" <<'EOF'
import json, statistics as st, sys
d, R = sys.argv[1], int(sys.argv[2])
def get(side, i):
    j = json.load(open(f"{d}/{side}.{i}.json"))
    return (j["prefill_tok_s"]["median"] if "prefill_tok_s" in j else None,
            j["decode_tok_s"]["median"] if "decode_tok_s" in j else None)
rows = [(get("A", i), get("B", i)) for i in range(1, R + 1)]
for k, name in ((0, "prefill"), (1, "decode")):
    a = [r[0][k] for r in rows]; b = [r[1][k] for r in rows]
    if a[0] is None: continue
    ratio = [y / x for x, y in zip(a, b)]
    print(f"{name:8s} A {st.median(a):8.2f} t/s ({min(a):.2f}-{max(a):.2f})   B {st.median(b):8.2f} t/s "
          f"({min(b):.2f}-{max(b):.2f})   B/A median {st.median(ratio):.4f} ({min(ratio):.4f}-{max(ratio):.4f}), "
          f"B ahead in {sum(r > 1 for r in ratio)}/{R}")
EOF
