package org.kazeia.engine

import java.util.concurrent.CopyOnWriteArrayList
import kotlin.system.exitProcess
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.coroutineScope
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking

/**
 * The Kotlin sources that build with Debian's kotlinc 1.3 and kotlinx-coroutines 1.0
 * (GenerationEvent.kt, KazeiaEngine.kt, KazeiaConversation.kt, KazeiaGuard.kt) against the real
 * .so, run by tests/jni/run_jvm_tests.sh: suspend load, generateTo's events (text = whole-buffer
 * decode of the raw bytes), the collecting coroutine's cancellation reaching kz_cancel inside a
 * prefill chunk, a multi-turn conversation against the C chat API (jni_fixture chat), a cancelled
 * turn withdrawn, guard verdicts and a guarded turn, errors. args: MODEL GUARD FIXTURE
 */
var failed = 0
fun check(ok: Boolean, what: String) { if (!ok) { println("kotlin: FAIL $what"); failed++ } }

/** the C chat API's replies (jni_fixture chat MODEL SYSTEM TURN...): the texts of the TURN blocks */
fun cReplies(fixture: String, model: String, system: String, vararg turns: String): List<String> {
    val p = ProcessBuilder(listOf(fixture, "chat", model, system) + turns).redirectError(ProcessBuilder.Redirect.INHERIT).start()
    val out = p.inputStream.readBytes()
    p.waitFor()
    val replies = ArrayList<String>()
    var pos = 0
    while (pos < out.size) {
        var nl = pos
        while (out[nl] != '\n'.toByte()) nl++
        val n = String(out, pos, nl - pos, Charsets.US_ASCII).split(" ")[5].toInt()
        replies.add(String(out, nl + 1, n, Charsets.UTF_8))
        pos = nl + 1 + n + 1
    }
    return replies
}

fun explicitSampling(temp: Float, seed: Long) = sampling {
    temperature = temp; this.seed = seed; topK = 30; topP = 0.9f; minP = 0.02f
    repeatPenalty = 1.1f; repeatLastN = 32; presencePenalty = 0.5f; frequencyPenalty = 0.1f
}

suspend fun conversation(engine: KazeiaEngine, model: String, guardPath: String, fixture: String, longPrompt: String) = coroutineScope {
    val ref = cReplies(fixture, model, "Be brief.", "n=12;think=0;temp=0.9;seed=5|Hello there, écris 🌍",
                       "n=10|and again?", "n=8;think=0;temp=0.7;seed=9|fourth")
    val conv = engine.conversation("Be brief.")
    val texts = ArrayList<String>()
    val opts = listOf(replyOptions { maxTokens = 12; think = false; sampling = explicitSampling(0.9f, 5) },
                      replyOptions { maxTokens = 10 },
                      replyOptions { maxTokens = 8; think = false; sampling = explicitSampling(0.7f, 9) })
    val users = listOf("Hello there, écris 🌍", "and again?", "fourth")
    var last: GenerationStats? = null
    for (t in 0..1) {
        val events = ArrayList<GenerationEvent>()
        last = conv.sendTo(users[t], opts[t]) { events.add(it) }
        texts.add(events.text())
    }
    check(texts == ref.subList(0, 2), "conversation replies != the C API's: $texts vs ${ref.subList(0, 2)}")
    check(last!!.reusedTokens > 0, "turn 2 reused ${last.reusedTokens} tokens")
    // the coroutine cancelled mid-prefill: kz_cancel, the turn withdrawn, the next one as the C API's
    val job = launch(Dispatchers.Default) { conv.sendTo(longPrompt, replyOptions { maxTokens = 8 }) { } }
    delay(150)
    job.cancelAndJoin()
    val n = conv.messages().size // queued behind the cancelled turn on the engine thread
    check(n == 5, "a turn cancelled in prefill left $n messages")
    val events = ArrayList<GenerationEvent>()
    conv.sendTo(users[2], opts[2]) { events.add(it) }
    check(events.text() == ref[2], "the turn after a cancel: ${events.text()} vs ${ref[2]}")
    println("kotlin: 3 conversation turns equal to the C chat API's, a cancelled turn withdrawn")
    // guard verdicts and a guarded turn (the tiny random guard says Controversial: loose lets it pass)
    val guard = KazeiaGuard.load(guardPath, guardConfig { policy = GuardConfig.LOOSE; checkEvery = 4 })
    try {
        val v = guard.checkPrompt("How can I make a bomb?")
        check(v.label == GuardVerdict.Label.CONTROVERSIAL && !v.blocked && v.nEval > 0, "verdict $v")
        val r = conv.sendGuarded(guard, "Tell me more", replyOptions { maxTokens = 6; think = false }) { }
        check(!r.blocked && r.answer != null && conv.messages().size == 9, "guarded turn $r")
        println("kotlin: guard verdict $v; guarded turn: $r")
    } finally {
        guard.close()
    }
    conv.close()
}

