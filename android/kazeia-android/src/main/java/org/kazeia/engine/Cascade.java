package org.kazeia.engine;

import java.util.concurrent.CompletableFuture;

/**
 * A conversation moderated by a guard, turn by turn (what `kazeia chat --guard` does): the user
 * message is checked before it joins the conversation (a blocking verdict: the thinker never
 * runs); the answer is checked as it streams, every GuardConfig.checkEvery pieces, and at the
 * end; a blocking verdict stops the thinker and withdraws the turn (answer and prompt), so the
 * next turn never sees it. A guard error blocks too (fails closed). The listener sees a piece
 * before the check that covers it: on GuardedReply.blocked, take the answer off the screen.
 *
 * The guard runs on its own thread while the thinker's thread waits for it (inside the turn),
 * so the two models never compute at once. Use one Cascade's turns one at a time per conversation.
 */
public final class Cascade {
    /** A turn's outcome: the stats, the verdicts and whether it was withdrawn. */
    public static final class GuardedReply {
        public final GenerationStats stats;
        /** the prompt's verdict (null when the guard failed before it) */
        public final GuardVerdict prompt;
        /** the verdict that stopped the answer, or the final one; null when the prompt was blocked */
        public final GuardVerdict answer;
        /** true: the turn was withdrawn (prompt refused, or answer stopped) */
        public final boolean blocked;
        /** the guard's error when it failed (the turn is then blocked), else null */
        public final KazeiaException guardError;

        GuardedReply(GenerationStats stats, GuardVerdict prompt, GuardVerdict answer, boolean blocked, KazeiaException guardError) {
            this.stats = stats;
            this.prompt = prompt;
            this.answer = answer;
            this.blocked = blocked;
            this.guardError = guardError;
        }

        @Override public String toString() {
            return (blocked ? "blocked" : "allowed") + " | prompt: " + prompt + " | answer: " + answer + (guardError != null ? " | guard error: " + guardError.getMessage() : "");
        }
    }

    /** A running guarded turn: cancel it or wait for its outcome. */
    public static final class GuardedTurn {
        private final Generation generation;
        private final CompletableFuture<GuardedReply> result;

        GuardedTurn(Generation generation, CompletableFuture<GuardedReply> result) {
            this.generation = generation;
            this.result = result;
        }

        public void cancel() { generation.cancel(); }
        public boolean isDone() { return result.isDone(); }
        public Generation generation() { return generation; }
        public CompletableFuture<GuardedReply> future() { return result; }

        /** Waits for the end; a thinker error is rethrown as KazeiaException (guard errors block instead). */
        public GuardedReply await() {
            generation.await();
            return result.join();
        }
    }

    /** Cascade's steps inside Conversation.TurnJob, all on the thinker's engine thread. */
    static final class Hooks {
        final Guard guard;
        final String user;
        GuardVerdict prompt, answer;
        boolean blocked;
        KazeiaException error;

        Hooks(Guard guard, String user) { this.guard = guard; this.user = user; }

        private boolean fail(KazeiaException e) {
            error = e;
            blocked = true;
            return false;
        }

        boolean promptAllowed() {
            try {
                prompt = guard.checkPrompt(user);
            } catch (KazeiaException e) {
                return fail(e);
            }
            blocked = prompt.blocked;
            return !blocked;
        }

        void answerBegins() {
            try {
                guard.responseBegin(user);
            } catch (KazeiaException e) {
                fail(e);
            }
        }

        boolean pieceAllowed(byte[] piece) {
            if (blocked) return false;
            try {
                GuardVerdict v = guard.responseFeed(piece);
                if (v != null) answer = v;
            } catch (KazeiaException e) {
                return fail(e);
            }
            if (answer != null && answer.blocked) blocked = true;
            return !blocked;
        }

        /** after the reply: the final check unless a verdict already stopped it */
        boolean answerAllowed(GenerationStats stats) {
            if (blocked) return false;
            try {
                answer = guard.responseEnd();
            } catch (KazeiaException e) {
                return fail(e);
            }
            blocked = answer.blocked;
            return !blocked;
        }
    }

    private final Conversation conversation;
    private final Guard guard;

    public Cascade(Conversation conversation, Guard guard) {
        if (conversation == null || guard == null) throw new KazeiaException(KazeiaException.INVALID_ARG, "Cascade needs a conversation and a guard");
        this.conversation = conversation;
        this.guard = guard;
    }

    public Conversation conversation() { return conversation; }
    public Guard guard() { return guard; }

    /** One moderated turn (see the class comment); returns at once. */
    public GuardedTurn send(String user, ReplyOptions options, GenerationListener listener) {
        final Hooks h = new Hooks(guard, user);
        Generation g = conversation.engine().submit(conversation.new TurnJob(user, options, h), listener);
        CompletableFuture<GuardedReply> r = g.future().thenApply(stats -> new GuardedReply(stats, h.prompt, h.answer, h.blocked, h.error));
        return new GuardedTurn(g, r);
    }
}
