package org.kazeia.engine;

/** What the native generate loop calls once per token, on the engine thread. */
interface TokenSink {
    /** bytes: the token's raw bytes (may end inside a UTF-8 character); false stops the generation */
    boolean onToken(int id, byte[] bytes);
}
