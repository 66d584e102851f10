package org.kazeia.engine;

import java.nio.charset.StandardCharsets;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One model and one context (a sequence), driven from one owned thread: every native call but
 * cancel runs there, in submission order, so callers may use an Engine from any thread. Several
 * engines can live in one process (each has its own thread and worker pool).
 *
 * Plain-Java use: {@code Engine e = Engine.load(path, cfg); e.generate(null, "Hi", 64, null,
 * listener).await(); e.close();}. The Kotlin API (KazeiaEngine) wraps this class.
 */
public final class Engine implements AutoCloseable {
    private static final AtomicInteger SEQ = new AtomicInteger();

    private final OwnedThread worker = new OwnedThread("kazeia-engine-", SEQ);
    private long model;                   // engine thread only
    private long ctx;                     // written on the engine thread under ctxLock; read there freely
    private final Object ctxLock = new Object(); // a cancel from another thread never meets a freed context
    private final EngineConfig cfg;
    private Sampling sampling;            // the context's, engine thread only
    private volatile Generation running;  // the generation in native code now
    private volatile boolean closed;
    final java.util.Set<Conversation> chats = new java.util.HashSet<>(); // open conversations, engine thread only

    private Engine(EngineConfig cfg) {
        this.cfg = cfg;
    }

    /** The library version ("0.1.0"). */
    public static String version() { return new String(NativeBridge.version(), StandardCharsets.UTF_8); }

    /** Threads the library uses when EngineConfig.threads is 0 (the fast cores on big.LITTLE). */
    public static int defaultThreads() { return NativeBridge.defaultThreads(); }

    /**
     * Loads a GGUF model and creates its context, on the new engine's own thread; blocks the
     * caller until done (Android: call it off the main thread, or use KazeiaEngine.load).
     * @throws KazeiaException with the engine's message (bad file, unsupported model, no memory)
     */
    public static Engine load(String path, EngineConfig cfg) {
        if (path == null) throw new KazeiaException(KazeiaException.INVALID_ARG, "model path is null");
        final EngineConfig c = cfg != null ? cfg : new EngineConfig();
        Engine e = new Engine(c);
        e.worker.start(() -> {
            e.model = NativeBridge.modelLoad(path.getBytes(StandardCharsets.UTF_8), c.threads, c.repackWeights);
            e.newContext(c.sampling != null ? c.sampling : new Sampling());
        }, e::freeNative, "interrupted");
        return e;
    }

    private void newContext(Sampling s) {
        int[] ip = { cfg.nCtx, cfg.nBatch, cfg.threads, cfg.kvType, s.topK, s.repeatLastN, s.think ? 1 : 0 };
        float[] fp = { s.temperature, s.topP, s.minP, s.repeatPenalty, s.presencePenalty, s.frequencyPenalty };
        long c = NativeBridge.contextNew(model, ip, fp, s.seed);
        synchronized (ctxLock) {
            if (ctx != 0) NativeBridge.contextFree(ctx);
            ctx = c;
        }
        sampling = s.copy();
    }

    private void freeNative() {
        for (Conversation c : new java.util.ArrayList<>(chats)) c.freeNative(); // a chat before its context
        synchronized (ctxLock) {
            if (ctx != 0) NativeBridge.contextFree(ctx);
            ctx = 0;
        }
        if (model != 0) NativeBridge.modelFree(model);
        model = 0;
    }

    void checkOpen() {
        if (closed) throw new KazeiaException(KazeiaException.INVALID_ARG, "the engine is closed");
    }

    /** runs fn on the engine thread and waits (from the engine thread itself: runs inline); after
     *  close, RejectedExecutionException (Conversation.close counts on it) */
    <T> T call(Callable<T> fn) { return worker.call(fn, "interrupted", null); }

