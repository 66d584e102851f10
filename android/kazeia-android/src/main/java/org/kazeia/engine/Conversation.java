package org.kazeia.engine;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A conversation: a system prompt and its turns. Today each send() is one kz_generate call with
 * the system prompt and the new user message: the system block is evaluated once and kept (the
 * engine's prefix snapshot), but the model does NOT see the earlier turns yet. When the C chat API
 * (issue 24: append-only conversation on a context) lands, send() calls it and the history is
 * seen; this class's methods stay the same. The turns are kept here for the app (history()).
 */
public final class Conversation {
    public static final class Turn {
        public final String user;
        public final String assistant;
        Turn(String user, String assistant) { this.user = user; this.assistant = assistant; }
    }

    private final Engine engine;
    private final String system;
    private final List<Turn> turns = Collections.synchronizedList(new ArrayList<>());

    Conversation(Engine engine, String system) {
        this.engine = engine;
        this.system = system;
    }

    public String system() { return system; }

    /** the finished turns, oldest first */
    public List<Turn> history() { synchronized (turns) { return new ArrayList<>(turns); } }

    /** Answers user (streamed to listener); the turn is recorded when the reply completes. */
    public Generation send(String user, int maxTokens, Sampling sampling, GenerationListener listener) {
        final StringBuilder reply = new StringBuilder();
        return engine.generate(system, user, maxTokens, sampling, new GenerationListener() {
            @Override public boolean onToken(int id, String text, byte[] raw) {
                reply.append(text);
                return listener == null || listener.onToken(id, text, raw);
            }
            @Override public void onComplete(String tail, GenerationStats stats) {
                reply.append(tail);
                turns.add(new Turn(user, reply.toString()));
                if (listener != null) listener.onComplete(tail, stats);
            }
            @Override public void onError(KazeiaException error) {
                if (listener != null) listener.onError(error);
            }
        });
    }

    /** The engine's state (the sequence after the last turn), for restore() in a later session. */
    public byte[] saveState() { return engine.saveState(); }

    public void restoreState(byte[] image) { engine.restoreState(image); }

    /** Forgets the turns and the sequence. */
    public void reset() {
        turns.clear();
        engine.reset();
    }
}
