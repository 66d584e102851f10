package org.kazeia.engine

import java.util.concurrent.CopyOnWriteArrayList
import kotlin.system.exitProcess

/**
 * The stdlib-only Kotlin sources (GenerationEvent.kt) against the Java wrapper and the real .so,
 * compiled with Debian's kotlinc (1.3) by tests/jni/run_jvm_tests.sh: builders, the events a Flow
 * would carry, and a Kotlin lambda as the Java listener. args: MODEL
 */
fun main(args: Array<String>) {
    val engine = Engine.load(args[0], engineConfig { nCtx = 512; sampling = sampling { temperature = 0.8f; seed = 9 } })
    var failed = 0
    try {
        val events = CopyOnWriteArrayList<GenerationEvent>()
        val raw = java.io.ByteArrayOutputStream()
        engine.generate(null, "Kotlin ✓ 🚀", 24, null, object : GenerationListener {
            override fun onToken(id: Int, text: String, raw0: ByteArray): Boolean {
                events.add(GenerationEvent.Token(id, text, raw0))
                raw.write(raw0)
                return true
            }
            override fun onComplete(tail: String, stats: GenerationStats) {
                if (tail.isNotEmpty()) events.add(GenerationEvent.Token(-1, tail, ByteArray(0)))
                events.add(GenerationEvent.Stats(stats))
            }
        }).await()
        val text = events.text()
        val stats = events.last() as GenerationEvent.Stats
        val whole = String(raw.toByteArray(), Charsets.UTF_8)
        println("kotlin: ${events.size - 1} token events, ${stats.generatedTokens} generated, " +
                "decode ${"%.1f".format(stats.decodeTokensPerSecond)} tok/s, stop ${stats.stopReason}")
        if (text != whole) { println("kotlin: FAIL incremental text != whole decode"); failed++ }
        if (stats.generatedTokens != 24 && stats.stopReason != GenerationStats.StopReason.EOG) { println("kotlin: FAIL count"); failed++ }
        try {
            Engine.load(args[0] + ".missing", null)
            println("kotlin: FAIL missing file loaded"); failed++
        } catch (e: KazeiaException) {
            if (!e.message!!.contains(".missing")) { println("kotlin: FAIL message ${e.message}"); failed++ }
        }
    } finally {
        engine.close()
    }
    println(if (failed == 0) "kotlin: OK" else "kotlin: $failed failed")
    exitProcess(if (failed == 0) 0 else 1)
}
