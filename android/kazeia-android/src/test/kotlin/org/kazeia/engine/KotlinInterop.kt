package org.kazeia.engine

import java.util.concurrent.CopyOnWriteArrayList
import kotlin.system.exitProcess
import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.cancelAndJoin
import kotlinx.coroutines.delay
import kotlinx.coroutines.launch
import kotlinx.coroutines.runBlocking

/**
 * The Kotlin sources that build with Debian's kotlinc 1.3 and kotlinx-coroutines 1.0
 * (GenerationEvent.kt, KazeiaEngine.kt, KazeiaConversation.kt) against the real .so, run by
 * tests/jni/run_jvm_tests.sh: suspend load, generateTo's events (text = whole-buffer decode of
 * the raw bytes), the collecting coroutine's cancellation reaching kz_cancel inside a prefill
 * chunk, a conversation turn, errors. args: MODEL
 */
var failed = 0
fun check(ok: Boolean, what: String) { if (!ok) { println("kotlin: FAIL $what"); failed++ } }

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

        val conv = engine.conversation("Be brief.")
        val cs = conv.sendTo("hi", 4) { }
        check(cs.stopReason != GenerationStats.StopReason.ERROR && conv.history.size == 1, "conversation turn")
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
