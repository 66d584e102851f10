#!/usr/bin/env bash
# AArch64 instruction counts of kazeia and llama.cpp under qemu-user, per prefill and decode token.
#
#   bench/arm_icount.sh [--models qwen35-0.8b[,qwen35-4b]] [--type q4_0] [--prefill 64,512]
#                       [--decode 2,6] [--isa neon,dotprod,i8mm] [--no-llama] [--symbols N]
#                       [--layers N]
#   bench/arm_icount.sh --selftest      # the plugin's SDOT/SMMLA decoding on a known loop
#
# It counts INSTRUCTIONS, NOT CYCLES: every executed AArch64 instruction weighs 1 (an SMMLA as
# much as a MOV), caches and memory are not modelled. What it answers: how much work each engine
# issues per token on one thread, and whether the multiply work (SDOT, SMMLA) is the same.
#
# Both engines run the same random-weight GGUF (build/kz-mkmodel presets) under
# `qemu-aarch64 -cpu max -plugin build/kz-icount.so` (tools/qemu-icount/icount.c), 1 thread.
# Per token by differencing runs of two lengths, so model load, repacking and warm-up cancel:
#   prefill at L_i = (I(p = L_i) - I(p = L_{i-1})) / (L_i - L_{i-1}), L_{-1} = L_0 / 2, n = 0;
#   decode = (I(n = N1) - I(n = N0)) / (N1 - N0) after no prefill (depth 0..N1).
# kazeia: `kazeia bench -t 1 -r 1 --warmup 0 --no-membw` with KZ_ISA=<level>; llama.cpp:
# `llama-bench -t 1 -r 1 --no-warmup`, built from the llama-cpp-python sdist's vendored source
# for armv8.6-a+dotprod+i8mm with GGML_NATIVE=OFF and its CPU repack (q4_0 -> 4x8) on.
# --layers N: the preset's shape with only N layers (kz-mkmodel --n-layer; N a multiple of the
# full_attention_interval keeps its GDN : attention mix), for shapes too big to emulate whole:
# prefill per token then scales with the layer count (the lm head runs on the last token only
# and cancels); decode does not (one lm head per token), so difference two layer counts.
# Builds and counts are cached in build-icount/ (a count is keyed by the binary's hash, the
# model and the arguments), so a rerun after a kernel change runs only kazeia again.
# Needs: qemu-aarch64 (7.x, plugin support), aarch64-linux-gnu-gcc/g++, cmake, pip; host gcc.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=build-icount
MODELS=qwen35-0.8b
TYPE=q4_0
PREFILL=64,512
DECODE=2,6
ISAS=neon,dotprod,i8mm
LLAMA=1
NSYM=0
NLAYER=0
SELFTEST=0
LLVER=0.3.36
while [ $# -gt 0 ]; do
    case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --type) TYPE=$2; shift 2 ;;
    --prefill) PREFILL=$2; shift 2 ;;
    --decode) DECODE=$2; shift 2 ;;
    --isa) ISAS=$2; shift 2 ;;
    --no-llama) LLAMA=0; shift ;;
    --symbols) NSYM=$2; shift 2 ;;
    --layers) NLAYER=$2; shift 2 ;;
    --selftest) SELFTEST=1; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "arm_icount.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for t in qemu-aarch64 aarch64-linux-gnu-gcc; do
    command -v $t >/dev/null || { echo "arm_icount.sh: $t not found (apt-get install qemu-user gcc-aarch64-linux-gnu)" >&2; exit 1; }
done
QEMU="nice -n 10 qemu-aarch64 -cpu max"
mkdir -p $OUT/runs $OUT/models

# the plugin (host build)
make -s icount-plugin
PLUGIN=$ROOT/build/kz-icount.so

if [ $SELFTEST = 1 ]; then
    aarch64-linux-gnu-gcc -O2 -static -march=armv8.6-a+dotprod+i8mm -o $OUT/icount-selftest tools/qemu-icount/selftest.c
    f=$(mktemp)
    for n in 1000 3000; do
        $QEMU -plugin $PLUGIN,out=$f $OUT/icount-selftest $n >/dev/null
        eval "sd_$n=$(awk '$1=="sdot"{print $2}' $f) sm_$n=$(awk '$1=="smmla"{print $2}' $f)"
    done
    rm -f $f
    # per loop iteration: 3 SDOT and 2 SMMLA (UDOT, UMMLA, USMMLA not counted)
    sd=$(( (sd_3000 - sd_1000) / 2000 )); sm=$(( (sm_3000 - sm_1000) / 2000 ))
    echo "selftest: per iteration sdot $sd (want 3), smmla $sm (want 2)"
    [ $sd = 3 ] && [ $sm = 2 ] || { echo "selftest FAILED"; exit 1; }
    echo "selftest ok"
    exit 0
