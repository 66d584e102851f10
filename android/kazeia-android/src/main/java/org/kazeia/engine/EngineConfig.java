package org.kazeia.engine;

/** How to load a model and size its context. Fields are public and mutable: fill, then pass to Engine.load. */
public final class EngineConfig {
    /** KV cache storage types (kz_kv_type) */
    public static final int KV_F32 = 0, KV_F16 = 1, KV_Q8_0 = 2;

    /** worker threads; 0 = the library's choice: the fast cores of a big.LITTLE CPU (see docs) */
    public int threads = 0;
    /** context capacity in tokens; 0 = min(training context, 4096) */
    public int nCtx = 0;
    /** prefill chunk; 0 = 512 */
    public int nBatch = 0;
    public int kvType = KV_F16;
    /** -1 = the library default (repack Q4_0 where a packed kernel exists), 0 = never, 1 = yes */
    public int repackWeights = -1;
    /** the sampling the context starts with */
    public Sampling sampling = new Sampling();

    public EngineConfig threads(int v) { threads = v; return this; }
    public EngineConfig nCtx(int v) { nCtx = v; return this; }
    public EngineConfig nBatch(int v) { nBatch = v; return this; }
    public EngineConfig kvType(int v) { kvType = v; return this; }
    public EngineConfig sampling(Sampling v) { sampling = v; return this; }
}
