package org.kazeia.engine

import kotlinx.coroutines.channels.Channel
import kotlinx.coroutines.channels.awaitClose
import kotlinx.coroutines.flow.Flow
import kotlinx.coroutines.flow.buffer
import kotlinx.coroutines.flow.callbackFlow

/**
 * Streams an answer: Token events, then one Stats. Cold: each collection runs one generation
 * (queued behind any running one); cancelling the collector cancels it (kz_cancel). sampling null
 * keeps the current parameters. Needs kotlinx-coroutines 1.5+ (callbackFlow, trySend).
 */
fun KazeiaEngine.generate(system: String?, user: String, maxTokens: Int = 512, sampling: Sampling? = null): Flow<GenerationEvent> =
    eventFlow { listener -> engine.generate(system, user, maxTokens, sampling, listener) }

/** The reply to user as a Flow (see KazeiaConversation.sendTo); the turn is recorded at the end. */
fun KazeiaConversation.send(user: String, options: ReplyOptions = ReplyOptions()): Flow<GenerationEvent> =
    eventFlow { listener -> conversation.send(user, options, listener) }

/**
 * A Flow over one Generation: the listener sends into an unlimited channel (the engine thread
 * never blocks on a slow collector); the collector's cancellation cancels the generation.
 */
internal fun eventFlow(start: (GenerationListener) -> Generation): Flow<GenerationEvent> = callbackFlow<GenerationEvent> {
    val generation = start(eventListener({ ev -> trySend(ev) }) { _, error -> close(error) })
    awaitClose { generation.cancel() }
}.buffer(Channel.UNLIMITED)
