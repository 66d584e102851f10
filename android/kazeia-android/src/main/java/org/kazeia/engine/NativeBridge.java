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
}
