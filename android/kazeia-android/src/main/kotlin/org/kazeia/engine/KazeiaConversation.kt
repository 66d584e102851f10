package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

/**
 * A conversation on a KazeiaEngine. Its shape is the multi-turn chat API's (issue 24): send a
 * user message, stream the reply, keep the turns, save/restore. Wired today to the single-turn
 * kz_generate: the system block is evaluated once and reused, but earlier turns are not yet seen
 * by the model. When the C chat API lands, send() calls it (only the new tokens evaluated), and
 * per-turn thinking, stop strings and guard verdicts become parameters / events here.
 * send() (a Flow) is in KazeiaFlow.kt.
 */
class KazeiaConversation internal constructor(internal val conversation: Conversation) {
    val system: String? get() = conversation.system()

    /** The finished turns, oldest first. */
    val history: List<Conversation.Turn> get() = conversation.history()

    /** Answers user, events to onEvent (on the engine thread); cancellation cancels the reply. */
    suspend fun sendTo(user: String, maxTokens: Int = 512, sampling: Sampling? = null,
                       onEvent: (GenerationEvent) -> Unit): GenerationStats =
        runGeneration(onEvent) { listener -> conversation.send(user, maxTokens, sampling, listener) }

    suspend fun saveState(): ByteArray = withContext(Dispatchers.IO) { conversation.saveState() }
    suspend fun restoreState(image: ByteArray) = withContext(Dispatchers.IO) { conversation.restoreState(image) }
    suspend fun reset() = withContext(Dispatchers.IO) { conversation.reset() }
}
