#!/usr/bin/env bash
# `kazeia chat` driven through a real terminal (tmux): type a question and read the streamed
# answer on the screen, Ctrl-C in the middle of an answer, ask again (the conversation goes on),
# /stats, then EOF (Ctrl-D) exits 0; a second session exits on Ctrl-C at the prompt. Then piped
# runs (one line per turn) save the conversation in one process and go on with it in another.
# The model is random (qwen3, hidden 256, the 152k-token Qwen2 vocabulary of the shared test data:
# real words on the screen, and an answer that rarely ends early; it has no <think> token, so
# thinking stays on: the Qwen3 prompt then holds none), one thread.
set -u
B=${KZ_BUILD:-build}
command -v tmux >/dev/null || { echo "chat_tty: tmux is not installed (apt-get install tmux)"; exit 1; }
dir=$(mktemp -d /tmp/kz_chat_tty.XXXXXX)
sock=$dir/tmux.sock
cleanup() { tmux -S "$sock" kill-server 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
fail() { echo "chat_tty: FAILED: $*"; echo "--- screen"; screen; echo "--- stderr"; cat "$dir/err" 2>/dev/null; exit 1; }
screen() { tmux -S "$sock" capture-pane -p -t kz 2>/dev/null; }
keys() { tmux -S "$sock" send-keys -t kz "$@"; }
# wait_for SECONDS COMMAND...: poll until the command succeeds
wait_for() { local t=$1; shift; for _ in $(seq 1 $((t * 10))); do "$@" && return 0; sleep 0.1; done; return 1; }
n_stats() { local n; n=$(grep -c '^\[prefill' "$dir/err" 2>/dev/null); echo "${n:-0}"; }
has_stats() { [ "$(n_stats)" -ge "$1" ]; }
on_screen() { screen | grep -qF -- "$1"; }
prompt_back() { screen | grep -v '^[[:space:]]*$' | tail -n 1 | grep -q '^> *$'; }

vocab=$(dirname "$0")/../../shared/data/qwen35-tokenizer/ggml-vocab-qwen35.gguf
[ -f "$vocab" ] || { echo "chat_tty: $vocab missing (the shared test data)"; exit 1; }
"$B/kz-mkmodel" --arch qwen3 --type q8_0 --vocab "$vocab" --n-embd 256 --n-ff 768 --n-layer 4 -q -o "$dir/m.gguf" ||
  fail "kz-mkmodel"
run="$B/kazeia chat -m $dir/m.gguf -t 1 -n 80 --think on --seed 1"
tmux -S "$sock" new-session -d -s kz -x 160 -y 60 "$run 2>$dir/err; echo EXIT=\$? >$dir/exit; sleep 60"
wait_for 20 prompt_back || fail "no prompt"

# 1. a question; the answer streams to the screen and the turn's stats follow
keys "Hello there" Enter
wait_for 60 has_stats 1 || fail "first answer never finished"
on_screen "> Hello there" || fail "the typed question is not on the screen"
grep -q '^\[prefill [0-9]* tok (0 reused).*decode [0-9]* tok.*tok/s' "$dir/err" || fail "no per-turn stats"

# 2. Ctrl-C in the middle of an answer: the screen still grows when it is sent
keys "Tell me a long story" Enter
wait_for 20 on_screen "> Tell me a long story" || fail "second question not shown"
# the screen changes twice while the answer is being written: it streams
a=$(screen | md5sum)
changed() { [ "$(screen | md5sum)" != "$a" ]; }
wait_for 20 changed || fail "the answer is not streaming (screen unchanged)"
a=$(screen | md5sum)
wait_for 20 changed || fail "the answer is not streaming (screen unchanged after its start)"
has_stats 2 && fail "the answer finished before Ctrl-C (model too fast for this test)"
keys C-c
wait_for 20 has_stats 2 || fail "Ctrl-C did not stop the answer"
sed -n 2p <(grep '^\[prefill' "$dir/err") | grep -q 'stopped\]' || fail "second turn not reported as stopped"
wait_for 10 prompt_back || fail "no prompt after Ctrl-C"

# 3. the conversation is still usable: the next turn reuses the history
keys "Are you still there?" Enter
wait_for 60 has_stats 3 || fail "third answer never finished"
sed -n 3p <(grep '^\[prefill' "$dir/err") | grep -q '([1-9][0-9]* reused)' || fail "third turn reused nothing"
keys "/stats" Enter
wait_for 10 grep -q '^\[6 messages' "$dir/err" || fail "/stats does not count 6 messages"

# 4. EOF exits cleanly
keys C-d
wait_for 20 test -f "$dir/exit" || fail "EOF did not exit"
grep -q 'EXIT=0' "$dir/exit" || fail "exit status $(cat "$dir/exit")"
tmux -S "$sock" kill-session -t kz 2>/dev/null

# 5. Ctrl-C at the prompt exits too
rm -f "$dir/exit" "$dir/err"
tmux -S "$sock" new-session -d -s kz -x 160 -y 60 "$run 2>$dir/err; echo EXIT=\$? >$dir/exit; sleep 60"
wait_for 20 prompt_back || fail "no prompt (second session)"
keys C-c
wait_for 20 test -f "$dir/exit" || fail "Ctrl-C at the prompt did not exit"
grep -q 'EXIT=0' "$dir/exit" || fail "exit status $(cat "$dir/exit") after Ctrl-C at the prompt"

# 6. scripted through a pipe: one line per turn; /save in one process, /load in another, which
#    goes on without re-reading the history
printf 'Hello there\nSecond question\n/save %s\n' "$dir/c.kzchat" | $run -n 8 >/dev/null 2>"$dir/p1" || fail "piped run"
[ "$(grep -c '^\[prefill' "$dir/p1")" = 2 ] || { cat "$dir/p1"; fail "piped run: not 2 turns"; }
printf '/load %s\nThird\n/stats\n' "$dir/c.kzchat" | $run -n 8 >/dev/null 2>"$dir/p2" || fail "piped load"
grep -q '^\[loaded 4 messages' "$dir/p2" || { cat "$dir/p2"; fail "/load in a new process"; }
grep '^\[prefill' "$dir/p2" | grep -q '([1-9][0-9]* reused)' || { cat "$dir/p2"; fail "nothing reused after /load"; }
grep -q '^\[6 messages' "$dir/p2" || { cat "$dir/p2"; fail "/stats after /load"; }
echo "chat_tty: ok (streamed answer, Ctrl-C mid-answer, next turn reused the history, /stats, EOF, Ctrl-C at the prompt, pipe, /save + /load across processes)"
