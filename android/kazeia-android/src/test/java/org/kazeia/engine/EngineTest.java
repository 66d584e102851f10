package org.kazeia.engine;

import static org.junit.Assert.*;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.Test;

/**
 * The JNI library (build/libkazeia_engine.so) driven through the Java wrapper on a real JVM
 * (run with -Xcheck:jni). The references are the C API's own output (jni_fixture gen, its
 * kz_generate + the engine's UTF-8 stream) and the JDK's whole-buffer UTF-8 decoder.
 * System properties: kazeia.model (tiny qwen35, byte vocab), kazeia.emoji (emoji-splitting
 * vocab), kazeia.fixture (the jni_fixture binary), kazeia.tmp (a scratch folder).
 */
public class EngineTest {
    static final String MODEL = System.getProperty("kazeia.model");
    static final String EMOJI = System.getProperty("kazeia.emoji");
    static final String FIXTURE = System.getProperty("kazeia.fixture");
    static final String TMP = System.getProperty("kazeia.tmp", "/tmp");

    static class Collected implements GenerationListener {
        final StringBuilder text = new StringBuilder();
        final ByteArrayOutputStream raw = new ByteArrayOutputStream();
        final List<Integer> ids = new ArrayList<>();
        final List<byte[]> pieces = new ArrayList<>();
        volatile GenerationStats stats;
        @Override public boolean onToken(int id, String t, byte[] b) {
            text.append(t);
            raw.write(b, 0, b.length);
            ids.add(id);
            pieces.add(b);
            return true;
        }
        @Override public void onComplete(String tail, GenerationStats s) { text.append(tail); stats = s; }
    }

    /** the C API's answer for the same model, seed and prompt */
    static String cReference(String model, long seed, float temp, int maxTokens, String user) throws Exception {
        Process p = new ProcessBuilder(FIXTURE, "gen", model, Long.toString(seed), Float.toString(temp),
                Integer.toString(maxTokens), user).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        byte[] out;
        try (InputStream in = p.getInputStream()) { out = in.readAllBytes(); }
        assertEquals("jni_fixture gen failed", 0, p.waitFor());
        return new String(out, StandardCharsets.UTF_8); // kz_generate emits valid UTF-8 only
    }

    static Sampling sampling(long seed, float temp) { return new Sampling().seed(seed).temperature(temp); }

