#!/usr/bin/env bash
# AArch64 instructions per token on each of kazeia's threads under qemu-user: the critical path
# on T cores, the serial phases, the waiting.
#
#   bench/arm_threads.sh [--models qwen35-0.8b[,qwen35-4b]] [--type q4_0] [--prefill 64]
#                        [--decode 2,6] [--isa i8mm] [--threads 1,6] [--layers N] [--symbols N]
#                        [--lock Q]
#   bench/arm_threads.sh --selftest    # the plugin's per-thread, task and dispatch accounting
#
# INSTRUCTIONS, NOT CYCLES (see bench/arm_icount.sh). qemu-user runs each guest thread on a host
# thread (a vCPU; 6 of them on 2 host cores is only slower). The plugin (tools/qemu-icount,
# thr=1) counts per thread; instructions in the pool's and libc's wait code (the WAIT list
# below: spin loops, park/wake, futex, the clock reads of the spin budget) are waiting, the rest
# work. Work inside a task the pool runs (called from kz_pool_run / worker_main) is parallel;
# thread 0's work outside one is serial (the other threads idle meanwhile). Each entry to
# kz_pool_run closes a dispatch. Per token by differencing two runs (as arm_icount.sh): prefill
# L/2 and L tokens, decode 2 and 6 tokens after no prefill. Printed per token, millions:
#   work     all threads' work           serial  thread 0 outside tasks
#   solo     thread 0's task work in symbols no other thread ran (a step it does alone)
#   path     serial + solo + the rest / T: the critical path if the rest split perfectly
#   eff      work / (T x path)
#   busiest  the largest one thread's work  crit  per dispatch the busiest thread, summed, +
#            serial; eff' = work / (T x crit): the split as it played out in this run
#   vpath    (--lock Q) thread 0's virtual clock: the critical path on T equal-speed cores
#            with the pool's barriers, dynamic split and waits; veff = work / (T x vpath)
#   wait     spin + park instructions
# Without --lock the split follows qemu's host schedule (parked workers wake late and thread 0
# takes their chunks), so busiest / crit are not the phone's; work, serial, solo and the
# dispatch count do not depend on it. --lock Q (plugin lock=Q): no thread runs more than Q
# instructions ahead of the slowest running one; a parked thread holds nobody up and resumes at
# the clock of the next dispatch's start or of the FUTEX_WAKE on its word (~2-5x slower runs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=build-icount
MODELS=qwen35-0.8b
TYPE=q4_0
PREFILL=64
DECODE=2,6
ISA=i8mm
THREADS=1,6
NLAYER=0
NSYM=8
LOCK=0
SELFTEST=0
while [ $# -gt 0 ]; do
    case "$1" in
    --models) MODELS=$2; shift 2 ;;
    --type) TYPE=$2; shift 2 ;;
    --prefill) PREFILL=$2; shift 2 ;;
    --decode) DECODE=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --layers) NLAYER=$2; shift 2 ;;
    --symbols) NSYM=$2; shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    --selftest) SELFTEST=1; shift ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "arm_threads.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
for t in qemu-aarch64 aarch64-linux-gnu-gcc aarch64-linux-gnu-nm; do
    command -v $t >/dev/null || { echo "arm_threads.sh: $t not found (apt-get install qemu-user gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu)" >&2; exit 1; }
done
QEMU="nice -n 10 qemu-aarch64 -cpu max"
mkdir -p $OUT/runs $OUT/models
make -s icount-plugin
PLUGIN=$ROOT/build/kz-icount.so
# waiting: the pool's spin/park (spin_gen, spin_spent are inlined into these), kz_phase waits,
# and libc's mutex / condition variable / futex / yield / clock code they call
WAIT='worker_main:kz_pool_run:kz_spin_wait:kz_phase_wait:*pthread_cond*:*pthread_mutex*:__lll_lock*:__futex*:__condvar*:__pthread_enable_asynccancel:__pthread_disable_asynccancel:*sched_yield:*clock_gettime*'

