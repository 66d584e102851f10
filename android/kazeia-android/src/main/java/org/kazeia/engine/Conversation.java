package org.kazeia.engine;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;

/**
 * A multi-turn conversation on an Engine's context, over the C chat API (kz_chat_*): the history
 * stays in the model's context and each reply evaluates only the tokens the context does not
 * hold yet (GenerationStats.reusedTokens / promptTokens say how many); per-reply thinking,
 * sampling and stop strings (ReplyOptions); pop / reset; save and load of the whole
 * conversation (messages, the context's state, checkpoints) to resume it on another engine.
 *
 * Every native call runs on the engine's thread, queued behind running generations. A turn whose
 * reply fails, is cancelled before its first piece or is withdrawn by a guard (Cascade) leaves no
 * trace: its user message is removed too, so the history keeps alternating. A reply cancelled
 * later keeps what was written, as the C API does. Pieces reach the listener as UTF-8 bytes with
 * their decoded text; the id is -1 (the chat API streams text pieces, not single tokens).
 * Close it (or the engine) to free it; while it is open, Engine.generate with another Sampling
 * is refused (that would recreate the context under it).
 */
public final class Conversation implements AutoCloseable {
    public static final int ROLE_SYSTEM = 0, ROLE_USER = 1, ROLE_ASSISTANT = 2;

    /** One message: role (ROLE_*) and its text (an assistant's raw text, thinking included). */
    public static final class Message {
        public final int role;
        public final String text;
        Message(int role, String text) { this.role = role; this.text = text; }
        @Override public String toString() { return (role == ROLE_SYSTEM ? "system" : role == ROLE_USER ? "user" : "assistant") + ": " + text; }
    }

    /** A user message and the reply that followed it. */
    public static final class Turn {
        public final String user;
        public final String assistant;
        Turn(String user, String assistant) { this.user = user; this.assistant = assistant; }
    }

    private final Engine engine;
    long handle;                 // kz_chat *, engine thread only; 0 once freed
    private final boolean think;

    Conversation(Engine engine, long handle, boolean think) {
        this.engine = engine;
        this.handle = handle;
        this.think = think;
    }

    /** engine thread: frees the kz_chat (before its context goes) */
    void freeNative() {
        if (handle != 0) NativeBridge.chatFree(handle);
        handle = 0;
        engine.chats.remove(this);
    }

    private <T> T call(java.util.concurrent.Callable<T> fn) {
        engine.checkOpen();
        return engine.call(fn);
    }

    private static byte[] utf8(String s) { return s != null ? s.getBytes(StandardCharsets.UTF_8) : null; }

    /** Whether replies think by default (ReplyOptions.think overrides it per reply). */
    public boolean thinks() { return think; }

    /** The system message, or null. */
    public String system() {
        List<Message> m = messages();
        return !m.isEmpty() && m.get(0).role == ROLE_SYSTEM ? m.get(0).text : null;
    }

    /** Sets (non-empty) or removes (null / "") the system message; the next reply re-reads the history once. */
    public void setSystem(String text) { call(() -> { NativeBridge.chatAdd(handle, 0, utf8(text), true); return null; }); }

    /** Appends a message without generating (ROLE_USER / ROLE_ASSISTANT: an app restoring a history it stored). */
    public void add(int role, String text) { call(() -> { NativeBridge.chatAdd(handle, role, utf8(text == null ? "" : text), false); return null; }); }

    /** Every message, oldest first (the system message included). */
    public List<Message> messages() {
        return call(() -> {
            int n = (int) NativeBridge.chatInfo(handle, 0);
            List<Message> out = new ArrayList<>(n);
            for (int i = 0; i < n; i++)
                out.add(new Message(NativeBridge.chatMessageRole(handle, i), new String(NativeBridge.chatMessageText(handle, i), StandardCharsets.UTF_8)));
            return out;
        });
    }

    /** The finished turns (a user message and its reply), oldest first. */
    public List<Turn> history() {
        List<Message> m = messages();
        List<Turn> t = new ArrayList<>();
        for (int i = 0; i + 1 < m.size(); i++)
            if (m.get(i).role == ROLE_USER && m.get(i + 1).role == ROLE_ASSISTANT) t.add(new Turn(m.get(i).text, m.get(++i).text));
        return t;
    }

    /** Answers user with the conversation's thinking setting and the model card's sampling. */
    public Generation send(String user, int maxTokens, GenerationListener listener) {
        return send(user, new ReplyOptions().maxTokens(maxTokens), listener);
    }

    /** Answers user; sampling null = the model card's. Kept for the single-turn era's callers. */
    public Generation send(String user, int maxTokens, Sampling sampling, GenerationListener listener) {
        return send(user, new ReplyOptions().maxTokens(maxTokens).sampling(sampling), listener);
    }

    /**
     * Queues a turn: appends user, generates the reply (streamed to listener on the engine
     * thread) and appends it. Returns at once; Generation.cancel() stops it (kz_cancel, inside a
     * prefill chunk too), await() gives the stats or throws the engine's error.
     */
    public Generation send(String user, ReplyOptions options, GenerationListener listener) {
        return engine.submit(new TurnJob(user, options, null), listener);
    }

