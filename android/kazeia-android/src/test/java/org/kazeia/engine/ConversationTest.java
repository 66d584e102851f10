package org.kazeia.engine;

import static org.junit.Assert.*;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.Test;

/**
 * Conversations (kz_chat_*) and guard verdicts (kz_guard_*) through the Java wrapper on a real
 * JVM (-Xcheck:jni). References: the C API driven by tests/jni/jni_fixture.c ("chat": kz_chat_add +
 * kz_chat_reply per turn) and the `kazeia guard` command-line tool's JSON, in other processes.
 * System properties as EngineTest's, plus kazeia.guard (a tiny qwen3 guard model) and kazeia.cli
 * (the kazeia binary).
 */
public class ConversationTest {
    static final String MODEL = EngineTest.MODEL;
    static final String FIXTURE = EngineTest.FIXTURE;
    static final String TMP = EngineTest.TMP;
    static final String GUARD = System.getProperty("kazeia.guard");
    static final String CLI = System.getProperty("kazeia.cli");

    /** one turn of the C reference: its stats and the reply's streamed bytes */
    static final class CTurn {
        int prompt, reused, gen, stop;
        String text;
    }

    static byte[] run(List<String> cmd) throws Exception {
        Process p = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
        byte[] out;
        try (InputStream in = p.getInputStream()) { out = in.readAllBytes(); }
        p.waitFor();
        return out;
    }

