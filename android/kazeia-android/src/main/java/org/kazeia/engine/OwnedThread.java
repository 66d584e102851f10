package org.kazeia.engine;

import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The one thread an Engine or a Guard owns: its native calls run there, in submission order,
 * so the owner may be called from any thread. The thread is a daemon named prefix + seq (one
 * sequence per owner class), made on the first task.
 */
final class OwnedThread {
    private final ExecutorService exec;
    private volatile Thread thread;

    OwnedThread(String prefix, AtomicInteger seq) {
        exec = new ThreadPoolExecutor(1, 1, 0, TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(), r -> {
            Thread t = new Thread(r, prefix + seq.incrementAndGet());
            t.setDaemon(true);
            thread = t;
            return t;
        });
    }

    /** whether the caller runs on this thread (a listener, a task) */
    boolean isCurrent() { return Thread.currentThread() == thread; }

    /** queues r and returns at once */
    void execute(Runnable r) { exec.execute(r); }

    /**
     * Runs fn on this thread and waits (from the thread itself: runs inline). An interrupted wait
     * throws CANCELLED with message interrupted; a task refused after shutdown throws INVALID_ARG
     * with message closed, or the RejectedExecutionException itself when closed is null.
     */
    <T> T call(Callable<T> fn, String interrupted, String closed) {
        if (isCurrent()) {
            try { return fn.call(); } catch (RuntimeException e) { throw e; } catch (Exception e) {
                throw new KazeiaException(KazeiaException.INTERNAL, e.toString());
            }
        }
        Future<T> f;
        try {
            f = exec.submit(fn);
        } catch (RejectedExecutionException e) {
            if (closed == null) throw e;
            throw new KazeiaException(KazeiaException.INVALID_ARG, closed);
        }
        return get(f, interrupted);
    }

    /**
     * The owner's first task (loading its model): runs init here and waits; when init throws,
     * queues undo (freeing what init made) as the last task, stops the thread without waiting
     * for it, and rethrows. interrupted: as call's.
     */
    void start(Runnable init, Runnable undo, String interrupted) {
        try {
            call(() -> { init.run(); return null; }, interrupted, null);
        } catch (RuntimeException e) {
            exec.submit(undo);
            exec.shutdown();
            throw e;
        }
    }

    /**
     * Queues last as the final task, stops the thread after it and waits for both (an interrupt
     * ends the wait, the flag set again); last's exception is rethrown.
     */
    void finish(Runnable last) {
        Future<?> f = exec.submit(last);
        exec.shutdown();
        try {
            f.get();
            exec.awaitTermination(1, TimeUnit.MINUTES);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } catch (ExecutionException e) {
            throw unwrap(e);
        }
    }

    /** f's value; an interrupted wait throws CANCELLED with message interrupted, f's error is rethrown */
    static <T> T get(Future<T> f, String interrupted) {
        try {
            return f.get();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new KazeiaException(KazeiaException.CANCELLED, interrupted);
        } catch (ExecutionException e) {
            throw unwrap(e);
        }
    }

    /** a task's error as thrown to the caller: KazeiaException as it is, other unchecked ones rethrown */
    static KazeiaException unwrap(ExecutionException e) {
        Throwable t = e.getCause();
        if (t instanceof KazeiaException) return (KazeiaException) t;
        if (t instanceof RuntimeException) throw (RuntimeException) t;
        if (t instanceof Error) throw (Error) t;
        return new KazeiaException(KazeiaException.INTERNAL, String.valueOf(t));
    }
}
