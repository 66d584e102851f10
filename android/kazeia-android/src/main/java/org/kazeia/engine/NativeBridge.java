package org.kazeia.engine;

/**
 * The native methods of libkazeia_engine.so (jni/kazeia_jni.c), one per C call. Handles are
 * the C pointers; text goes both ways as UTF-8 byte arrays (never JNI's modified UTF-8).
 * Engine is the only caller: it runs every method but {@link #cancel} on its own thread.
 */
final class NativeBridge {
    private NativeBridge() {}

    static {
        // tests and desktop use: -Dkazeia.library=/path/libkazeia_engine.so; Android: the APK's lib/
        String path = System.getProperty("kazeia.library");
        if (path != null && !path.isEmpty()) System.load(path);
        else System.loadLibrary("kazeia_engine");
    }

    static native byte[] version();
    static native long modelLoad(byte[] path, int nThreads, int repack);
    static native void modelFree(long model);
    static native int modelInfo(long model, int what);
    static native byte[] modelDescribe(long model);
    /** ip: nCtx, nBatch, nThreads, kvType, topK, repeatLastN, think; fp: temperature, topP, minP, repeatPenalty, presence, frequency */
    static native long contextNew(long model, int[] ip, float[] fp, long seed);
    static native void contextFree(long ctx);
    static native void contextReset(long ctx);
    static native int contextInfo(long ctx, int what);
    static native void cancel(long ctx);
    /** stats: nPrompt, nReused, nGen, prefillMs, decodeMs, stop, peakRssMiB */
    static native int generate(long ctx, byte[] system, byte[] user, int maxTokens, TokenSink sink, double[] stats);
    static native int[] tokenize(long model, byte[] text, boolean parseSpecial);
    static native byte[] tokenBytes(long model, int token);
    static native float[] eval(long model, long ctx, int[] tokens);
    static native byte[] stateSave(long ctx);
    static native void stateLoad(long ctx, byte[] image);
    static native void stateSaveFile(long ctx, byte[] path);
    static native void stateLoadFile(long ctx, byte[] path);
    static native int defaultThreads();

    // conversations (kz_chat_*): a chat lives on a context of the same engine
    static native long chatNew(long ctx, int think, int maxCheckpoints);
    static native void chatFree(long chat);
    /** role 0 system, 1 user, 2 assistant; setSystem: kz_chat_set_system (null or empty removes) */
    static native void chatAdd(long chat, int role, byte[] text, boolean setSystem);
    static native boolean chatPop(long chat);
    static native void chatReset(long chat);
    /** 0 messages, 1 checkpoints, 2 bytes held beyond the context */
    static native long chatInfo(long chat, int what);
    static native int chatMessageRole(long chat, int i);
    static native byte[] chatMessageText(long chat, int i);
    /** ip: maxTokens, think, topK, repeatLastN, modelDefaults; fp as contextNew's; stop: UTF-8 strings or null; stats as generate */
    static native int chatReply(long model, long chat, int[] ip, float[] fp, long seed, byte[][] stop, TokenSink sink, double[] stats);
    static native void chatSaveFile(long chat, byte[] path, boolean load);

    // guard verdicts (kz_guard_*): verdict = 12 doubles (label, pSafe, pControversial, pUnsafe,
    // categories, refusal, unsafe, blocked, malformed, nEval, nReused, ms), its text returned
    /** ip: policy, action, checkEvery, maxVerdictTokens, nCtx, nThreads, kvType */
    static native long guardNew(long model, int[] ip);
    static native void guardFree(long guard);
    static native byte[] guardCategoryName(int i);
    static native byte[] guardCheckPrompt(long guard, byte[] user, double[] verdict);
    static native byte[] guardCheckMessages(long guard, byte[][] roles, byte[][] contents, double[] verdict);
    static native void guardResponseBegin(long guard, byte[] user);
    /** null when the piece was only buffered (no check ran) */
    static native byte[] guardResponseFeed(long guard, byte[] piece, double[] verdict);
    static native byte[] guardResponseEnd(long guard, double[] verdict);
}