fi

# kazeia, static, for AArch64 (LDSAN is the link-flag slot of the Makefile's link rules)
KZB=$OUT/kz-aarch64
make -s -j2 CC=aarch64-linux-gnu-gcc BUILD=$KZB LDSAN=-static $KZB/kazeia
make -s -j2 build/kz-mkmodel

# llama.cpp's llama-bench, static, for AArch64 (once)
LLB=$OUT/llama-aarch64/bin/llama-bench
if [ $LLAMA = 1 ] && [ ! -x $LLB ]; then
    command -v aarch64-linux-gnu-g++ >/dev/null || { echo "arm_icount.sh: aarch64-linux-gnu-g++ not found (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
    SRC=$OUT/llama_cpp_python-$LLVER/vendor/llama.cpp
    if [ ! -d $SRC ]; then
        [ -f $OUT/llama_cpp_python-$LLVER.tar.gz ] || \
            pip download llama-cpp-python==$LLVER --no-deps --no-binary :all: -d $OUT >/dev/null
        tar xzf $OUT/llama_cpp_python-$LLVER.tar.gz -C $OUT
    fi
    echo "building llama.cpp for AArch64 (once; several minutes)..." >&2
    cmake -S $SRC -B $OUT/llama-aarch64 -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
        -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
        -DGGML_CPU_ARM_ARCH=armv8.6-a+dotprod+i8mm -DGGML_CPU_REPACK=ON -DGGML_OPENMP=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DCMAKE_EXE_LINKER_FLAGS=-static >$OUT/llama-cmake.log 2>&1
    nice -n 10 cmake --build $OUT/llama-aarch64 --target llama-bench -j2 >$OUT/llama-build.log 2>&1 || \
        { echo "arm_icount.sh: llama.cpp build failed, see $OUT/llama-build.log" >&2; exit 1; }
fi

# count ENGINE ISA MODEL P N -> "total sdot smmla" (cached); the per-symbol counts in the file
count() {
    local eng=$1 isa=$2 model=$3 p=$4 n=$5 bin key f
    if [ $eng = kazeia ]; then bin=$KZB/kazeia; else bin=$LLB; fi
    key=$(sha1sum $bin | cut -c1-12)-$(basename $model .gguf)-$eng-$isa-p$p-n$n
    f=$OUT/runs/$key.txt
    if [ ! -s $f ]; then
        echo "  qemu: $eng ${isa:+KZ_ISA=$isa }$(basename $model) p=$p n=$n" >&2
        if [ $eng = kazeia ]; then
            KZ_ISA=$isa $QEMU -plugin $PLUGIN,out=$f.tmp,sym=1 $bin bench -m $model -p $p -n $n -t 1 -r 1 \
                --warmup 0 --no-membw >$f.log 2>&1
        else
            $QEMU -plugin $PLUGIN,out=$f.tmp,sym=1 $bin -m $model -p $p -n $n -t 1 -r 1 --no-warmup >$f.log 2>&1
        fi || { echo "arm_icount.sh: run failed, see $f.log" >&2; exit 1; }
        mv $f.tmp $f
    fi
    echo $f
}
val() { awk -v k=$2 '$1==k{print $2}' $1; }
# per-token difference of key k between files a (length la) and b (length lb), in millions
dpt() { awk -v a=$(val $1 $3) -v b=$(val $2 $3) -v n=$4 'BEGIN{printf "%.2f", (b-a)/n/1e6}'; }
# the N symbols with the largest per-token difference between files a and b
symdiff() {
    awk -v n=$3 '$1=="sym"{ if (FILENAME==ARGV[1]) a[$5]=$2; else b[$5]=$2 }
        END{ for (s in b) printf "%.2f %s\n", (b[s]-a[s])/n/1e6, s }' $1 $2 | sort -rn | awk -v n=$4 'NR <= n'
}

IFS=, read -ra PL <<<"$PREFILL"
IFS=, read -ra DL <<<"$DECODE"
IFS=, read -ra IL <<<"$ISAS"
IFS=, read -ra ML <<<"$MODELS"
L0=$(( PL[0] / 2 ))
echo "instructions (not cycles) per token, millions; qemu-aarch64 -cpu max, 1 thread, $TYPE" >&2
hdr="| model | engine | level |"
sep="|---|---|---|"
for L in "${PL[@]}"; do hdr="$hdr prefill@$L |"; sep="$sep---|"; done
hdr="$hdr decode | SMMLA / prefill tok | SDOT / prefill tok | SMMLA / decode tok | SDOT / decode tok |"
sep="$sep---|---|---|---|---|"
ROWS=""
SYMS=""
for M in "${ML[@]}"; do
    LABEL=$M
    if [ $NLAYER -gt 0 ]; then
        LABEL="$M ($NLAYER layers)"
        model=$OUT/models/$M-L$NLAYER-$TYPE.gguf
        [ -f $model ] || build/kz-mkmodel --arch ${M%%-*} --preset $M --n-layer $NLAYER --type $TYPE -q -o $model
    else
        model=$OUT/models/$M-$TYPE.gguf
        [ -f $model ] || build/kz-mkmodel --arch ${M%%-*} --preset $M --type $TYPE -q -o $model
    fi
    runs=()
    for isa in "${IL[@]}"; do runs+=("kazeia:$isa"); done
    [ $LLAMA = 1 ] && runs+=("llama.cpp:")
    declare -A PP TG
    for r in "${runs[@]}"; do
        eng=${r%%:*}; isa=${r#*:}
        prev=$(count $eng "$isa" $model $L0 0); lp=$L0
        row="| $LABEL | $eng | ${isa:-armv8.6-a+i8mm} |"
        for L in "${PL[@]}"; do
            cur=$(count $eng "$isa" $model $L 0)
            v=$(dpt $prev $cur total $((L - lp)))
            PP[$r:$L]=$v
            row="$row $v |"
            last_a=$prev; last_b=$cur; last_n=$((L - lp))
            prev=$cur; lp=$L
        done
        d0=$(count $eng "$isa" $model 0 ${DL[0]}); d1=$(count $eng "$isa" $model 0 ${DL[1]})
        dn=$(( DL[1] - DL[0] ))
        TG[$r]=$(dpt $d0 $d1 total $dn)
        row="$row ${TG[$r]} | $(dpt $last_a $last_b smmla $last_n) | $(dpt $last_a $last_b sdot $last_n) | $(dpt $d0 $d1 smmla $dn) | $(dpt $d0 $d1 sdot $dn) |"
        ROWS="$ROWS$row"$'\n'
        if [ $NSYM -gt 0 ]; then
            SYMS="$SYMS"$'\n'"$LABEL $eng ${isa:-} prefill@${PL[-1]}: top symbols, M instr/token"$'\n'"$(symdiff $last_a $last_b $last_n $NSYM)"
            SYMS="$SYMS"$'\n'"$LABEL $eng ${isa:-} decode: top symbols, M instr/token"$'\n'"$(symdiff $d0 $d1 $dn $NSYM)"
        fi
    done
    if [ $LLAMA = 1 ]; then
        row="| $LABEL | kazeia / llama.cpp | ${IL[-1]} / llama.cpp |"
        best=kazeia:${IL[-1]}
        for L in "${PL[@]}"; do row="$row $(awk -v a=${PP[$best:$L]} -v b=${PP[llama.cpp::$L]} 'BEGIN{printf "%.2fx", a/b}') |"; done
        row="$row $(awk -v a=${TG[$best]} -v b=${TG[llama.cpp:]} 'BEGIN{printf "%.2fx", a/b}') | | | | |"
        ROWS="$ROWS$row"$'\n'
    fi
    unset PP TG
done
echo
echo "Instructions per token (millions), not cycles. qemu-aarch64 -cpu max, 1 thread, $TYPE, random weights;"
echo "prefill@L: runs of L and the previous length (first: $L0) tokens differenced; decode: runs of ${DL[0]} and ${DL[1]} tokens at depth 0."
echo
echo "$hdr"
echo "$sep"
printf "%s" "$ROWS"
[ -n "$SYMS" ] && printf "%s\n" "$SYMS"
exit 0
