package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.suspendCancellableCoroutine
import kotlinx.coroutines.withContext
import kotlin.coroutines.resume
import kotlin.coroutines.resumeWithException

/**
 * A multi-turn conversation on a KazeiaEngine, over the C chat API (kz_chat_*, see Conversation):
 * the history stays in the model's context and each reply evaluates only the new tokens
 * (GenerationStats.reusedTokens / promptTokens); per-reply thinking, sampling and stop strings
 * (ReplyOptions, built with replyOptions { }); pop / reset; save / load to resume on another engine.
 * Cancelling the coroutine of sendTo (or the collector of send, KazeiaFlow.kt) calls kz_cancel,
 * inside a prefill chunk too; a turn cancelled before its first piece, or failed, is withdrawn.
 */
class KazeiaConversation internal constructor(val conversation: Conversation) {

    /** Answers user; events to onEvent (on the engine thread); returns the reply's stats. */
    suspend fun sendTo(user: String, options: ReplyOptions = ReplyOptions(), onEvent: (GenerationEvent) -> Unit): GenerationStats =
        runGeneration(onEvent) { listener -> conversation.send(user, options, listener) }

    /**
     * One turn moderated by guard (Cascade): the prompt checked before the thinker runs, the answer
     * every GuardConfig.checkEvery pieces and at the end; a blocked turn is withdrawn (remove the
     * text shown from onEvent when the result says blocked). Cancellation cancels the turn.
     */
    suspend fun sendGuarded(guard: KazeiaGuard, user: String, options: ReplyOptions = ReplyOptions(),
                            onEvent: (GenerationEvent) -> Unit): Cascade.GuardedReply =
        suspendCancellableCoroutine { cont ->
            val turn = Cascade(conversation, guard.guard).send(user, options, eventListener(onEvent) { _, _ -> })
            turn.future().whenComplete { reply, error ->
                if (cont.isActive) {
                    if (error == null) cont.resume(reply)
                    else cont.resumeWithException(if (error is java.util.concurrent.CompletionException && error.cause != null) error.cause!! else error)
                }
            }
            cont.invokeOnCancellation { turn.cancel() }
        }

    /** Every message, oldest first (the system message included). */
    suspend fun messages(): List<Conversation.Message> = withContext(Dispatchers.IO) { conversation.messages() }

    /** The finished turns (user message and reply), oldest first. */
    suspend fun history(): List<Conversation.Turn> = withContext(Dispatchers.IO) { conversation.history() }

    suspend fun system(): String? = withContext(Dispatchers.IO) { conversation.system() }
    suspend fun setSystem(text: String?) = withContext(Dispatchers.IO) { conversation.setSystem(text) }

    /** Appends a message without generating (Conversation.ROLE_USER / ROLE_ASSISTANT). */
    suspend fun add(role: Int, text: String) = withContext(Dispatchers.IO) { conversation.add(role, text) }

    /** Removes the last message; false when there is none. */
    suspend fun pop(): Boolean = withContext(Dispatchers.IO) { conversation.pop() }

    /** Forgets every message but the system message. */
    suspend fun reset() = withContext(Dispatchers.IO) { conversation.reset() }

    /** The whole conversation (messages, context state, checkpoints) to a file, never half-written. */
    suspend fun save(path: String) = withContext(Dispatchers.IO) { conversation.save(path) }

    /** Replaces this conversation with a saved one (same model, KV type; a context that holds it). */
    suspend fun load(path: String) = withContext(Dispatchers.IO) { conversation.load(path) }

    suspend fun saveState(): ByteArray = withContext(Dispatchers.IO) { conversation.saveState() }
    suspend fun restoreState(image: ByteArray) = withContext(Dispatchers.IO) { conversation.restoreState(image) }

    /** Frees the conversation; the engine stays. */
    suspend fun close() = withContext(Dispatchers.IO) { conversation.close() }
}

/** Builds one reply's options: `replyOptions { maxTokens = 256; think = false; stop = arrayOf("\n\n") }` */
fun replyOptions(block: ReplyOptions.() -> Unit): ReplyOptions = ReplyOptions().apply(block)
