package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlinx.coroutines.withContext
import kotlin.coroutines.resume
import kotlin.coroutines.resumeWithException

/**
 * The Kotlin API: a model and its context behind one owned native thread (Engine).
 *
 *     val engine = KazeiaEngine.load(path, engineConfig { nCtx = 4096 })
 *     engine.generate("You are helpful.", "Hello!", maxTokens = 256).collect { ev ->   // KazeiaFlow.kt
 *         when (ev) {
 *             is GenerationEvent.Token -> textView.append(ev.text)
 *             is GenerationEvent.Stats -> Log.i("kazeia", "${ev.decodeTokensPerSecond} tok/s")
 *         }
 *     }
 *     engine.close()
 *
 * Cancelling the coroutine that collects (or that runs generateTo) calls kz_cancel: the engine
 * stops inside the prefill chunk it is in (at the next op) or before the next token. Errors are
 * KazeiaException with the engine's message (bad file, wrong model, prompt over the context); the
 * engine stays usable. This file needs kotlinx-coroutines-core only (1.0 and up); the Flow API is
 * in KazeiaFlow.kt.
 */
class KazeiaEngine private constructor(val engine: Engine) {

    companion object {
        /** Loads the model and creates its context off the caller's thread. */
        suspend fun load(path: String, config: EngineConfig = EngineConfig()): KazeiaEngine =
            withContext(Dispatchers.IO) { KazeiaEngine(Engine.load(path, config)) }

        /** Threads used when EngineConfig.threads is 0: the fast cores of this phone. */
        fun defaultThreads(): Int = Engine.defaultThreads()

        fun version(): String = Engine.version()
    }

    /**
     * Runs one generation, handing each event to onEvent (on the engine's thread: keep it short),
     * and returns its stats. Cancelling the calling coroutine cancels the generation (kz_cancel)
     * and returns at once; the engine finishes the op in flight on its own thread.
     */
    suspend fun generateTo(system: String?, user: String, maxTokens: Int = 512, sampling: Sampling? = null,
                           onEvent: (GenerationEvent) -> Unit): GenerationStats =
        runGeneration(onEvent) { listener -> engine.generate(system, user, maxTokens, sampling, listener) }

    /**
     * A conversation (kz_chat) on this engine's context: think = replies think unless their
     * ReplyOptions say otherwise; maxCheckpoints = GDN state checkpoints kept (0 = 2).
     */
    suspend fun conversation(system: String?, think: Boolean = true, maxCheckpoints: Int = 0): KazeiaConversation =
        withContext(Dispatchers.IO) { KazeiaConversation(engine.conversation(system, think, maxCheckpoints)) }

    /** The sequence's state image (KV, recurrent state); restore with restoreState on the same model. */
    suspend fun saveState(): ByteArray = withContext(Dispatchers.IO) { engine.saveState() }

    /** Restores an image; a bad one throws and leaves the state as it was. */
    suspend fun restoreState(image: ByteArray) = withContext(Dispatchers.IO) { engine.restoreState(image) }

    suspend fun saveStateFile(path: String) = withContext(Dispatchers.IO) { engine.saveStateFile(path) }
    suspend fun restoreStateFile(path: String) = withContext(Dispatchers.IO) { engine.restoreStateFile(path) }
    suspend fun reset() = withContext(Dispatchers.IO) { engine.reset() }

    /** Stops the running generation, if any (any thread, returns at once). */
    fun cancel() = engine.cancel()

    /** Cancels what runs, waits for it to return, frees the model and context. Idempotent. */
    suspend fun close() = withContext(Dispatchers.IO) { engine.close() }

    /** close() for callers outside a coroutine (never from a generation callback). */
    fun closeBlocking() = engine.close()
}

/** The listener that turns engine callbacks into GenerationEvents (Token, a final tail, Stats). */
internal fun eventListener(onEvent: (GenerationEvent) -> Unit, onEnd: (GenerationStats?, KazeiaException?) -> Unit) =
    object : GenerationListener {
        override fun onToken(id: Int, text: String, raw: ByteArray): Boolean {
            onEvent(GenerationEvent.Token(id, text, raw))
            return true
        }

        override fun onComplete(tail: String, stats: GenerationStats) {
            if (tail.isNotEmpty()) onEvent(GenerationEvent.Token(-1, tail, ByteArray(0)))
            onEvent(GenerationEvent.Stats(stats))
            onEnd(stats, null)
        }

        override fun onError(error: KazeiaException) = onEnd(null, error)
    }

/** Suspends until the generation ends; the coroutine's cancellation cancels it. */
internal suspend fun runGeneration(onEvent: (GenerationEvent) -> Unit, start: (GenerationListener) -> Generation): GenerationStats =
    suspendCancellableCoroutine { cont ->
        val generation = start(eventListener(onEvent) { stats, error ->
            // after a cancellation the continuation is already resumed: these are then ignored
            if (cont.isActive) {
                if (stats != null) cont.resume(stats) else cont.resumeWithException(error!!)
            }
        })
        cont.invokeOnCancellation { generation.cancel() }
    }