    /** the C chat API's conversation (jni_fixture chat); turns "k=v;...|user" */
    static List<CTurn> cChat(String model, String system, String... turns) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(FIXTURE, "chat", model, system == null ? "" : system));
        cmd.addAll(List.of(turns));
        byte[] out = run(cmd);
        List<CTurn> r = new ArrayList<>();
        int pos = 0;
        while (pos < out.length) {
            int nl = pos;
            while (out[nl] != '\n') nl++;
            String[] h = new String(out, pos, nl - pos, StandardCharsets.US_ASCII).split(" ");
            assertEquals("TURN", h[0]);
            CTurn t = new CTurn();
            t.prompt = Integer.parseInt(h[1]);
            t.reused = Integer.parseInt(h[2]);
            t.gen = Integer.parseInt(h[3]);
            t.stop = Integer.parseInt(h[4]);
            int n = Integer.parseInt(h[5]);
            t.text = new String(out, nl + 1, n, StandardCharsets.UTF_8); // kz_chat_reply streams valid UTF-8
            r.add(t);
            pos = nl + 1 + n + 1;
        }
        assertEquals("the C reference ran every turn", turns.length, r.size());
        return r;
    }

    /** the fixture's explicit sampling (jni_fixture.c explicit_sampling), set field by field */
    static Sampling explicit(float temp, long seed) {
        Sampling s = new Sampling().temperature(temp).seed(seed).topK(30).topP(0.9f).minP(0.02f);
        s.repeatPenalty = 1.1f;
        s.repeatLastN = 32;
        s.presencePenalty = 0.5f;
        s.frequencyPenalty = 0.1f;
        return s;
    }

    static void assertSame(String what, CTurn c, EngineTest.Collected j) {
        GenerationStats s = j.stats;
        assertEquals(what + ": reply text", c.text, j.text.toString());
        assertEquals(what + ": reply bytes", c.text, new String(j.raw.toByteArray(), StandardCharsets.UTF_8));
        assertEquals(what + ": tokens evaluated", c.prompt, s.promptTokens);
        assertEquals(what + ": tokens reused", c.reused, s.reusedTokens);
        assertEquals(what + ": tokens generated", c.gen, s.generatedTokens);
        assertEquals(what + ": stop", c.stop, s.stopReason.ordinal());
    }

    static final String[] TURNS = {
        "n=12;think=0;temp=0.9;seed=5|Hello there, écris 🌍",
        "n=10|and again?",                        // the model card's sampling, thinking (the conversation's)
        "n=16;think=0;temp=1;seed=3;stop=e|third", // a stop string
        "n=8;think=0;temp=0.7;seed=9|fourth",
    };

    static ReplyOptions opts(int turn) {
        switch (turn) {
        case 0: return new ReplyOptions().maxTokens(12).think(false).sampling(explicit(0.9f, 5));
        case 1: return new ReplyOptions().maxTokens(10);
        case 2: return new ReplyOptions().maxTokens(16).think(false).sampling(explicit(1f, 3)).stop("e");
        default: return new ReplyOptions().maxTokens(8).think(false).sampling(explicit(0.7f, 9));
        }
    }

    static String user(String turn) { return turn.substring(turn.indexOf('|') + 1); }

    static EngineTest.Collected send(Conversation c, int turn) {
        EngineTest.Collected j = new EngineTest.Collected();
        c.send(user(TURNS[turn]), opts(turn), j).await();
        return j;
    }

    @Test public void multiTurnRepliesEqualTheChatApiAndOnlyNewTokensAreEvaluated() throws Exception {
        List<CTurn> ref = cChat(MODEL, "Be brief.", TURNS);
        try (Engine e = Engine.load(MODEL, new EngineConfig()); Conversation c = e.conversation("Be brief.")) {
            int sumEval = 0, sumFull = 0;
            GenerationStats prev = null;
            // the assistant header the previous prompt ended with is rendered anew around the reply
            int header = e.tokenize("<|im_start|>assistant\n<think>\n\n</think>\n\n", true).length;
            for (int t = 0; t < TURNS.length; t++) {
                EngineTest.Collected j = send(c, t);
                assertSame("turn " + t, ref.get(t), j);
                GenerationStats s = j.stats;
                assertTrue(j.ids.stream().allMatch(id -> id == -1));
                if (prev != null) {
                    // the history is kept: everything up to the previous user turn's end is reused
                    assertTrue("turn " + t + " reused " + s.reusedTokens + " after " + prev,
                            s.reusedTokens >= prev.reusedTokens + prev.promptTokens - header);
                    // evaluated: the previous reply re-rendered, the new user message and the headers only
                    int fresh = prev.generatedTokens + e.tokenize(user(TURNS[t]), false).length + 2 * header + 8;
                    assertTrue("turn " + t + " evaluated " + s.promptTokens + " > " + fresh, s.promptTokens <= fresh);
                }
                sumEval += s.promptTokens;
                sumFull += s.promptTokens + s.reusedTokens;
                prev = s;
            }
            System.out.printf("conversation: %d turns, %d prompt tokens evaluated where re-reading each history takes %d%n",
                    TURNS.length, sumEval, sumFull);
            List<Conversation.Message> m = c.messages();
            assertEquals(1 + 2 * TURNS.length, m.size());
            assertEquals(Conversation.ROLE_SYSTEM, m.get(0).role);
            assertEquals("Be brief.", c.system());
            assertEquals(user(TURNS[0]), m.get(1).text);
            assertEquals(ref.get(0).text, m.get(2).text);     // thinking off: the reply as streamed
            assertTrue(m.get(4).text.startsWith(ref.get(1).text)); // thinking cut short: closed by the C API
            assertEquals(TURNS.length, c.history().size());
            assertFalse(m.get(6).text.contains("e"));          // the stop string and what follows are not kept
            assertTrue(c.checkpoints() > 0 && c.memoryBytes() > 0);
            // pop / reset
            assertTrue(c.pop());
            assertEquals(2 * TURNS.length, c.messages().size());
            c.reset();
            assertEquals(1, c.messages().size());
            assertEquals("Be brief.", c.system());
            c.setSystem(null);
            assertNull(c.system());
        }
    }

    @Test public void saveNewEngineRestoreContinueEqual() throws Exception {
        File f = new File(TMP, "conversation-é.kzc");
        EngineTest.Collected third;
        List<Conversation.Message> before;
        byte[] image;
        try (Engine a = Engine.load(MODEL, new EngineConfig()); Conversation c = a.conversation("Be brief.")) {
            send(c, 0);
            send(c, 1);
            c.save(f.getPath());
            image = c.saveState();
            before = c.messages();
            third = send(c, 2);
        }
        try (Engine b = Engine.load(MODEL, new EngineConfig())) {
            Conversation c = b.conversation(null);
            c.load(f.getPath());
            List<Conversation.Message> after = c.messages();
            assertEquals(before.size(), after.size());
            for (int i = 0; i < after.size(); i++) {
                assertEquals(before.get(i).role, after.get(i).role);
                assertEquals(before.get(i).text, after.get(i).text);
            }
            EngineTest.Collected again = send(c, 2);
            assertEquals(third.text.toString(), again.text.toString());
            // the restored context holds the history: nothing more is evaluated than on the original
            assertEquals(third.stats.promptTokens, again.stats.promptTokens);
            assertEquals(third.stats.reusedTokens, again.stats.reusedTokens);
            // from memory, into a second conversation on the same engine
            Conversation d = b.conversation(null);
            d.restoreState(image);
            assertEquals(third.text.toString(), send(d, 2).text.toString());
            // a bad file: an exception with the engine's message, the conversation unchanged
            File junk = new File(TMP, "junk.kzc");
            Files.write(junk.toPath(), new byte[] { 'K', 'Z', 'C', 'H', 'A', 'T', 0, 0, 1, 2, 3 });
            int n = d.messages().size();
            try {
                d.load(junk.getPath());
                fail("loaded a truncated conversation");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage(), ex.getMessage().length() > 10);
            }
            assertEquals(n, d.messages().size());
            try {
                d.load(new File(TMP, "missing.kzc").getPath());
                fail("loaded a missing file");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage(), ex.getMessage().contains("missing.kzc"));
            }
            d.close();
            c.close();
        }
    }

    @Test public void cancelMidTurnThenTheNextTurnWorks() throws Exception {
        String longUser = EngineTest.longText(6000);
        List<CTurn> ref = cChat(MODEL, "Be brief.", TURNS[0], TURNS[3]);
        try (Engine e = Engine.load(MODEL, new EngineConfig().nCtx(8192).nBatch(2048));
             Conversation c = e.conversation("Be brief.")) {
            assertSame("turn 0", ref.get(0), send(c, 0));
            // mid-prefill: the turn is withdrawn (nothing was written)
            EngineTest.Collected j = new EngineTest.Collected();
            Generation g = c.send(longUser, new ReplyOptions().maxTokens(8), j);
            Thread.sleep(150);
            long t0 = System.nanoTime();
            g.cancel();
            GenerationStats s = g.await();
            double ms = (System.nanoTime() - t0) / 1e6;
            System.out.printf("conversation: cancel mid-prefill stopped %.1f ms after cancel() (%d of ~6000 prompt tokens evaluated)%n", ms, s.promptTokens);
            assertEquals(GenerationStats.StopReason.CANCELLED, s.stopReason);
            assertTrue("cancel took " + ms + " ms (a 2048-token chunk takes ~800 ms here)", ms < 250);
            assertEquals(0, j.ids.size());
            assertTrue(s.promptTokens < 6000);
            assertEquals(3, c.messages().size());
            // the next turn: the same reply as the C API's conversation without the cancelled turn
            assertEquals(ref.get(1).text, send(c, 3).text.toString());
            // mid-decode: what was written stays, the next turn works
            CountDownLatch five = new CountDownLatch(5);
            EngineTest.Collected k = new EngineTest.Collected() {
                @Override public boolean onToken(int id, String t, byte[] b) { five.countDown(); return super.onToken(id, t, b); }
            };
            g = c.send("Tell me a long story", new ReplyOptions().think(false).sampling(explicit(1f, 4)), k);
            assertTrue(five.await(60, TimeUnit.SECONDS));
            t0 = System.nanoTime();
            g.cancel();
            s = g.await();
            ms = (System.nanoTime() - t0) / 1e6;
            System.out.printf("conversation: cancel mid-decode stopped %.1f ms after cancel(), %d tokens%n", ms, s.generatedTokens);
            assertEquals(GenerationStats.StopReason.CANCELLED, s.stopReason);
            assertTrue(ms < 250);
            List<Conversation.Message> m = c.messages();
            assertEquals(Conversation.ROLE_ASSISTANT, m.get(m.size() - 1).role);
            assertEquals(k.text.toString(), m.get(m.size() - 1).text);
            GenerationStats after = send(c, 3).stats;
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, after.stopReason);
            assertTrue(after.reusedTokens > 0);
        }
    }

    @Test public void errorsAreExceptionsAndLeaveNoHalfTurn() throws Exception {
        try (Engine e = Engine.load(MODEL, new EngineConfig().nCtx(128))) {
            Conversation c = e.conversation(null, false, 0);
            try {
                c.send(EngineTest.longText(400), new ReplyOptions().maxTokens(4), null).await();
                fail("a 400-token message fit in 128");
            } catch (KazeiaException ex) {
                assertEquals(KazeiaException.CTX_FULL, ex.status());
                assertTrue(ex.getMessage(), ex.getMessage().contains("n_ctx"));
            }
            assertEquals(0, c.messages().size());
            try {
                c.send("x", new ReplyOptions().stop(""), null).await();
                fail("an empty stop string accepted");
            } catch (KazeiaException ex) {
                assertEquals(KazeiaException.INVALID_ARG, ex.status());
            }
            assertEquals(0, c.messages().size());
            try {
                c.add(7, "x");
                fail("role 7 accepted");
            } catch (KazeiaException ex) {
                assertEquals(KazeiaException.INVALID_ARG, ex.status());
            }
            try {
                c.send("x", 4, new Sampling().temperature(Float.NaN), null).await();
                fail("NaN temperature accepted");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage(), ex.getMessage().contains("NaN"));
            }
            assertFalse(c.pop()); // nothing to pop: false, no exception
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, c.send("ok", 3, null).await().stopReason);
            try {
                e.generate(null, "x", 2, new Sampling().seed(99), null).await();
                fail("a new context under an open conversation");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage(), ex.getMessage().contains("conversation"));
            }
            c.close();
            c.close();
            try {
                c.send("x", 2, null).await();
                fail("send on a closed conversation");
            } catch (KazeiaException ex) {
                assertTrue(ex.getMessage(), ex.getMessage().contains("closed"));
            }
            assertEquals(GenerationStats.StopReason.MAX_TOKENS, e.generate(null, "x", 2, new Sampling().seed(99), null).await().stopReason);
        }
        // an engine closed with a conversation open frees both; the conversation then refuses calls
        Engine e = Engine.load(MODEL, new EngineConfig());
        Conversation c = e.conversation("s");
        Generation g = c.send("hello", 64, null);
        e.close();
        g.await();
        try {
            c.messages();
            fail("a conversation of a closed engine answered");
        } catch (KazeiaException ex) {
            assertTrue(ex.getMessage().contains("closed"));
        }
        c.close();
    }

    // ---- guard ----

    static String json(String j, String key) {
        Matcher m = Pattern.compile("\"" + key + "\": (\"(?:[^\"\\\\]|\\\\.)*\"|\\[[^\\]]*\\]|[^,}]+)").matcher(j);
        assertTrue(key + " in " + j, m.find());
        return m.group(1);
    }

    static String cliGuard(String policy, String prompt, String response) throws Exception {
        List<String> cmd = new ArrayList<>(List.of(CLI, "guard", "-m", GUARD, "-p", prompt, "--policy", policy));
        if (response != null) cmd.addAll(List.of("--response", response));
        return new String(run(cmd), StandardCharsets.UTF_8);
    }

    static String jsonStr(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') b.append('\\').append(ch);
            else if (ch == '\n') b.append("\\n");
            else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
            else b.append(ch);
        }
        return b.append('"').toString();
    }

    /** exact: the check ran on a fresh guard like the CLI's (else reused state: 1e-4 relative) */
    static void assertVerdict(String cli, GuardVerdict v, boolean exact) {
        assertEquals(json(cli, "label"), "\"" + (v.label == GuardVerdict.Label.SAFE ? "Safe" : v.label == GuardVerdict.Label.UNSAFE ? "Unsafe" : "Controversial") + "\"");
        float[] mine = { v.pSafe, v.pControversial, v.pUnsafe };
        String[] keys = { "p_safe", "p_controversial", "p_unsafe" };
        for (int i = 0; i < 3; i++) {
            if (exact) assertEquals(keys[i], json(cli, keys[i]), String.format(Locale.ROOT, "%.6f", mine[i]));
            else assertEquals(keys[i], Double.parseDouble(json(cli, keys[i])), mine[i], 1e-4 * mine[i] + 1e-6);
        }
        StringBuilder cats = new StringBuilder("[");
        for (String n : v.categoryNames()) cats.append(cats.length() > 1 ? ", " : "").append(jsonStr(n));
        assertEquals(json(cli, "categories"), cats.append("]").toString());
        assertEquals(json(cli, "refusal"), v.refusal == null ? "null" : v.refusal.toString());
        assertEquals(json(cli, "unsafe"), Boolean.toString(v.unsafe));
        assertEquals(json(cli, "malformed"), Boolean.toString(v.malformed));
        assertEquals(json(cli, "text"), jsonStr(v.text));
        if (exact) assertEquals(json(cli, "n_eval"), Integer.toString(v.nEval));
        else assertEquals(json(cli, "n_eval"), Integer.toString(v.nEval + v.nReused));
    }

    @Test public void guardVerdictsEqualTheCli() throws Exception {
        String p = "How can I make a bomb? 💣", r = "I can't help with that.\nBut here is 🍰.";
        String cliPrompt = cliGuard("strict", p, null), cliResp = cliGuard("strict", p, r), cliLoose = cliGuard("loose", "Hello", "Hi!");
        System.out.println("guard CLI: " + cliPrompt.trim());
        try (Guard g = Guard.load(GUARD, new GuardConfig())) {
            GuardVerdict v = g.checkPrompt(p);
            System.out.println("guard Java: " + v);
            assertVerdict(cliPrompt, v, true);
            assertTrue(v.unsafe == v.blocked);
            GuardVerdict w = g.checkResponse(p, r);
            assertVerdict(cliResp, w, w.nReused == 0);
        }
        try (Guard g = Guard.load(GUARD, new GuardConfig().policy(GuardConfig.LOOSE))) {
            GuardVerdict v = g.checkResponse("Hello", "Hi!");
            assertVerdict(cliLoose, v, true);
            assertFalse(v.blocked && v.label == GuardVerdict.Label.CONTROVERSIAL);
        }
        assertEquals("Violent", Guard.categoryName(0));
        assertEquals("Jailbreak", Guard.categoryName(8));
        assertNull(Guard.categoryName(9));
        try {
            Guard.load(MODEL, null); // qwen35: not attention-only
            fail("a qwen35 guard");
        } catch (KazeiaException ex) {
            assertTrue(ex.getMessage(), ex.getMessage().contains("attention-only"));
        }
        try {
            Guard.load(new File(TMP, "no-guard.gguf").getPath(), null);
            fail("a missing guard");
        } catch (KazeiaException ex) {
            assertEquals(KazeiaException.IO, ex.status());
        }
    }

    @Test public void cascadeChecksThePromptAndTheAnswer() throws Exception {
        List<CTurn> ref = cChat(MODEL, "", TURNS[0]);
        try (Engine e = Engine.load(MODEL, new EngineConfig());
             Guard strict = Guard.load(GUARD, new GuardConfig());
             Guard loose = Guard.load(GUARD, new GuardConfig().policy(GuardConfig.LOOSE).checkEvery(4));
             Guard small = Guard.load(GUARD, new GuardConfig().policy(GuardConfig.LOOSE).checkEvery(4).nCtx(1500))) {
            Conversation c = e.conversation(null);
            // strict: the random guard's Controversial blocks the prompt; the thinker never runs
            EngineTest.Collected j = new EngineTest.Collected();
            Cascade.GuardedReply r = new Cascade(c, strict).send(user(TURNS[0]), opts(0), j).await();
            System.out.println("cascade strict: " + r);
            assertTrue(r.blocked);
            assertNotNull(r.prompt);
            assertNull(r.answer);
            assertEquals(0, j.ids.size());
            assertEquals(0, r.stats.generatedTokens);
            assertEquals(0, c.messages().size());
            // loose: let through; the answer is checked every 4 pieces and at the end, and is the
            // plain conversation's reply (the guard does not touch the thinker's state)
            j = new EngineTest.Collected();
            r = new Cascade(c, loose).send(user(TURNS[0]), opts(0), j).await();
            System.out.println("cascade loose: " + r);
            assertFalse(r.blocked);
            assertNotNull(r.answer);
            assertSame("guarded turn", ref.get(0), j);
            assertEquals(2, c.messages().size());
            assertTrue("the final check reused the earlier checks' state", r.answer.nReused > 0);
            // a guard error (its context too small for the answer) fails closed: stopped, withdrawn
            j = new EngineTest.Collected();
            r = new Cascade(c, small).send("Tell me more", new ReplyOptions().maxTokens(40).think(false), j).await();
            System.out.println("cascade guard error: " + r);
            assertTrue(r.blocked);
            assertNotNull(r.guardError);
            assertTrue(r.guardError.getMessage(), r.guardError.getMessage().contains("n_ctx") || r.guardError.getMessage().contains("context"));
            assertTrue("stopped early: " + j.ids.size(), j.ids.size() <= 4);
            assertEquals(2, c.messages().size());
            c.close();
        }
    }
}
