package org.kazeia.engine;

/** The outcome of one generation (kz_stats), with speeds and the process's peak RSS. */
public final class GenerationStats {
    public enum StopReason { EOG, MAX_TOKENS, CANCELLED, CTX_FULL, ERROR }

    public final int promptTokens;      // evaluated in prefill
    public final int reusedTokens;      // kept from the previous call / the system-prompt snapshot
    public final int generatedTokens;   // sampled, the final end-of-turn included
    public final double prefillMs, decodeMs;
    public final double peakRssMiB;     // process-wide high-water mark (getrusage)
    public final StopReason stopReason;

    GenerationStats(double[] s) {
        promptTokens = (int) s[0];
        reusedTokens = (int) s[1];
        generatedTokens = (int) s[2];
        prefillMs = s[3];
        decodeMs = s[4];
        int st = (int) s[5];
        stopReason = st >= 0 && st < StopReason.values().length ? StopReason.values()[st] : StopReason.ERROR;
        peakRssMiB = s[6];
    }

    public double prefillTokensPerSecond() { return prefillMs > 0 ? promptTokens * 1000.0 / prefillMs : 0; }
    /** tokens evaluated after the first sampled one, over the decode time */
    public double decodeTokensPerSecond() { return decodeMs > 0 && generatedTokens > 1 ? (generatedTokens - 1) * 1000.0 / decodeMs : 0; }

    @Override public String toString() {
        return String.format(java.util.Locale.ROOT, "prompt %d (+%d reused) at %.1f tok/s, %d generated at %.1f tok/s, peak RSS %.0f MiB, stop %s",
                promptTokens, reusedTokens, prefillTokensPerSecond(), generatedTokens, decodeTokensPerSecond(), peakRssMiB, stopReason);
    }
}