    /** The turn's steps on the engine thread; the guard hooks are Cascade's (null: none). */
    final class TurnJob extends Engine.Job {
        final byte[] user;
        final ReplyOptions o;
        final Cascade.Hooks guard;
        boolean added;

        TurnJob(String user, ReplyOptions options, Cascade.Hooks guard) {
            this.user = utf8(user != null ? user : "");
            this.o = options != null ? options.copy() : new ReplyOptions();
            this.guard = guard;
        }

        @Override boolean before() {
            if (handle == 0) throw new KazeiaException(KazeiaException.INVALID_ARG, "the conversation is closed");
            if (guard != null && !guard.promptAllowed()) return false;
            NativeBridge.chatAdd(handle, ROLE_USER, user, false);
            added = true;
            if (guard != null) guard.answerBegins();
            return true;
        }

        @Override void run(TokenSink sink, double[] st) {
            boolean th = o.think != null ? o.think : think;
            Sampling s = o.sampling;
            int[] ip = { o.maxTokens, th ? 1 : 0, s != null ? s.topK : 0, s != null ? s.repeatLastN : 0, s == null ? 1 : 0 };
            float[] fp = s == null ? new float[6]
                    : new float[] { s.temperature, s.topP, s.minP, s.repeatPenalty, s.presencePenalty, s.frequencyPenalty };
            byte[][] stop = null;
            if (o.stop != null && o.stop.length > 0) {
                stop = new byte[o.stop.length][];
                for (int i = 0; i < stop.length; i++) stop[i] = utf8(o.stop[i]);
            }
            NativeBridge.chatReply(engine.modelHandle(), handle, ip, fp, s != null ? s.seed : 0, stop, sink, st);
        }

        @Override boolean onPiece(byte[] bytes) { return guard == null || guard.pieceAllowed(bytes); }

        @Override void after(GenerationStats stats) {
            boolean keep = stats.stopReason != GenerationStats.StopReason.CANCELLED || lastRole() != ROLE_USER;
            if (keep && guard != null && added) keep = guard.answerAllowed(stats);
            if (!keep) withdraw();
        }

        @Override void failed(KazeiaException e) { withdraw(); }

        int lastRole() {
            int n = (int) NativeBridge.chatInfo(handle, 0);
            return n > 0 ? NativeBridge.chatMessageRole(handle, n - 1) : -1;
        }

        /** removes this turn: the reply (if one was appended) and the user message */
        void withdraw() {
            if (!added || handle == 0) return;
            if (lastRole() == ROLE_ASSISTANT) NativeBridge.chatPop(handle);
            if (lastRole() == ROLE_USER) NativeBridge.chatPop(handle);
            added = false;
        }
    }

    Engine engine() { return engine; }

    /** Removes the last message (to edit or regenerate a turn); false when there is none. */
    public boolean pop() { return call(() -> NativeBridge.chatPop(handle)); }

    /** Forgets every message but the system message, and the checkpoints. */
    public void reset() { call(() -> { NativeBridge.chatReset(handle); return null; }); }

    /** GDN state checkpoints held now (Qwen3.5; at most maxCheckpoints). */
    public int checkpoints() { return call(() -> (int) NativeBridge.chatInfo(handle, 1)); }

    /** Bytes the conversation holds beyond the engine's context (checkpoints, messages). */
    public long memoryBytes() { return call(() -> NativeBridge.chatInfo(handle, 2)); }

    /** Writes the whole conversation to path (a temporary file beside it, renamed: never half-written). */
    public void save(String path) { call(() -> { NativeBridge.chatSaveFile(handle, utf8(path), false); return null; }); }

    /**
     * Replaces this conversation with the one saved at path (an engine on the same model, the
     * same KV type and a context that holds it); on an error it is left as it was.
     */
    public void load(String path) { call(() -> { NativeBridge.chatSaveFile(handle, utf8(path), true); return null; }); }

    /** save() into memory (through a temporary file in java.io.tmpdir). */
    public byte[] saveState() {
        File f = null;
        try {
            f = File.createTempFile("kazeia-chat", ".kzc");
            save(f.getPath());
            return Files.readAllBytes(f.toPath());
        } catch (IOException e) {
            throw new KazeiaException(KazeiaException.IO, "saving the conversation: " + e.getMessage());
        } finally {
            if (f != null && !f.delete()) f.deleteOnExit();
        }
    }

    /** load() from a saveState() image. */
    public void restoreState(byte[] image) {
        if (image == null) throw new KazeiaException(KazeiaException.INVALID_ARG, "conversation image is null");
        File f = null;
        try {
            f = File.createTempFile("kazeia-chat", ".kzc");
            Files.write(f.toPath(), image);
            load(f.getPath());
        } catch (IOException e) {
            throw new KazeiaException(KazeiaException.IO, "restoring the conversation: " + e.getMessage());
        } finally {
            if (f != null && !f.delete()) f.deleteOnExit();
        }
    }

    /** Frees the conversation (its messages, checkpoints); the engine's context stays. Idempotent. */
    @Override public void close() {
        if (engine.isClosed()) return; // the engine freed it
        try {
            engine.call(() -> { freeNative(); return null; });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            // the engine is closing: it frees its conversations itself
        }
    }
}