if [ $SELFTEST = 1 ]; then
    # a guest with known per-thread work: thread i of K runs (i + 1) n loop passes inside a
    # task, thread 0 also n passes outside one, and every thread spins in wait_flag (a wait=
    # symbol) at the end of its task; runs with n = 1000 and 3000 differenced
    B=$OUT/icount-selftest-thr
    aarch64-linux-gnu-gcc -O2 -static -pthread -march=armv8.6-a+dotprod+i8mm -o $B tools/qemu-icount/selftest.c
    A=0x$(aarch64-linux-gnu-nm $B | awk '$3=="dispatch"{print $1}')
    K=4
    for n in 1000 3000; do
        $QEMU -plugin $PLUGIN,out=$OUT/selftest-thr-$n.txt,thr=1,par=dispatch:worker,disp=$A,wait='*t_fla*',lock=500 $B $n $K >/dev/null
    done
    awk -v K=$K 'FNR==1{f++}
        $1=="thread"{ w[f,$2]=$4; wt[f,$2]=$5; ou[f,$2]=$6; sd[f,$2]=$8 }
        $1=="crit"{ cr[f]=$2 } $1=="dsum"{ ds[f]=$2 } $1=="dispatches"{ nd[f]=$2 }
        $1=="vtime" && $2==0 { vt[f]=$3 }
        END{ bad=0
            # per pass: 3 SDOT; thread i: (i + 1) passes in each of 2 tasks, thread 0: + 1 outside
            for (i = 0; i < K; i++) { s=(sd[2,i]-sd[1,i])/2000; want=3*(2*(i+1)+(i==0));
                printf "thread %d: sdot per n %g (want %d)\n", i, s, want; if (s!=want) bad=1 }
            P=(w[2,1]-w[1,1])/2000/4              # instructions per loop pass (thread 1: 2 x 2 passes)
            o=(ou[2,0]-ou[1,0])/2000              # thread 0 outside tasks: 1 pass (+ printf of the sums)
            printf "thread 0 outside tasks: %g per n (want %g, +-1 %%)\n", o, P; if (o < 0.99*P || o > 1.01*P) bad=1
            c=(cr[2]-cr[1])/2000; d=(ds[2]-ds[1])/2000
            printf "per pass %g instructions; dispatch max %g (want 2K x %g), all tasks %g (want K(K+1) x %g), dispatches %d (want 2)\n", P, c, P, d, P, nd[2]
            if (c != 2*K*P || d != K*(K+1)*P || nd[2] != 2 || nd[1] != 2) bad=1
            # the spin is waiting: work per thread is the loop passes alone (+ a constant)
            for (i = 1; i < K; i++) { x=(w[2,i]-w[1,i])/2000; if (x != 2*(i+1)*P) { bad=1; printf "thread %d: work per n %g (want %g)\n", i, x, 2*(i+1)*P } }
            if (wt[2,1] <= 0) { bad=1; print "no waiting counted" }
            # lock=500: thread 0 waits for the slowest thread (4 passes) in each dispatch
            v=(vt[2]-vt[1])/2000
            printf "virtual time of thread 0: %g per n (want 9 x %g, +-2 %%)\n", v, P; if (v < 0.98*9*P || v > 1.02*9*P) bad=1
            exit bad }' $OUT/selftest-thr-1000.txt $OUT/selftest-thr-3000.txt \
        && echo "threads selftest ok" || { echo "threads selftest FAILED"; exit 1; }
    exit 0
fi

KZB=$OUT/kz-aarch64
make -s -j2 CC=aarch64-linux-gnu-gcc BUILD=$KZB LDSAN=-static $KZB/kazeia
make -s -j2 build/kz-mkmodel
BIN=$KZB/kazeia
DISP=0x$(aarch64-linux-gnu-nm $BIN | awk '$3=="kz_pool_run"{print $1}')
[ "$DISP" != 0x ] || { echo "arm_threads.sh: no kz_pool_run in $BIN" >&2; exit 1; }

LOCKARG=
[ "$LOCK" != 0 ] && LOCKARG=,lock=$LOCK
# count T MODEL P N -> the plugin's file (cached by binary, model, arguments)
count() {
    local t=$1 model=$2 p=$3 n=$4 key f
    key=$(cat $BIN $PLUGIN | sha1sum | cut -c1-12)-$(basename $model .gguf)-thr-$ISA-t$t-p$p-n$n${LOCKARG:+-lock$LOCK}
    f=$OUT/runs/$key.txt
    if [ ! -s $f ]; then
        echo "  qemu: KZ_ISA=$ISA $(basename $model) -t $t p=$p n=$n" >&2
        KZ_ISA=$ISA $QEMU -plugin $PLUGIN,out=$f.tmp,sym=1,thr=1,par=kz_pool_run:worker_main,disp=$DISP,wait=$WAIT$LOCKARG \
            $BIN bench -m $model -p $p -n $n -t $t -r 1 --warmup 0 --no-membw >$f.log 2>&1 \
            || { echo "arm_threads.sh: run failed, see $f.log" >&2; exit 1; }
        mv $f.tmp $f
    fi
    echo $f
}

