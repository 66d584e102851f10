package org.kazeia.engine;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Incremental UTF-8 to text: tokens arrive as raw bytes that may end inside a character (a 4-byte
 * emoji split over two tokens) or be ill-formed. feed() returns the text complete so far and keeps
 * an unfinished sequence for the next call; ill-formed bytes become U+FFFD; finish() flushes a
 * sequence left unfinished at the end as U+FFFD. Not thread-safe (one per generation).
 */
public final class Utf8StreamDecoder {
    private final CharsetDecoder dec = StandardCharsets.UTF_8.newDecoder()
            .onMalformedInput(CodingErrorAction.REPLACE)
            .onUnmappableCharacter(CodingErrorAction.REPLACE);
    private ByteBuffer pending = ByteBuffer.allocate(16);
    private CharBuffer out = CharBuffer.allocate(64);

    /** text decodable from everything fed so far, minus a trailing incomplete sequence */
    public String feed(byte[] bytes) {
        if (pending.remaining() < bytes.length) {
            ByteBuffer b = ByteBuffer.allocate(pending.position() + bytes.length + 16);
            pending.flip();
            b.put(pending);
            pending = b;
        }
        pending.put(bytes);
        pending.flip();
        StringBuilder sb = new StringBuilder();
        for (;;) {
            out.clear();
            CoderResult r = dec.decode(pending, out, false);
            out.flip();
            sb.append(out);
            if (!r.isOverflow()) break;
        }
        pending.compact(); // the unfinished sequence stays for the next feed
        return sb.toString();
    }

    /** the end of the stream: an unfinished sequence becomes U+FFFD; the decoder is reset */
    public String finish() {
        pending.flip();
        StringBuilder sb = new StringBuilder();
        for (;;) {
            out.clear();
            CoderResult r = dec.decode(pending, out, true);
            out.flip();
            sb.append(out);
            if (!r.isOverflow()) break;
        }
        for (;;) {
            out.clear();
            CoderResult r = dec.flush(out);
            out.flip();
            sb.append(out);
            if (!r.isOverflow()) break;
        }
        pending.clear();
        dec.reset();
        return sb.toString();
    }
}
