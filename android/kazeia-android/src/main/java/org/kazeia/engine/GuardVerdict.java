package org.kazeia.engine;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** One guard check's outcome (kz_guard_verdict). */
public final class GuardVerdict {
    public enum Label { SAFE, CONTROVERSIAL, UNSAFE }

    /** KZ_GUARD_CAT_* bits, in the order of CATEGORY_NAMES */
    public static final int CAT_VIOLENT = 1, CAT_ILLEGAL = 1 << 1, CAT_SEXUAL = 1 << 2, CAT_PII = 1 << 3,
            CAT_SELF_HARM = 1 << 4, CAT_UNETHICAL = 1 << 5, CAT_POLITICAL = 1 << 6, CAT_COPYRIGHT = 1 << 7,
            CAT_JAILBREAK = 1 << 8;

    /** the verdict (after the fallback for malformed guard output, see docs/guard.md) */
    public final Label label;
    /** probabilities of the three labels' first tokens after "Safety:" */
    public final float pSafe, pControversial, pUnsafe;
    /** CAT_* bits from the Categories line (0 = None) */
    public final int categories;
    /** response checks: TRUE "Refusal: Yes", FALSE "No"; null when not given */
    public final Boolean refusal;
    /** the label counts as unsafe under the policy */
    public final boolean unsafe;
    /** unsafe and the action is BLOCK */
    public final boolean blocked;
    /** the guard's output did not follow the grammar */
    public final boolean malformed;
    /** guard tokens evaluated by this check, and kept from the previous one */
    public final int nEval, nReused;
    public final double ms;
    /** the guard's output from "Safety:" on (cut), for logs */
    public final String text;

    GuardVerdict(double[] d, byte[] text) {
        int l = (int) d[0];
        label = l >= 0 && l < 3 ? Label.values()[l] : Label.UNSAFE;
        pSafe = (float) d[1];
        pControversial = (float) d[2];
        pUnsafe = (float) d[3];
        categories = (int) d[4];
        refusal = d[5] < 0 ? null : d[5] != 0;
        unsafe = d[6] != 0;
        blocked = d[7] != 0;
        malformed = d[8] != 0;
        nEval = (int) d[9];
        nReused = (int) d[10];
        ms = d[11];
        this.text = text != null ? new String(text, StandardCharsets.UTF_8) : "";
    }

    /** the categories' names as Qwen3Guard-Gen writes them ("Violent", "PII", ...) */
    public List<String> categoryNames() {
        List<String> out = new ArrayList<>();
        for (int i = 0; i < 9; i++)
            if ((categories & (1 << i)) != 0) out.add(Guard.categoryName(i));
        return Collections.unmodifiableList(out);
    }

    @Override public String toString() {
        return String.format(java.util.Locale.ROOT, "%s (p safe %.3f, controversial %.3f, unsafe %.3f)%s%s%s%s",
                label, pSafe, pControversial, pUnsafe, categories != 0 ? " " + categoryNames() : "",
                refusal != null ? " refusal " + refusal : "", blocked ? " blocked" : unsafe ? " unsafe" : "",
                malformed ? " malformed" : "");
    }
}
