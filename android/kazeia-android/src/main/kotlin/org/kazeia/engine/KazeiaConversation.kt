package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.withContext

/**
 * A conversation on a KazeiaEngine. Its shape is the multi-turn chat API's (issue 24): send a
 * user message, stream the reply, keep the turns, save/restore. Wired today to the single-turn
 * kz_generate: the system block is evaluated once and reused, but earlier turns are not yet seen
 * by the model. When the C chat API lands, send() calls it (only the new tokens evaluated), and
 * per-turn thinking, stop strings and guard verdicts become parameters / events here.
 */
class KazeiaConversation internal constructor(private val conv: Conversation) {
    val system: String? get() = conv.system()

    /** The finished turns, oldest first. */
    val history: List<Conversation.Turn> get() = conv.history()

    /** Streams the reply to user: Token events, then Stats; the turn is recorded at the end. */
    fun send(user: String, maxTokens: Int = 512, sampling: Sampling? = null): Flow<GenerationEvent> =
        eventFlow { listener -> conv.send(user, maxTokens, sampling, listener) }

    suspend fun saveState(): ByteArray = withContext(Dispatchers.IO) { conv.saveState() }
    suspend fun restoreState(image: ByteArray) = withContext(Dispatchers.IO) { conv.restoreState(image) }
    suspend fun reset() = withContext(Dispatchers.IO) { conv.reset() }
}