# one table row from files a, b (token counts differing by n), T threads
row() {
    awk -v n=$3 -v T=$4 -v lab="$5" 'FNR==1{f++}
        $1=="thread"{ w[f,$2]=$4; wt[f,$2]=$5; ou[f,$2]=$6; th[$2]=1 }
        $1=="crit"{ cr[f]=$2 } $1=="dispatches"{ nd[f]=$2 }
        $1=="vtime" && $2==0 { vt[f]=$3 }
        $1=="tsym" && !$4 { tv[f,$2,$5]=$3; if ($2 > 0) oth[$5]=1; sy[$5]=1 }
        $1=="ssym" && !$3 { ss[f,$4]=$2 }
        END{ W=0; Wt=0; B=0; per=""
            for (i in th) { x=(w[2,i]-w[1,i])/n; W+=x; Wt+=(wt[2,i]-wt[1,i])/n; if (x>B) B=x }
            for (i=0; i<64; i++) if (i in th) per=per sprintf("%s%.1f", per==""?"":" ", (w[2,i]-w[1,i])/n/1e6)
            S=(ou[2,0]-ou[1,0])/n; C=(cr[2]-cr[1])/n+S
            # solo: task work in symbols that no other thread ran (thread 0 alone, in a dispatch)
            solo=0
            for (s in sy) if (!(s in oth)) solo+=((tv[2,0,s]-ss[2,s])-(tv[1,0,s]-ss[1,s]))/n
            if (T == 1) solo=0
            M=S+solo+(W-S-solo)/T
            vp="- | -"  # (a test before any vt[2] reference: awk creates elements on reference)
            if (2 in vt) { V=(vt[2]-vt[1])/n; vp=sprintf("%.2f | %.2f", V/1e6, W/(T*V)) }
            printf "| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.1f | %.2f | %s |\n", lab, T, W/1e6, S/1e6, solo/1e6,
                M/1e6, W/(T*M), B/1e6, C/1e6, W/(T*C), vp, (nd[2]-nd[1])/n, Wt/1e6, per }' $1 $2
}
# thread 0's serial symbols (outside tasks), per token, the largest N
sersym() {
    awk -v n=$3 '$1=="ssym" && !$3 { if (FILENAME==ARGV[1]) a[$4]=$2; else b[$4]=$2 }
        END{ for (s in b) printf "%.3f %s\n", (b[s]-a[s])/n/1e6, s }' $1 $2 | sort -rn | awk -v k=$4 'NR<=k && $1>0'
}

# thread 0's task work in symbols that no other thread ran, per token, the largest N
solosym() {
    awk -v n=$3 'FNR==1{f++} $1=="tsym" && !$4 { tv[f,$2,$5]=$3; if ($2 > 0) oth[$5]=1; sy[$5]=1 }
        $1=="ssym" && !$3 { ss[f,$4]=$2 }
        END{ for (s in sy) if (!(s in oth)) printf "%.3f %s\n", ((tv[2,0,s]-ss[2,s])-(tv[1,0,s]-ss[1,s]))/n/1e6, s }' $1 $2 |
        sort -rn | awk -v k=$4 'NR<=k && $1>0'
}

IFS=, read -ra PL <<<"$PREFILL"
IFS=, read -ra DL <<<"$DECODE"
IFS=, read -ra TL <<<"$THREADS"
IFS=, read -ra ML <<<"$MODELS"
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
    for T in "${TL[@]}"; do
        lp=$(( PL[0] / 2 )); prev=$(count $T $model $lp 0)
        for L in "${PL[@]}"; do
            cur=$(count $T $model $L 0)
            ROWS="$ROWS$(row $prev $cur $((L - lp)) $T "$LABEL | prefill@$L")"$'\n'
            [ $T -gt 1 ] && [ $NSYM -gt 0 ] && \
                SYMS="$SYMS"$'\n'"$LABEL -t $T prefill@$L: serial symbols (thread 0 outside tasks), M instr/token"$'\n'"$(sersym $prev $cur $((L - lp)) $NSYM)"$'\n'"solo symbols (thread 0 alone in tasks)"$'\n'"$(solosym $prev $cur $((L - lp)) $NSYM)"
            prev=$cur; lp=$L
        done
        d0=$(count $T $model 0 ${DL[0]}); d1=$(count $T $model 0 ${DL[1]})
        ROWS="$ROWS$(row $d0 $d1 $(( DL[1] - DL[0] )) $T "$LABEL | decode")"$'\n'
        [ $T -gt 1 ] && [ $NSYM -gt 0 ] && \
            SYMS="$SYMS"$'\n'"$LABEL -t $T decode: serial symbols (thread 0 outside tasks), M instr/token"$'\n'"$(sersym $d0 $d1 $(( DL[1] - DL[0] )) $NSYM)"$'\n'"solo symbols (thread 0 alone in tasks)"$'\n'"$(solosym $d0 $d1 $(( DL[1] - DL[0] )) $NSYM)"
    done
done
echo
echo "Instructions per token (millions), not cycles; qemu-aarch64 -cpu max, KZ_ISA=$ISA, $TYPE, random weights${LOCKARG:+, lock=$LOCK};"
echo "prefill@L: runs of L and L/2 (or the previous L) tokens differenced; decode: runs of ${DL[0]} and ${DL[1]} tokens."
echo "serial: thread 0 outside tasks; solo: thread 0 alone in tasks (symbols no other thread ran);"
echo "path = serial + solo + rest / threads (equal cores, the rest balanced), eff = work / (threads x path);"
echo "under qemu's schedule: busiest = max over threads, crit = per-dispatch busiest + serial, eff' = work / (threads x crit)"
echo
echo "vpath (--lock): thread 0's virtual clock on equal cores, veff = work / (threads x vpath)"
echo
echo "| model | phase | threads | work | serial | solo | path | eff | busiest | crit | eff' | vpath | veff | dispatches/tok | wait | work per thread |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
printf "%s" "$ROWS"
[ -n "$SYMS" ] && printf "%s\n" "$SYMS"
true
exit 0
