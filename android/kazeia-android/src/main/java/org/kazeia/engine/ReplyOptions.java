package org.kazeia.engine;

/**
 * One conversation reply's settings (kz_gen_params): fill, then pass to Conversation.send. Each
 * reply may have its own; nothing is recreated between replies.
 */
public final class ReplyOptions {
    /** tokens at most; <= 0: until the end of the turn or a full context */
    public int maxTokens = 0;
    /** thinking for this reply: null = the conversation's setting */
    public Boolean think = null;
    /** null = the model card's recommendation for the architecture and thinking mode
     *  (kz_gen_default_params: Qwen3.5 non-thinking T 0.7, top-p 0.8, top-k 20, presence 1.5, ...) */
    public Sampling sampling = null;
    /** the reply ends before the first of these (not streamed, not kept); null or empty: none */
    public String[] stop = null;

    public ReplyOptions maxTokens(int v) { maxTokens = v; return this; }
    public ReplyOptions think(Boolean v) { think = v; return this; }
    public ReplyOptions sampling(Sampling v) { sampling = v; return this; }
    public ReplyOptions stop(String... v) { stop = v; return this; }

    ReplyOptions copy() {
        ReplyOptions o = new ReplyOptions();
        o.maxTokens = maxTokens;
        o.think = think;
        o.sampling = sampling != null ? sampling.copy() : null;
        o.stop = stop != null ? stop.clone() : null;
        return o;
    }
}