    /**
     * Queues a generation: the ChatML prompt from system (may be null) and user, up to maxTokens
     * (<= 0: until end of turn or a full context); sampling null = the current one (a different
     * one recreates the context, dropping its prefix cache; refused while conversations are open
     * on this engine: give those their sampling per reply). The listener is called on the engine
     * thread. Returns at once.
     */
    public Generation generate(String system, String user, int maxTokens, Sampling sampling, GenerationListener listener) {
        final byte[] sys = system != null ? system.getBytes(StandardCharsets.UTF_8) : null;
        final byte[] usr = (user != null ? user : "").getBytes(StandardCharsets.UTF_8);
        final Sampling smp = sampling != null ? sampling.copy() : null;
        return submit(new Job() {
            @Override boolean before() {
                if (smp != null && !smp.sameAs(Engine.this.sampling)) {
                    if (!chats.isEmpty())
                        throw new KazeiaException(KazeiaException.INVALID_ARG, "generate: a new sampling recreates the context, which "
                                + chats.size() + " open conversation(s) use: pass the sampling per reply (ReplyOptions) or close them first");
                    newContext(smp);
                }
                return true;
            }
            @Override void run(TokenSink sink, double[] st) { NativeBridge.generate(ctx, sys, usr, maxTokens, sink, st); }
        }, listener);
    }

    /**
     * One native generation and what goes around it, all on the engine thread: before() (false:
     * end as CANCELLED without running), run(), onPiece() after the listener saw each piece (false
     * stops), after() with the stats, or failed() on an error.
     */
    abstract static class Job {
        boolean before() { return true; }
        abstract void run(TokenSink sink, double[] st);
        boolean onPiece(byte[] bytes) { return true; }
        void after(GenerationStats stats) {}
        void failed(KazeiaException e) {}
    }

    Generation submit(Job job, GenerationListener listener) {
        checkOpen();
        final Generation g = new Generation(this);
        worker.execute(() -> runGeneration(g, job, listener));
        return g;
    }

    private void runGeneration(Generation g, Job job, GenerationListener l) {
        final Utf8StreamDecoder dec = new Utf8StreamDecoder();
        double[] st = new double[7];
        st[5] = GenerationStats.StopReason.CANCELLED.ordinal();
        try {
            if (closed) g.cancelled = true;
            if (ctx == 0) throw new KazeiaException(KazeiaException.INVALID_ARG, "the engine is closed");
            boolean go = !g.cancelled && job.before();
            running = g;
            // a cancel that came before the native call started: cancelGeneration saw running == g
            // too late or not at all; the flag is read here and at every token
            if (go && !g.cancelled) {
                job.run((id, bytes) -> {
                    if (g.cancelled) return false;
                    String text = dec.feed(bytes);
                    boolean more = l == null || l.onToken(id, text, bytes);
                    return job.onPiece(bytes) && more;
                }, st);
            }
            running = null;
            GenerationStats stats = new GenerationStats(st);
            job.after(stats);
            if (l != null) l.onComplete(dec.finish(), stats);
            g.result.complete(stats);
        } catch (RuntimeException e) {
            running = null;
            KazeiaException ke = e instanceof KazeiaException ? (KazeiaException) e
                    : new KazeiaException(KazeiaException.INTERNAL, "listener threw: " + e);
            try { job.failed(ke); } catch (RuntimeException ignored) { /* the first error is the one reported */ }
            if (l != null) {
                try { l.onError(ke); } catch (RuntimeException ignored) { /* the future carries it */ }
            }
            g.result.completeExceptionally(ke);
        }
    }

    void cancelGeneration(Generation g) {
        g.cancelled = true;
        synchronized (ctxLock) { // kz_cancel is thread-safe; the lock only keeps ctx alive meanwhile
            if (running == g && ctx != 0) NativeBridge.cancel(ctx);
        }
    }

    /** Cancels the running generation, if any (thread-safe, returns at once). */
    public void cancel() {
        Generation g = running;
        if (g != null) cancelGeneration(g);
    }

