package org.kazeia.engine;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/** A queued or running generation: cancel it, or wait for its stats. */
public final class Generation {
    final CompletableFuture<GenerationStats> result = new CompletableFuture<>();
    volatile boolean cancelled;
    private final Engine engine;

    Generation(Engine engine) { this.engine = engine; }

    /** Stops it soon (inside a prefill chunk, or at the next token); a queued one never starts.
     *  Thread-safe, returns at once; the stats then say CANCELLED. */
    public void cancel() { engine.cancelGeneration(this); }

    public boolean isDone() { return result.isDone(); }

    /** Waits for the end; the engine's error is rethrown as KazeiaException. */
    public GenerationStats await() { return OwnedThread.get(result, "interrupted while waiting for the generation"); }

    public GenerationStats await(long timeout, TimeUnit unit) throws TimeoutException {
        try {
            return result.get(timeout, unit);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new KazeiaException(KazeiaException.CANCELLED, "interrupted while waiting for the generation");
        } catch (ExecutionException e) {
            throw OwnedThread.unwrap(e);
        }
    }

    /** for Kotlin / callers that compose futures */
    public CompletableFuture<GenerationStats> future() { return result; }
}
