package org.kazeia.engine;

import java.nio.charset.StandardCharsets;

/** An engine error: the engine's one-line message and its kz_status. Unchecked, so Kotlin and
 *  Java callbacks need no wrapping; nothing the engine reports kills the process. */
public class KazeiaException extends RuntimeException {
    /** kz_status values */
    public static final int INVALID_ARG = 1, IO = 2, FORMAT = 3, UNSUPPORTED = 4, NOMEM = 5, CTX_FULL = 6,
            CANCELLED = 7, INTERNAL = 8;
    private static final long serialVersionUID = 1L;
    private final int status;

    public KazeiaException(int status, String message) {
        super(message);
        this.status = status;
    }

    /** called by the native side: the message as UTF-8 bytes (it may name a file with any characters) */
    KazeiaException(int status, byte[] utf8Message) {
        this(status, new String(utf8Message, StandardCharsets.UTF_8));
    }

    /** the kz_status code (INVALID_ARG, IO, FORMAT, ...) */
    public int status() { return status; }
}