    /** Forgets the sequence (KV, recurrent state). */
    public void reset() { checkOpen(); call(() -> { NativeBridge.contextReset(ctx); return null; }); }

    /** The sequence's state image (kz_state_save), to restore into an engine on the same model. */
    public byte[] saveState() { checkOpen(); return call(() -> NativeBridge.stateSave(ctx)); }

    /** Restores an image from saveState; on a bad image throws and leaves the state as it was. */
    public void restoreState(byte[] image) { checkOpen(); call(() -> { NativeBridge.stateLoad(ctx, image); return null; }); }

    public void saveStateFile(String path) {
        checkOpen();
        call(() -> { NativeBridge.stateSaveFile(ctx, path.getBytes(StandardCharsets.UTF_8)); return null; });
    }

    public void restoreStateFile(String path) {
        checkOpen();
        call(() -> { NativeBridge.stateLoadFile(ctx, path.getBytes(StandardCharsets.UTF_8)); return null; });
    }

    /** Token ids of text (no special-token parsing unless asked). */
    public int[] tokenize(String text, boolean parseSpecial) {
        checkOpen();
        return call(() -> NativeBridge.tokenize(model, text.getBytes(StandardCharsets.UTF_8), parseSpecial));
    }

    /** Raw bytes of one token (may be part of a character). */
    public byte[] tokenBytes(int token) { checkOpen(); return call(() -> NativeBridge.tokenBytes(model, token)); }

    /** Appends tokens to the sequence and returns the last one's logits (n_vocab floats). */
    public float[] eval(int[] tokens) { checkOpen(); return call(() -> NativeBridge.eval(model, ctx, tokens)); }

    /** tokens in the sequence now */
    public int nPast() { checkOpen(); return call(() -> NativeBridge.contextInfo(ctx, 0)); }
    public int nCtx() { checkOpen(); return call(() -> NativeBridge.contextInfo(ctx, 1)); }
    public int nThreads() { checkOpen(); return call(() -> NativeBridge.contextInfo(ctx, 3)); }
    public int nVocab() { checkOpen(); return call(() -> NativeBridge.modelInfo(model, 0)); }
    public String describe() { checkOpen(); return call(() -> new String(NativeBridge.modelDescribe(model), StandardCharsets.UTF_8)); }

    /** A conversation on this engine's context (kz_chat): thinking on by default, 2 checkpoints. */
    public Conversation conversation(String system) { return conversation(system, true, 0); }

    /**
     * A conversation (kz_chat_new) on this engine's context: think = replies think unless a
     * ReplyOptions says otherwise; maxCheckpoints = GDN state checkpoints kept (0 = 2).
     */
    public Conversation conversation(String system, boolean think, int maxCheckpoints) {
        checkOpen();
        return call(() -> {
            Conversation c = new Conversation(this, NativeBridge.chatNew(ctx, think ? 1 : 0, maxCheckpoints), think);
            chats.add(c);
            if (system != null && !system.isEmpty()) {
                try {
                    NativeBridge.chatAdd(c.handle, 0, system.getBytes(StandardCharsets.UTF_8), true);
                } catch (RuntimeException e) {
                    c.freeNative();
                    throw e;
                }
            }
            return c;
        });
    }

    long modelHandle() { return model; }
    long contextHandle() { return ctx; }

    /**
     * Cancels the running generation and the queued ones, waits for the running one to return,
     * then frees the context and model and stops the thread. Idempotent. Not from a listener
     * (the engine thread): that would wait for itself.
     */
    @Override
    public void close() {
        if (worker.isCurrent())
            throw new IllegalStateException("Engine.close() from the engine's own thread (a listener) would wait for itself");
        synchronized (this) {
            if (closed) return;
            closed = true;
        }
        Generation g = running;
        if (g != null) cancelGeneration(g);
        // generations still queued see `closed` when they come up and end as CANCELLED
        worker.finish(this::freeNative);
    }

    boolean isClosed() { return closed; }
}
