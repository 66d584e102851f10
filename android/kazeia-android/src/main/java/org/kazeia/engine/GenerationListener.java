package org.kazeia.engine;

/**
 * The plain-Java streaming callback (apps without coroutines). Called on the engine's thread:
 * return quickly (post to your UI thread). onToken gets each token with its raw bytes and the
 * text they complete (possibly "", when a character continues in the next token).
 */
public interface GenerationListener {
    /** false stops the generation (as cancel() does) */
    boolean onToken(int id, String text, byte[] raw);
    /** the end: text still pending in the decoder (an unfinished character as U+FFFD), then stats */
    default void onComplete(String tail, GenerationStats stats) {}
    /** an engine error; the engine stays usable */
    default void onError(KazeiaException error) {}
}
