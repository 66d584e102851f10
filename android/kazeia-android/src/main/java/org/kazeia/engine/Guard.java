package org.kazeia.engine;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A guard model (Qwen3Guard-Gen, a Qwen3 dense GGUF) and its checks (kz_guard_*), on its own
 * model, context and owned thread: every native call runs there, so a Guard may be used from any
 * thread. A check blocks its caller until the verdict is in.
 *
 * Prompt moderation: checkPrompt(user). Response moderation: checkResponse(user, answer), or
 * streaming: responseBegin(user), responseFeed(piece) per piece (a check every checkEvery
 * pieces, reusing the previous check's state), responseEnd(). Cascade wires these around a
 * Conversation's turn. A guard error throws KazeiaException; a caller that goes on must treat
 * the text as blocked (Cascade does: it fails closed).
 */
public final class Guard implements AutoCloseable {
    private static final AtomicInteger SEQ = new AtomicInteger();
    private static final String[] NAMES = new String[9];

    private final OwnedThread worker = new OwnedThread("kazeia-guard-", SEQ);
    private long model, guard;     // guard thread only
    private final GuardConfig cfg;
    private volatile boolean closed;

    private Guard(GuardConfig cfg) {
        this.cfg = cfg;
    }

    /**
     * Loads the guard model and makes its guard, on the new guard's own thread; blocks the caller.
     * @throws KazeiaException with the engine's message (bad file, a model that is not attention-only)
     */
    public static Guard load(String path, GuardConfig cfg) {
        if (path == null) throw new KazeiaException(KazeiaException.INVALID_ARG, "guard model path is null");
        final GuardConfig c = cfg != null ? cfg : new GuardConfig();
        Guard g = new Guard(c);
        g.worker.start(() -> {
            g.model = NativeBridge.modelLoad(path.getBytes(StandardCharsets.UTF_8), c.threads, -1);
            g.guard = NativeBridge.guardNew(g.model, new int[] { c.policy, c.action, c.checkEvery, c.maxVerdictTokens, c.nCtx, c.threads, c.kvType });
        }, g::freeNative, "interrupted while waiting for the guard");
        return g;
    }

    /** Qwen3Guard-Gen's name of category bit i (0..8), or null. */
    public static String categoryName(int i) {
        if (i < 0 || i >= NAMES.length) return null;
        synchronized (NAMES) {
            if (NAMES[i] == null) {
                byte[] b = NativeBridge.guardCategoryName(i);
                NAMES[i] = b != null ? new String(b, StandardCharsets.UTF_8) : null;
            }
            return NAMES[i];
        }
    }

    public GuardConfig config() { return cfg; }

    private void freeNative() {
        if (guard != 0) NativeBridge.guardFree(guard);
        guard = 0;
        if (model != 0) NativeBridge.modelFree(model);
        model = 0;
    }

    private <T> T call(Callable<T> fn) {
        if (closed) throw new KazeiaException(KazeiaException.INVALID_ARG, "the guard is closed");
        return worker.call(fn, "interrupted while waiting for the guard", "the guard is closed");
    }

    private static byte[] utf8(String s) { return (s != null ? s : "").getBytes(StandardCharsets.UTF_8); }

    /** Prompt moderation of one user message. */
    public GuardVerdict checkPrompt(String user) {
        return call(() -> {
            double[] d = new double[12];
            byte[] t = NativeBridge.guardCheckPrompt(guard, utf8(user), d);
            return new GuardVerdict(d, t);
        });
    }

    /** Response moderation of answer given to user (kazeia guard -p USER --response ANSWER). */
    public GuardVerdict checkResponse(String user, String answer) {
        return checkMessages(new String[] { "user", "assistant" }, new String[] { user, answer });
    }

    /**
     * Moderation of a conversation: roles "system" / "user" / "assistant"; the last message's role
     * picks the task (user: prompt moderation, else response moderation).
     */
    public GuardVerdict checkMessages(String[] roles, String[] contents) {
        if (roles == null || contents == null || roles.length != contents.length)
            throw new KazeiaException(KazeiaException.INVALID_ARG, "guard: roles and contents must have the same length");
        final byte[][] r = new byte[roles.length][], c = new byte[contents.length][];
        for (int i = 0; i < r.length; i++) { r[i] = utf8(roles[i]); c[i] = utf8(contents[i]); }
        return call(() -> {
            double[] d = new double[12];
            byte[] t = NativeBridge.guardCheckMessages(guard, r, c, d);
            return new GuardVerdict(d, t);
        });
    }

    /** Starts the moderation of an answer to user, fed piece by piece. */
    public void responseBegin(String user) { call(() -> { NativeBridge.guardResponseBegin(guard, utf8(user)); return null; }); }

    /** One piece of the answer (UTF-8 bytes): the verdict when a check ran, null when only buffered. */
    public GuardVerdict responseFeed(byte[] piece) {
        return call(() -> {
            double[] d = new double[12];
            byte[] t = NativeBridge.guardResponseFeed(guard, piece, d);
            return t != null ? new GuardVerdict(d, t) : null;
        });
    }

    /** The final check of the whole answer. */
    public GuardVerdict responseEnd() {
        return call(() -> {
            double[] d = new double[12];
            byte[] t = NativeBridge.guardResponseEnd(guard, d);
            return new GuardVerdict(d, t);
        });
    }

    /** Waits for a running check, frees the guard and its model, stops the thread. Idempotent. */
    @Override public void close() {
        if (worker.isCurrent()) throw new IllegalStateException("Guard.close() from the guard's own thread");
        synchronized (this) {
            if (closed) return;
            closed = true;
        }
        worker.finish(this::freeNative);
    }
}
