package org.kazeia.engine

/**
 * What KazeiaEngine.generate emits: Token events as the text streams (text decoded from the raw
 * bytes in order, possibly "" while a character continues in the next token), then one Stats.
 * Plain sealed classes (no data/value classes with arrays): compiles with Kotlin 1.3 and up.
 */
sealed class GenerationEvent {
    /** id: the token (-1 for the decoder's tail at the end); bytes: its raw bytes as the engine produced them */
    class Token(val id: Int, val text: String, val bytes: ByteArray) : GenerationEvent() {
        override fun toString(): String = "Token($id, \"$text\")"
    }

    /** The end of a generation that was not cancelled by its collector. */
    class Stats(val stats: GenerationStats) : GenerationEvent() {
        val promptTokens: Int get() = stats.promptTokens
        val reusedTokens: Int get() = stats.reusedTokens
        val generatedTokens: Int get() = stats.generatedTokens
        val prefillTokensPerSecond: Double get() = stats.prefillTokensPerSecond()
        val decodeTokensPerSecond: Double get() = stats.decodeTokensPerSecond()
        val peakRssMiB: Double get() = stats.peakRssMiB
        val stopReason: GenerationStats.StopReason get() = stats.stopReason
        override fun toString(): String = "Stats($stats)"
    }
}

/** Builds an EngineConfig: `engineConfig { threads = 0; nCtx = 4096; kvType = EngineConfig.KV_Q8_0 }` */
fun engineConfig(block: EngineConfig.() -> Unit): EngineConfig = EngineConfig().apply(block)

/** Builds Sampling parameters: `sampling { temperature = 0.7f; seed = 42 }` */
fun sampling(block: Sampling.() -> Unit): Sampling = Sampling().apply(block)

/** Concatenates the Token texts of a finished event list (tests, logging). */
fun List<GenerationEvent>.text(): String =
    filterIsInstance<GenerationEvent.Token>().joinToString(separator = "") { it.text }