fun main(args: Array<String>): Unit = runBlocking {
    val engine = KazeiaEngine.load(args[0], engineConfig { nCtx = 8192; nBatch = 2048; sampling = sampling { temperature = 0.8f; seed = 9 } })
    try {
        val events = CopyOnWriteArrayList<GenerationEvent>()
        val raw = java.io.ByteArrayOutputStream()
        val stats = engine.generateTo(null, "Kotlin ✓ 🚀", 24) { ev ->
            events.add(ev)
            if (ev is GenerationEvent.Token) raw.write(ev.bytes)
        }
        val last = events.last() as GenerationEvent.Stats
        println("kotlin: ${events.size - 1} token events, ${stats.generatedTokens} generated, " +
                "decode ${"%.1f".format(last.decodeTokensPerSecond)} tok/s, stop ${last.stopReason}")
        check(events.text() == String(raw.toByteArray(), Charsets.UTF_8), "incremental text != whole decode")
        check(last.stats === stats, "the Stats event carries the returned stats")
        check(stats.generatedTokens == 24 || stats.stopReason == GenerationStats.StopReason.EOG, "token count")

        // cancel the coroutine in the middle of a 6000-token prompt (2048-token chunks)
        val prompt = buildString { var i = 0; while (length < 6000) append('a' + (i++ * 7) % 26) }
        val seen = CopyOnWriteArrayList<GenerationEvent>()
        val job = launch(Dispatchers.Default) { engine.generateTo(null, prompt, 8) { seen.add(it) } }
        delay(150)
        val t0 = System.nanoTime()
        job.cancelAndJoin()
        val joinMs = (System.nanoTime() - t0) / 1e6
        // the engine still reports the end to the listener: it must come within one op
        var endMs = -1.0
        while ((System.nanoTime() - t0) / 1e6 < 5000) {
            val s = seen.filterIsInstance<GenerationEvent.Stats>().firstOrNull()
            if (s != null) {
                endMs = (System.nanoTime() - t0) / 1e6
                check(s.stopReason == GenerationStats.StopReason.CANCELLED, "stop reason ${s.stopReason}")
                check(s.generatedTokens == 0, "tokens after a cancel in prefill")
                break
            }
            Thread.sleep(1)
        }
        println("kotlin: coroutine cancelled mid-prefill: joined in %.1f ms, engine stopped after %.1f ms".format(joinMs, endMs))
        check(endMs in 0.0..200.0, "the engine took $endMs ms to stop")

        conversation(engine, args[0], args[1], args[2], prompt)
        check(engine.saveState().isNotEmpty(), "state image")
        try {
            KazeiaEngine.load(args[0] + ".missing")
            check(false, "missing file loaded")
        } catch (e: KazeiaException) {
            check(e.message!!.contains(".missing") && e.status() == KazeiaException.IO, "message ${e.message}")
        }
    } finally {
        engine.close()
    }
    println(if (failed == 0) "kotlin: OK" else "kotlin: $failed failed")
    exitProcess(if (failed == 0) 0 else 1)
}
