package org.kazeia.engine;

/** Sampling parameters (kz_context_params): greedy by default (temperature 0). */
public final class Sampling {
    public float temperature = 0f;
    public int topK = 40;
    public float topP = 0.95f;
    public float minP = 0.05f;
    public float repeatPenalty = 1f;
    public int repeatLastN = 64;
    public float presencePenalty = 0f;
    public float frequencyPenalty = 0f;
    public long seed = 0;
    /** thinking block on (the model's default) or the empty one */
    public boolean think = true;

    public Sampling temperature(float v) { temperature = v; return this; }
    public Sampling topK(int v) { topK = v; return this; }
    public Sampling topP(float v) { topP = v; return this; }
    public Sampling minP(float v) { minP = v; return this; }
    public Sampling seed(long v) { seed = v; return this; }
    public Sampling think(boolean v) { think = v; return this; }

    Sampling copy() {
        Sampling s = new Sampling();
        s.temperature = temperature; s.topK = topK; s.topP = topP; s.minP = minP;
        s.repeatPenalty = repeatPenalty; s.repeatLastN = repeatLastN;
        s.presencePenalty = presencePenalty; s.frequencyPenalty = frequencyPenalty;
        s.seed = seed; s.think = think;
        return s;
    }

    boolean sameAs(Sampling o) {
        return o != null && temperature == o.temperature && topK == o.topK && topP == o.topP && minP == o.minP
                && repeatPenalty == o.repeatPenalty && repeatLastN == o.repeatLastN
                && presencePenalty == o.presencePenalty && frequencyPenalty == o.frequencyPenalty
                && seed == o.seed && think == o.think;
    }
}
