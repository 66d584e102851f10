package org.kazeia.engine;

/** How to load a guard model and run its checks (kz_guard_params). Fill, then pass to Guard.load. */
public final class GuardConfig {
    /** policy: Controversial counts as Unsafe (STRICT, default) or as Safe (LOOSE) */
    public static final int STRICT = 0, LOOSE = 1;
    /** action on an unsafe verdict: BLOCK (default: blocked = true, a cascade stops) or FLAG (report only) */
    public static final int BLOCK = 0, FLAG = 1;

    public int policy = STRICT;
    public int action = BLOCK;
    /** response checks: one every N pieces of the answer, and one at the end; 0 = only at the end */
    public int checkEvery = 32;
    /** tokens generated for the Categories / Refusal lines (greedy); 0 = the label alone */
    public int maxVerdictTokens = 24;
    /** the guard's context (prompt + answer + ~420 template tokens); 0 = 4096 */
    public int nCtx = 0;
    /** 0 = the library's choice (the fast cores) */
    public int threads = 0;
    public int kvType = EngineConfig.KV_F16;

    public GuardConfig policy(int v) { policy = v; return this; }
    public GuardConfig action(int v) { action = v; return this; }
    public GuardConfig checkEvery(int v) { checkEvery = v; return this; }
    public GuardConfig maxVerdictTokens(int v) { maxVerdictTokens = v; return this; }
    public GuardConfig nCtx(int v) { nCtx = v; return this; }
    public GuardConfig threads(int v) { threads = v; return this; }
}
