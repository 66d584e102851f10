package org.kazeia.engine

import kotlinx.coroutines.Dispatchers
import kotlinx.coroutines.withContext

/**
 * A guard model (Qwen3Guard-Gen) and its verdicts (Guard, kz_guard_*), on its own model and owned
 * thread. Checks suspend until the verdict is in (a check is not cancellable: it is one prompt's
 * evaluation). Errors are KazeiaException with the engine's message; treat the text as blocked.
 * For a conversation turn moderated before and after, see KazeiaConversation.sendGuarded.
 */
class KazeiaGuard private constructor(val guard: Guard) {
    companion object {
        suspend fun load(path: String, config: GuardConfig = GuardConfig()): KazeiaGuard =
            withContext(Dispatchers.IO) { KazeiaGuard(Guard.load(path, config)) }
    }

    /** Prompt moderation of one user message. */
    suspend fun checkPrompt(user: String): GuardVerdict = withContext(Dispatchers.IO) { guard.checkPrompt(user) }

    /** Response moderation of answer given to user. */
    suspend fun checkResponse(user: String, answer: String): GuardVerdict =
        withContext(Dispatchers.IO) { guard.checkResponse(user, answer) }

    /** A conversation's moderation: roles "system" / "user" / "assistant"; the last role picks the task. */
    suspend fun checkMessages(roles: List<String>, contents: List<String>): GuardVerdict =
        withContext(Dispatchers.IO) { guard.checkMessages(roles.toTypedArray(), contents.toTypedArray()) }

    suspend fun close() = withContext(Dispatchers.IO) { guard.close() }
    fun closeBlocking() = guard.close()
}

/** Builds a GuardConfig: `guardConfig { policy = GuardConfig.LOOSE; checkEvery = 16 }` */
fun guardConfig(block: GuardConfig.() -> Unit): GuardConfig = GuardConfig().apply(block)