    @Test public void streamedTextEqualsTheCApi() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig().sampling(sampling(11, 0.9f)))) {
            for (long seed : new long[] { 11, 12 }) {
                Collected c = new Collected();
                GenerationStats s = e.generate(null, "Bonjour, écris un poème 🌍", 48, sampling(seed, 0.9f), c).await();
                assertEquals(cReference(MODEL, seed, 0.9f, 48, "Bonjour, écris un poème 🌍"), c.text.toString());
                assertTrue(c.ids.size() > 10);
                assertEquals(c.text.toString(), new String(c.raw.toByteArray(), StandardCharsets.UTF_8));
                assertTrue(s.promptTokens > 20 && s.generatedTokens > 0 && s.decodeTokensPerSecond() > 0);
                assertTrue(s.peakRssMiB > 10);
            }
        }
    }

    @Test public void emojiAndIllFormedBytesSplitAcrossTokens() throws Exception {
        try (Engine e = Engine.load(EMOJI, new EngineConfig())) {
            boolean sawSplitEmoji = false, sawBad = false;
            for (long seed = 1; seed <= 3; seed++) {
                Collected c = new Collected();
                e.generate(null, "Hello", 64, sampling(seed, 1.0f), c).await();
                byte[] all = c.raw.toByteArray();
                // exact bytes: what came through JNI is each token's bytes, in order
                ByteArrayOutputStream want = new ByteArrayOutputStream();
                for (int i = 0; i < c.ids.size(); i++) // a control token comes without its text
                    if (c.pieces.get(i).length > 0) want.writeBytes(e.tokenBytes(c.ids.get(i)));
                assertArrayEquals(want.toByteArray(), all);
                String whole = new String(all, StandardCharsets.UTF_8);
                assertEquals("incremental decode != whole-buffer decode", whole, c.text.toString());
                assertEquals("Java text != the C API's", cReference(EMOJI, seed, 1.0f, 64, "Hello"), c.text.toString());
                sawBad |= whole.indexOf('\uFFFD') >= 0;
                // a 4-byte sequence whose bytes came in two tokens, decoded to one emoji
                int pos = 0;
                for (byte[] p : c.pieces) {
                    for (int k = 0; k < p.length; k++) {
                        int at = pos + k;
                        if ((p[k] & 0xFF) == 0xF0 && k + 3 >= p.length && at + 3 < all.length) {
                            String cp = new String(all, at, 4, StandardCharsets.UTF_8);
                            if (cp.codePointCount(0, cp.length()) == 1 && cp.codePointAt(0) >= 0x1F000 && whole.contains(cp)) sawSplitEmoji = true;
                        }
                    }
                    pos += p.length;
                }
            }
            assertTrue("no emoji split across tokens was generated: the test proves nothing", sawSplitEmoji);
            assertTrue("no ill-formed bytes were generated", sawBad);
        }
    }

    @Test public void decoderMatchesWholeBufferOnRandomCuts() {
        Random r = new Random(5);
        for (int iter = 0; iter < 2000; iter++) {
            byte[] b = new byte[r.nextInt(40)];
            for (int i = 0; i < b.length; i++) {
                int k = r.nextInt(6);
                b[i] = (byte) (k == 0 ? 0xF0 : k == 1 ? 0x9F : k == 2 ? 0x80 + r.nextInt(64) : k == 3 ? 0xE2 : r.nextInt(256));
            }
            Utf8StreamDecoder d = new Utf8StreamDecoder();
            StringBuilder sb = new StringBuilder();
            for (int i = 0; i < b.length;) {
                int n = Math.min(b.length - i, r.nextInt(4));
                byte[] part = java.util.Arrays.copyOfRange(b, i, i + n);
                sb.append(d.feed(part));
                i += n;
            }
            sb.append(d.finish());
            assertEquals(new String(b, StandardCharsets.UTF_8), sb.toString());
        }
    }

    static String longText(int n) {
        StringBuilder sb = new StringBuilder();
        Random r = new Random(3);
        while (sb.length() < n) sb.append((char) ('a' + r.nextInt(26))).append(r.nextInt(5) == 0 ? " " : "");
        return sb.toString();
    }

    @Test public void cancelMidPrefillReturnsWithinOneOpAndNextGenerateWorks() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig().nCtx(8192).nBatch(2048))) {
            String prompt = longText(6000);
            Collected c = new Collected();
            long t0 = System.nanoTime();
            Generation g = e.generate(null, prompt, 8, null, c);
            Thread.sleep(150);
            long tc = System.nanoTime();
            g.cancel();
            GenerationStats s = g.await();
            double msToStop = (System.nanoTime() - tc) / 1e6, msTotal = (System.nanoTime() - t0) / 1e6;
            assertEquals(GenerationStats.StopReason.CANCELLED, s.stopReason);
            assertEquals("no token may come after a cancel in prefill", 0, c.ids.size());
            assertTrue("prefill should have been cut short: " + s.promptTokens, s.promptTokens < 6000);
            System.out.printf("cancel mid-prefill: stopped %.1f ms after cancel() (%.0f ms into the call, %d prompt tokens kept)%n",
                    msToStop, msTotal, s.promptTokens);
            // against a whole 2048-token chunk (what a cancel checked between chunks would wait)
            e.reset();
            GenerationStats full = e.generate(null, prompt.substring(0, 2000), 1, null, new Collected()).await();
            System.out.printf("  one whole chunk of %d tokens: %.0f ms%n", full.promptTokens, full.prefillMs);
            assertTrue("cancel took " + msToStop + " ms, a chunk " + full.prefillMs, msToStop < full.prefillMs / 3);
            Collected c2 = new Collected();
            GenerationStats s2 = e.generate(null, "Hi", 8, null, c2).await();
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, s2.stopReason);
            assertEquals(8, c2.ids.size());
        }
    }

    @Test public void cancelMidDecode() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig().nCtx(4096).sampling(sampling(3, 1.0f)))) {
            CountDownLatch five = new CountDownLatch(5);
            Collected c = new Collected() {
                @Override public boolean onToken(int id, String t, byte[] b) { five.countDown(); return super.onToken(id, t, b); }
            };
            Generation g = e.generate(null, "Tell me a story", 0, null, c);
            assertTrue(five.await(60, TimeUnit.SECONDS));
            long tc = System.nanoTime();
            g.cancel();
            GenerationStats s = g.await();
            double ms = (System.nanoTime() - tc) / 1e6;
            System.out.printf("cancel mid-decode: stopped %.1f ms after cancel(), %d tokens%n", ms, s.generatedTokens);
            assertEquals(GenerationStats.StopReason.CANCELLED, s.stopReason);
            assertTrue(s.generatedTokens < 200);
            assertTrue(ms < 250);
            GenerationStats s2 = e.generate(null, "Again", 4, null, new Collected()).await();
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, s2.stopReason);
        }
    }

    @Test public void listenerReturningFalseStops() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig())) {
            final int[] n = { 0 };
            GenerationStats s = e.generate(null, "x", 100, sampling(1, 1f), (id, t, b) -> ++n[0] < 3).await();
            assertEquals(3, n[0]);
            assertEquals(GenerationStats.StopReason.CANCELLED, s.stopReason);
        }
    }

    @Test public void badFilesThrowTheEnginesMessage() throws Exception {
        File missing = new File(TMP, "no-such-model-😀.gguf");
        try {
            Engine.load(missing.getPath(), null);
            fail("loaded a missing file");
        } catch (KazeiaException ex) {
            assertEquals(KazeiaException.IO, ex.status());
            assertTrue(ex.getMessage(), ex.getMessage().contains(missing.getPath())); // the 4-byte emoji survives
        }
        File junk = new File(TMP, "junk.gguf");
        byte[] b = new byte[4096];
        new Random(1).nextBytes(b);
        Files.write(junk.toPath(), b);
        try {
            Engine.load(junk.getPath(), null);
            fail("loaded random bytes");
        } catch (KazeiaException ex) {
            assertEquals(KazeiaException.FORMAT, ex.status());
            assertTrue(ex.getMessage(), ex.getMessage().contains("junk.gguf"));
        }
        // a well-formed GGUF of an architecture the engine does not run ("qwen35" -> "qwen99")
        byte[] other = Files.readAllBytes(new File(MODEL).toPath());
        byte[] from = "qwen35".getBytes(StandardCharsets.US_ASCII);
        int swaps = 0;
        for (int i = 0; i + from.length <= other.length; i++) {
            boolean eq = true;
            for (int k = 0; k < from.length && eq; k++) eq = other[i + k] == from[k];
            if (eq) { other[i + 4] = '9'; other[i + 5] = '9'; swaps++; }
        }
        assertTrue(swaps > 5);
        File wrong = new File(TMP, "wrong-arch.gguf");
        Files.write(wrong.toPath(), other);
        try {
            Engine.load(wrong.getPath(), null);
            fail("loaded an unknown architecture");
        } catch (KazeiaException ex) {
            assertEquals(ex.getMessage(), KazeiaException.UNSUPPORTED, ex.status());
            assertTrue(ex.getMessage(), ex.getMessage().contains("qwen99"));
        }
        // a context the engine refuses: the model loaded first is freed again
        try {
            Engine.load(MODEL, new EngineConfig().nCtx(-5));
            fail("n_ctx -5 accepted");
        } catch (KazeiaException ex) {
            assertEquals(KazeiaException.INVALID_ARG, ex.status());
            assertTrue(ex.getMessage(), ex.getMessage().contains("n_ctx"));
        }
        // a GGUF truncated in the middle of its tensor data
        byte[] model = Files.readAllBytes(new File(MODEL).toPath());
        File cut = new File(TMP, "cut.gguf");
        Files.write(cut.toPath(), java.util.Arrays.copyOf(model, model.length / 2));
        try {
            Engine.load(cut.getPath(), null);
            fail("loaded a truncated file");
        } catch (KazeiaException ex) {
            assertTrue(ex.getMessage(), ex.getMessage().length() > 10);
        }
    }

    @Test public void promptOverTheContextThrowsAndTheEngineStaysUsable() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig().nCtx(64))) {
            try {
                e.generate(null, longText(300), 4, null, new Collected()).await();
                fail("a 300-token prompt fit in 64");
            } catch (KazeiaException ex) {
                assertEquals(KazeiaException.CTX_FULL, ex.status());
                assertTrue(ex.getMessage(), ex.getMessage().contains("context is 64"));
            }
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, e.generate(null, "ok", 3, null, new Collected()).await().stopReason);
            try {
                e.restoreState(new byte[] { 1, 2, 3 });
                fail("restored garbage");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage().length() > 5);
            }
        }
    }

    @Test public void twoEnginesInOneProcess() throws Exception {
        String ref1 = cReference(MODEL, 21, 0.8f, 32, "first");
        String ref2 = cReference(EMOJI, 22, 0.8f, 32, "second");
        try (Engine a = Engine.load(MODEL, new EngineConfig().threads(1).sampling(sampling(21, 0.8f)));
             Engine b = Engine.load(EMOJI, new EngineConfig().threads(1).sampling(sampling(22, 0.8f)))) {
            Collected ca = new Collected(), cb = new Collected();
            Generation ga = a.generate(null, "first", 32, null, ca), gb = b.generate(null, "second", 32, null, cb);
            ga.await();
            gb.await();
            assertEquals(ref1, ca.text.toString());
            assertEquals(ref2, cb.text.toString());
        }
    }

    @Test public void closeDuringGenerationWaitsAndFrees() throws Exception {
        Engine e = Engine.load(MODEL, new EngineConfig().nCtx(8192).nBatch(2048));
        Generation g = e.generate(null, longText(6000), 0, null, new Collected());
        Generation queued = e.generate(null, "later", 4, null, new Collected());
        Thread.sleep(100);
        long t0 = System.nanoTime();
        e.close();
        double ms = (System.nanoTime() - t0) / 1e6;
        System.out.printf("close during generation: returned after %.1f ms%n", ms);
        assertTrue(g.isDone());
        assertEquals(GenerationStats.StopReason.CANCELLED, g.await().stopReason);
        assertEquals(GenerationStats.StopReason.CANCELLED, queued.await().stopReason);
        try {
            e.generate(null, "x", 1, null, null);
            fail("generate after close");
        } catch (KazeiaException ex) {
            assertTrue(ex.getMessage().contains("closed"));
        }
        e.close(); // idempotent
    }

    @Test public void stateSaveRestoreAndConversation() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig())) {
            Conversation conv = e.conversation("You are terse.", false, 0); // thinking off: the reply is kept as streamed
            Collected c = new Collected();
            conv.send("one", 6, null, c).await();
            assertEquals(1, conv.history().size());
            assertEquals(c.text.toString(), conv.history().get(0).assistant);
            int past = e.nPast();
            byte[] img = conv.saveState();
            e.reset();
            assertEquals(0, e.nPast());
            conv.restoreState(img);
            assertEquals(past, e.nPast());
            // the history is reused from the restored context on the next turn
            GenerationStats s = conv.send("two", 4, null, new Collected()).await();
            assertTrue("reused " + s.reusedTokens, s.reusedTokens > 0);
            File f = new File(TMP, "state.kzs");
            e.saveStateFile(f.getPath());
            e.reset();
            e.restoreStateFile(f.getPath());
            assertTrue(e.nPast() > 0);
        }
    }

    @Test public void greedyTokensEqualArgmaxOfEval() throws Exception {
        // the ids streamed through JNI against an independent loop: eval() + argmax in Java
        try (Engine e = Engine.load(MODEL, new EngineConfig().sampling(new Sampling().think(false)));
             Engine ref = Engine.load(MODEL, new EngineConfig())) {
            Collected c = new Collected();
            GenerationStats s = e.generate(null, "abc", 6, null, c).await();
            assertTrue(c.ids.size() >= 3);
            int[] prompt = ref.tokenize("<|im_start|>user\nabc<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", true);
            assertEquals(s.promptTokens, prompt.length);
            float[] lg = ref.eval(prompt);
            for (int i = 0; i < c.ids.size(); i++) {
                int best = 0;
                for (int k = 1; k < lg.length; k++) if (lg[k] > lg[best]) best = k;
                assertEquals("token " + i, best, (int) c.ids.get(i));
                lg = ref.eval(new int[] { best });
            }
        }
    }
}
