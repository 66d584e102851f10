package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow
import kotlinx.coroutines.withContext

/**
 * The Kotlin API: a model and its context behind one owned native thread (Engine).
 *
 *     val engine = KazeiaEngine.load(path, engineConfig { nCtx = 4096 })
 *     engine.generate("You are helpful.", "Hello!", maxTokens = 256).collect { ev ->
 *         when (ev) {
 *             is GenerationEvent.Token -> textView.append(ev.text)
 *             is GenerationEvent.Stats -> Log.i("kazeia", "${ev.decodeTokensPerSecond} tok/s")
 *         }
 *     }
 *     engine.close()
 *
 * Cancelling the collecting coroutine calls kz_cancel: the engine stops inside the prefill chunk
 * it is in (at the next op) or before the next token. Errors are KazeiaException with the
 * engine's message (bad file, wrong model, prompt over the context); the engine stays usable.
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
     * Streams an answer: Token events, then one Stats. Cold: each collection runs one
     * generation (queued behind any running one). sampling null keeps the current parameters.
     */
    fun generate(system: String?, user: String, maxTokens: Int = 512, sampling: Sampling? = null): Flow<GenerationEvent> =
        eventFlow { listener -> engine.generate(system, user, maxTokens, sampling, listener) }

    /** A conversation with this system prompt (see KazeiaConversation for what is multi-turn today). */
    fun conversation(system: String?): KazeiaConversation = KazeiaConversation(engine.conversation(system))

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

/**
 * A Flow over one Generation: the listener sends into an unlimited channel (the engine thread
 * never blocks on a slow collector); the collector's cancellation cancels the generation.
 */
internal fun eventFlow(start: (GenerationListener) -> Generation): Flow<GenerationEvent> = callbackFlow<GenerationEvent> {
    val generation = start(object : GenerationListener {
        override fun onToken(id: Int, text: String, raw: ByteArray): Boolean {
            trySend(GenerationEvent.Token(id, text, raw))
            return true
        }

        override fun onComplete(tail: String, stats: GenerationStats) {
            if (tail.isNotEmpty()) trySend(GenerationEvent.Token(-1, tail, ByteArray(0)))
            trySend(GenerationEvent.Stats(stats))
            close()
        }

        override fun onError(error: KazeiaException) {
            close(error)
        }
    })
    awaitClose { generation.cancel() }
}.buffer(Channel.UNLIMITED)
