/* JNI layer of libkazeia_engine.so: org.kazeia.engine.NativeBridge's native methods over
 * include/kazeia.h. The Java side (Engine.java) calls every method but cancel() from one owned
 * thread per engine; cancel() is the one call made from any thread (kz_cancel is thread-safe).
 *
 * Text crosses the boundary as UTF-8 byte[] both ways, never through NewStringUTF /
 * GetStringUTFChars: those use modified UTF-8, and a token that ends inside a character (or a
 * 4-byte emoji, or ill-formed bytes a model can emit) makes CheckJNI abort the VM. Errors are
 * thrown as KazeiaException(int status, byte[] utf8Message) carrying the engine's message.
 * Handles are the C pointers as jlong; 0 is rejected with an exception, never dereferenced. */
#include <jni.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include "kazeia.h"
#include "sys/topology.h"

#define JNI_FN(ret, name) JNIEXPORT ret JNICALL Java_org_kazeia_engine_NativeBridge_##name

#define PKG "org/kazeia/engine/"

/* class and method ids, looked up once in JNI_OnLoad: written before any native method can run,
 * read-only afterwards (a process-wide fact, like the CPU features) */
static struct {
    jclass exc;        /* KazeiaException */
    jmethodID exc_ctor;/* (I[B)V */
    jmethodID on_token;/* TokenSink.onToken(I[B)Z */
} g_jni;

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
    (void)reserved;
    JNIEnv *env;
    if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
    jclass exc = (*env)->FindClass(env, PKG "KazeiaException");
    if (!exc) return JNI_ERR;
    g_jni.exc = (*env)->NewGlobalRef(env, exc);
    g_jni.exc_ctor = (*env)->GetMethodID(env, exc, "<init>", "(I[B)V");
    jclass sink = (*env)->FindClass(env, PKG "TokenSink");
    if (!g_jni.exc || !g_jni.exc_ctor || !sink) return JNI_ERR;
    g_jni.on_token = (*env)->GetMethodID(env, sink, "onToken", "(I[B)Z");
    if (!g_jni.on_token) return JNI_ERR;
    return JNI_VERSION_1_6;
}

static jbyteArray bytes_new(JNIEnv *env, const char *p, size_t n) {
    if (n > INT32_MAX) n = INT32_MAX;
    jbyteArray a = (*env)->NewByteArray(env, (jsize)n);
    if (a && n) (*env)->SetByteArrayRegion(env, a, 0, (jsize)n, (const jbyte *)p);
    return a;
}

/* throws KazeiaException(status, msg); a pending exception (out of memory) is left as it is */
static void throw_kz(JNIEnv *env, kz_status st, const char *msg) {
    if ((*env)->ExceptionCheck(env)) return;
    jbyteArray m = bytes_new(env, msg, strlen(msg));
    if (!m) return;
    jobject e = (*env)->NewObject(env, g_jni.exc, g_jni.exc_ctor, (jint)st, m);
    if (e) (*env)->Throw(env, (jthrowable)e);
}

/* an object's last error (kz_*_status / kz_*_error), with fallback when it left no message */
static void throw_err(JNIEnv *env, kz_status st, const char *msg, const char *fallback) {
    throw_kz(env, st, msg && *msg ? msg : fallback);
}

static void throw_ctx(JNIEnv *env, kz_context *c) {
    throw_err(env, kz_context_status(c), kz_context_error(c), "the engine failed without a message");
}

/* a *_new that reports only a message: out of memory is told apart by its text */
static void throw_new_failed(JNIEnv *env, const char *err) {
    throw_kz(env, strstr(err, "out of memory") ? KZ_ERR_NOMEM : KZ_ERR_INVALID_ARG, err);
}

/* 1 when handle h is open; 0 after throwing "<what> is closed" */
static int is_open(JNIEnv *env, jlong h, const char *what) {
    if (h) return 1;
    char m[64];
    snprintf(m, sizeof m, "%s is closed", what);
    throw_kz(env, KZ_ERR_INVALID_ARG, m);
    return 0;
}

/* an array's length, -1 for a null array (so one compare checks both) */
static jsize arr_len(JNIEnv *env, jarray a) { return a ? (*env)->GetArrayLength(env, a) : -1; }

/* a Java byte[] as a NUL-terminated C string (malloc'd) in *out; 1 on success, 0 after throwing.
 * A null array: *out = NULL, or the error if_null when that is given (the argument is required). */
static int cstr(JNIEnv *env, jbyteArray a, const char *if_null, char **out) {
    *out = NULL;
    if (!a) {
        if (!if_null) return 1;
        throw_kz(env, KZ_ERR_INVALID_ARG, if_null);
        return 0;
    }
    jsize n = (*env)->GetArrayLength(env, a);
    char *s = malloc((size_t)n + 1);
    if (!s) { throw_kz(env, KZ_ERR_NOMEM, "out of memory copying a string"); return 0; }
    (*env)->GetByteArrayRegion(env, a, 0, n, (jbyte *)s);
    s[n] = 0;
    if (memchr(s, 0, (size_t)n)) {
        free(s);
        throw_kz(env, KZ_ERR_INVALID_ARG, "text contains a NUL character");
        return 0;
    }
    *out = s;
    return 1;
}

#define MODEL(h) ((kz_model *)(uintptr_t)(h))
#define CTX(h) ((kz_context *)(uintptr_t)(h))
#define HANDLE(p) ((jlong)(uintptr_t)(p))

JNI_FN(jbyteArray, version)(JNIEnv *env, jclass cls) {
    (void)cls;
    const char *v = kz_version();
    return bytes_new(env, v, strlen(v));
}

JNI_FN(jlong, modelLoad)(JNIEnv *env, jclass cls, jbyteArray path, jint n_threads, jint repack) {
    (void)cls;
    char *p;
    if (!cstr(env, path, "model path is null", &p)) return 0;
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = n_threads;
    if (repack >= 0) mp.repack_weights = repack;
    char err[512];
    kz_status st = KZ_OK;
    kz_model *m = kz_model_load_ex(p, &mp, &st, err, sizeof err);
    free(p);
    if (!m) { throw_kz(env, st, err); return 0; }
    return HANDLE(m);
}

JNI_FN(void, modelFree)(JNIEnv *env, jclass cls, jlong m) {
    (void)env, (void)cls;
    kz_model_free(MODEL(m));
}

/* model facts: 0 arch-independent ints; describe as bytes */
JNI_FN(jint, modelInfo)(JNIEnv *env, jclass cls, jlong m, jint what) {
    (void)cls;
    if (!is_open(env, m, "model")) return 0;
    switch (what) {
    case 0: return kz_model_n_vocab(MODEL(m));
    case 1: return kz_model_n_ctx_train(MODEL(m));
    case 2: return kz_model_n_layer(MODEL(m));
    case 3: return kz_model_n_embd(MODEL(m));
    default: return -1;
    }
}

JNI_FN(jbyteArray, modelDescribe)(JNIEnv *env, jclass cls, jlong m) {
    (void)cls;
    if (!is_open(env, m, "model")) return NULL;
    char buf[1024];
    int n = kz_model_describe(MODEL(m), buf, sizeof buf);
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    return bytes_new(env, buf, (size_t)n);
}

/* ip: n_ctx, n_batch, n_threads, kv_type, top_k, repeat_last_n, think;
 * fp: temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty */
JNI_FN(jlong, contextNew)(JNIEnv *env, jclass cls, jlong m, jintArray ip, jfloatArray fp, jlong seed) {
    (void)cls;
    if (!is_open(env, m, "model")) return 0;
    jint i[7];
    jfloat f[6];
    if (arr_len(env, ip) != 7 || arr_len(env, fp) != 6) {
        throw_kz(env, KZ_ERR_INVALID_ARG, "contextNew: bad parameter arrays");
        return 0;
    }
    (*env)->GetIntArrayRegion(env, ip, 0, 7, i);
    (*env)->GetFloatArrayRegion(env, fp, 0, 6, f);
    kz_context_params p = kz_context_default_params();
    p.n_ctx = i[0];
    p.n_batch = i[1];
    p.n_threads = i[2];
    p.kv_type = (kz_kv_type)i[3];
    p.top_k = i[4];
    p.repeat_last_n = i[5];
    p.think = i[6];
    p.temperature = f[0];
    p.top_p = f[1];
    p.min_p = f[2];
    p.repeat_penalty = f[3];
    p.presence_penalty = f[4];
    p.frequency_penalty = f[5];
    p.seed = (uint64_t)seed;
    char err[512];
    kz_status st = KZ_OK;
    kz_context *c = kz_context_new_ex(MODEL(m), &p, &st, err, sizeof err);
    if (!c) { throw_kz(env, st, err); return 0; }
    /* this thread (the engine's own) runs thread 0 of every dispatch: keep it on the fast
     * cores like the pool's workers (best effort, a no-op on a homogeneous CPU) */
    kz_topology_pin_self();
    return HANDLE(c);
}

JNI_FN(void, contextFree)(JNIEnv *env, jclass cls, jlong c) {
    (void)env, (void)cls;
    kz_context_free(CTX(c));
}

JNI_FN(void, contextReset)(JNIEnv *env, jclass cls, jlong c) {
    (void)env, (void)cls;
    if (c) kz_context_reset(CTX(c));
}

/* 0 n_past, 1 n_ctx, 2 n_batch, 3 n_threads, 4 kv_type */
JNI_FN(jint, contextInfo)(JNIEnv *env, jclass cls, jlong c, jint what) {
    (void)cls;
    if (!is_open(env, c, "context")) return 0;
    switch (what) {
    case 0: return kz_context_n_past(CTX(c));
    case 1: return kz_context_n_ctx(CTX(c));
    case 2: return kz_context_n_batch(CTX(c));
    case 3: return kz_context_n_threads(CTX(c));
    case 4: return (jint)kz_context_kv_type(CTX(c));
    default: return -1;
    }
}

JNI_FN(void, cancel)(JNIEnv *env, jclass cls, jlong c) {
    (void)env, (void)cls;
    if (c) kz_cancel(CTX(c));
}

typedef struct {
    JNIEnv *env;
    jobject sink;
} gen_ud;

/* one token: its raw bytes to Java; stops on false or on a Java exception (rethrown) */
static int on_token(int32_t tok, const char *bytes, size_t len, void *ud_) {
    gen_ud *ud = ud_;
    JNIEnv *env = ud->env;
    jbyteArray a = bytes_new(env, bytes, len);
    if (!a) return 1;
    jboolean go = (*env)->CallBooleanMethod(env, ud->sink, g_jni.on_token, (jint)tok, a);
    (*env)->DeleteLocalRef(env, a);
    if ((*env)->ExceptionCheck(env)) return 1;
    return go ? 0 : 1;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux / Android: KiB */
}

/* a run's stats into out (7 doubles, checked by the caller), unless the sink threw */
static void stats_out(JNIEnv *env, const kz_stats *st, jdoubleArray out) {
    double d[7] = { st->n_prompt, st->n_reused, st->n_gen, st->t_prefill_ms, st->t_decode_ms, (double)st->stop, peak_rss_mib() };
    if (!(*env)->ExceptionCheck(env)) (*env)->SetDoubleArrayRegion(env, out, 0, 7, d);
}

/* Runs kz_generate_raw; stats out (7 doubles): n_prompt, n_reused, n_gen, t_prefill_ms,
 * t_decode_ms, stop, peak RSS MiB. Throws on an engine error (and rethrows the sink's). */
JNI_FN(jint, generate)(JNIEnv *env, jclass cls, jlong c, jbyteArray system, jbyteArray user, jint max_tokens,
                 jobject sink, jdoubleArray stats) {
    (void)cls;
    if (!is_open(env, c, "context")) return 0;
    if (!sink || arr_len(env, stats) < 7) {
        throw_kz(env, KZ_ERR_INVALID_ARG, "generate: null sink or short stats array");
        return 0;
    }
    char *sys, *usr;
    if (!cstr(env, system, NULL, &sys)) return 0;
    if (!cstr(env, user, NULL, &usr)) { free(sys); return 0; }
    gen_ud ud = { env, sink };
    kz_stats st;
    int rc = kz_generate_raw(CTX(c), sys, usr ? usr : "", max_tokens, on_token, &ud, &st);
    free(sys);
    free(usr);
    stats_out(env, &st, stats);
    if (rc != 0) { throw_ctx(env, CTX(c)); return 0; }
    return (jint)st.n_gen;
}

JNI_FN(jintArray, tokenize)(JNIEnv *env, jclass cls, jlong m, jbyteArray text, jboolean special) {
    (void)cls;
    char *s;
    if (!is_open(env, m, "model") || !cstr(env, text, NULL, &s)) return NULL;
    size_t len = s ? strlen(s) : 0;
    int n = kz_tokenize(MODEL(m), s ? s : "", len, special, NULL, 0);
    int32_t *t = n > 0 ? malloc((size_t)n * sizeof *t) : NULL;
    if (n < 0 || (n > 0 && !t) || (n > 0 && kz_tokenize(MODEL(m), s, len, special, t, n) != n)) {
        free(s);
        free(t);
        throw_kz(env, n < 0 ? KZ_ERR_INVALID_ARG : KZ_ERR_NOMEM, "tokenize failed");
        return NULL;
    }
    free(s);
    jintArray a = (*env)->NewIntArray(env, n);
    if (a && n) (*env)->SetIntArrayRegion(env, a, 0, n, (const jint *)t);
    free(t);
    return a;
}

JNI_FN(jbyteArray, tokenBytes)(JNIEnv *env, jclass cls, jlong m, jint tok) {
    (void)cls;
    if (!is_open(env, m, "model")) return NULL;
    char small[64];
    int n = kz_token_bytes(MODEL(m), tok, small, sizeof small);
    if (n < 0) { throw_kz(env, KZ_ERR_INVALID_ARG, "token id outside the vocab"); return NULL; }
    if ((size_t)n <= sizeof small) return bytes_new(env, small, (size_t)n);
    char *b = malloc((size_t)n);
    if (!b) { throw_kz(env, KZ_ERR_NOMEM, "out of memory"); return NULL; }
    kz_token_bytes(MODEL(m), tok, b, (size_t)n);
    jbyteArray a = bytes_new(env, b, (size_t)n);
    free(b);
    return a;
}

/* appends tokens to the sequence; returns the last token's logits (n_vocab floats of model m) */
JNI_FN(jfloatArray, eval)(JNIEnv *env, jclass cls, jlong m, jlong c, jintArray tokens) {
    (void)cls;
    if (!is_open(env, m, "model") || !is_open(env, c, "context")) return NULL;
    if (!tokens) { throw_kz(env, KZ_ERR_INVALID_ARG, "eval: null tokens"); return NULL; }
    jsize n = (*env)->GetArrayLength(env, tokens);
    int32_t *t = malloc((size_t)(n ? n : 1) * sizeof *t);
    if (!t) { throw_kz(env, KZ_ERR_NOMEM, "out of memory"); return NULL; }
    (*env)->GetIntArrayRegion(env, tokens, 0, n, (jint *)t);
    int rc = kz_eval(CTX(c), t, n, NULL, 0);
    free(t);
    if (rc != 0) { throw_ctx(env, CTX(c)); return NULL; }
    const float *lg = kz_logits(CTX(c));
    if (!lg) return NULL;
    jsize nv = kz_model_n_vocab(MODEL(m));
    jfloatArray a = (*env)->NewFloatArray(env, nv);
    if (a) (*env)->SetFloatArrayRegion(env, a, 0, nv, lg);
    return a;
}

JNI_FN(jbyteArray, stateSave)(JNIEnv *env, jclass cls, jlong c) {
    (void)cls;
    if (!is_open(env, c, "context")) return NULL;
    size_t n = kz_state_size(CTX(c));
    void *b = n ? malloc(n) : NULL;
    if (!b) { throw_ctx(env, CTX(c)); if (!(*env)->ExceptionCheck(env)) throw_kz(env, KZ_ERR_NOMEM, "out of memory for the state"); return NULL; }
    size_t w = kz_state_save(CTX(c), b, n);
    if (w == 0) { free(b); throw_ctx(env, CTX(c)); return NULL; }
    jbyteArray a = bytes_new(env, b, w);
    free(b);
    return a;
}

JNI_FN(void, stateLoad)(JNIEnv *env, jclass cls, jlong c, jbyteArray img) {
    (void)cls;
    if (!is_open(env, c, "context")) return;
    if (!img) { throw_kz(env, KZ_ERR_INVALID_ARG, "state image is null"); return; }
    jsize n = (*env)->GetArrayLength(env, img);
    jbyte *b = (*env)->GetByteArrayElements(env, img, NULL);
    if (!b) return;
    int rc = kz_state_load(CTX(c), b, (size_t)n);
    (*env)->ReleaseByteArrayElements(env, img, b, JNI_ABORT);
    if (rc != 0) throw_ctx(env, CTX(c));
}

/* stateSaveFile / stateLoadFile: one path argument, one kz_state_*_file call */
static void state_file(JNIEnv *env, jlong c, jbyteArray path, int (*fn)(kz_context *, const char *)) {
    char *p;
    if (!is_open(env, c, "context") || !cstr(env, path, "path is null", &p)) return;
    int rc = fn(CTX(c), p);
    free(p);
    if (rc != 0) throw_ctx(env, CTX(c));
}

JNI_FN(void, stateSaveFile)(JNIEnv *env, jclass cls, jlong c, jbyteArray path) {
    (void)cls;
    state_file(env, c, path, kz_state_save_file);
}

JNI_FN(void, stateLoadFile)(JNIEnv *env, jclass cls, jlong c, jbyteArray path) {
    (void)cls;
    state_file(env, c, path, kz_state_load_file);
}

/* threads the library picks by default on this device (the fast cores), and how many CPUs
 * it considers fast / online: for the app's settings screen */
JNI_FN(jint, defaultThreads)(JNIEnv *env, jclass cls) {
    (void)env, (void)cls;
    return kz_default_threads();
}

/* ---- conversations (kz_chat_*) ----
 * A conversation streams kz_chat_reply's pieces: text already cut at code points (ill-formed
 * bytes as U+FFFD), stop strings held back. They reach Java as byte[] like generate's tokens
 * (the sink gets id -1: a piece is not one token) and the Java side decodes them the same way. */
#define CHAT(h) ((kz_chat *)(uintptr_t)(h))

static void throw_chat(JNIEnv *env, kz_chat *h) {
    throw_err(env, kz_chat_status(h), kz_chat_error(h), "the conversation failed without a message");
}

JNI_FN(jlong, chatNew)(JNIEnv *env, jclass cls, jlong c, jint think, jint max_checkpoints) {
    (void)cls;
    if (!is_open(env, c, "context")) return 0;
    kz_chat_params p = kz_chat_default_params();
    p.think = think;
    p.max_checkpoints = max_checkpoints;
    char err[512];
    kz_chat *h = kz_chat_new(CTX(c), &p, err, sizeof err);
    if (!h) { throw_new_failed(env, err); return 0; }
    return HANDLE(h);
}

JNI_FN(void, chatFree)(JNIEnv *env, jclass cls, jlong h) {
    (void)env, (void)cls;
    kz_chat_free(CHAT(h));
}

/* role: 0 system, 1 user, 2 assistant; set_system: replaces the system message (null/"" removes) */
JNI_FN(void, chatAdd)(JNIEnv *env, jclass cls, jlong h, jint role, jbyteArray text, jboolean set_system) {
    (void)cls;
    char *s;
    if (!is_open(env, h, "conversation") || !cstr(env, text, NULL, &s)) return;
    int rc = set_system ? kz_chat_set_system(CHAT(h), s) : kz_chat_add(CHAT(h), (kz_role)role, s ? s : "");
    free(s);
    if (rc != 0) throw_chat(env, CHAT(h));
}

JNI_FN(jboolean, chatPop)(JNIEnv *env, jclass cls, jlong h) {
    (void)env, (void)cls;
    return h && kz_chat_n_messages(CHAT(h)) > 0 && kz_chat_pop(CHAT(h)) == 0;
}

JNI_FN(void, chatReset)(JNIEnv *env, jclass cls, jlong h) {
    (void)env, (void)cls;
    if (h) kz_chat_reset(CHAT(h));
}

/* 0 n_messages, 1 n_checkpoints, 2 bytes held beyond the context */
JNI_FN(jlong, chatInfo)(JNIEnv *env, jclass cls, jlong h, jint what) {
    (void)cls;
    if (!is_open(env, h, "conversation")) return 0;
    switch (what) {
    case 0: return kz_chat_n_messages(CHAT(h));
    case 1: return kz_chat_n_checkpoints(CHAT(h));
    case 2: return (jlong)kz_chat_memory(CHAT(h));
    default: return -1;
    }
}

JNI_FN(jint, chatMessageRole)(JNIEnv *env, jclass cls, jlong h, jint i) {
    (void)cls;
    if (!is_open(env, h, "conversation")) return 0;
    return kz_chat_message_role(CHAT(h), i);
}

JNI_FN(jbyteArray, chatMessageText)(JNIEnv *env, jclass cls, jlong h, jint i) {
    (void)cls;
    if (!is_open(env, h, "conversation")) return NULL;
    const char *t = kz_chat_message_text(CHAT(h), i);
    if (!t) { throw_kz(env, KZ_ERR_INVALID_ARG, "message index out of range"); return NULL; }
    return bytes_new(env, t, strlen(t));
}

static int on_piece(const char *piece, size_t len, void *ud) { return on_token(-1, piece, len, ud); }

static void free_strs(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

/* a Java byte[][] as n C strings (malloc'd); NULL array -> NULL, *n 0; 0 or -1 (exception thrown) */
static int cstrs(JNIEnv *env, jobjectArray a, char ***out, int *n) {
    *out = NULL;
    *n = 0;
    if (!a) return 0;
    jsize k = (*env)->GetArrayLength(env, a);
    char **v = calloc((size_t)(k ? k : 1), sizeof *v);
    if (!v) { throw_kz(env, KZ_ERR_NOMEM, "out of memory copying strings"); return -1; }
    for (jsize i = 0; i < k; i++) {
        jbyteArray e = (jbyteArray)(*env)->GetObjectArrayElement(env, a, i);
        int ok = cstr(env, e, "a string in the array is null", &v[i]);
        if (e) (*env)->DeleteLocalRef(env, e);
        if (!ok) {
            free_strs(v, (int)i + 1);
            return -1;
        }
    }
    *out = v;
    *n = (int)k;
    return 0;
}

/* One reply (kz_chat_reply). ip: max_tokens, think (0/1), top_k, repeat_last_n, model defaults
 * (1: kz_gen_default_params(model, think), fp and seed ignored); fp: temperature, top_p, min_p,
 * repeat_penalty, presence_penalty, frequency_penalty; stop: byte[][] or null. Stats as generate. */
JNI_FN(jint, chatReply)(JNIEnv *env, jclass cls, jlong m, jlong h, jintArray ip, jfloatArray fp, jlong seed,
                        jobjectArray stop, jobject sink, jdoubleArray stats) {
    (void)cls;
    if (!is_open(env, m, "model") || !is_open(env, h, "conversation")) return 0;
    jint i[5];
    jfloat f[6];
    if (!sink || arr_len(env, ip) != 5 || arr_len(env, fp) != 6 || arr_len(env, stats) < 7) {
        throw_kz(env, KZ_ERR_INVALID_ARG, "chatReply: bad parameter arrays");
        return 0;
    }
    (*env)->GetIntArrayRegion(env, ip, 0, 5, i);
    (*env)->GetFloatArrayRegion(env, fp, 0, 6, f);
    kz_gen_params g = kz_gen_default_params(MODEL(m), i[1] != 0);
    g.max_tokens = i[0];
    g.think = i[1] != 0;
    if (!i[4]) {
        g.top_k = i[2];
        g.repeat_last_n = i[3];
        g.temperature = f[0];
        g.top_p = f[1];
        g.min_p = f[2];
        g.repeat_penalty = f[3];
        g.presence_penalty = f[4];
        g.frequency_penalty = f[5];
        g.seed = (uint64_t)seed;
    }
    char **sv;
    int ns;
    if (cstrs(env, stop, &sv, &ns) != 0) return 0;
    g.stop = (const char *const *)sv;
    g.n_stop = ns;
    gen_ud ud = { env, sink };
    kz_stats st;
    int rc = kz_chat_reply(CHAT(h), &g, on_piece, &ud, &st);
    free_strs(sv, ns);
    stats_out(env, &st, stats);
    if (rc != 0) { throw_chat(env, CHAT(h)); return 0; }
    return (jint)st.n_gen;
}

JNI_FN(void, chatSaveFile)(JNIEnv *env, jclass cls, jlong h, jbyteArray path, jboolean load) {
    (void)cls;
    char *p;
    if (!is_open(env, h, "conversation") || !cstr(env, path, "path is null", &p)) return;
    int rc = load ? kz_chat_load(CHAT(h), p) : kz_chat_save(CHAT(h), p);
    free(p);
    if (rc != 0) throw_chat(env, CHAT(h));
}

/* ---- guard verdicts (kz_guard_*) ----
 * A verdict crosses as 12 doubles (label, p_safe, p_controversial, p_unsafe, categories,
 * refusal, unsafe, blocked, malformed, n_eval, n_reused, t_ms) + its text as the return value. */
#define GUARD(h) ((kz_guard *)(uintptr_t)(h))

static void throw_guard(JNIEnv *env, kz_guard *g) {
    throw_err(env, kz_guard_status(g), kz_guard_error(g), "the guard failed without a message");
}

/* ip: policy, action, check_every, max_verdict_tokens, n_ctx, n_threads, kv_type */
JNI_FN(jlong, guardNew)(JNIEnv *env, jclass cls, jlong m, jintArray ip) {
    (void)cls;
    if (!is_open(env, m, "model")) return 0;
    jint i[7];
    if (arr_len(env, ip) != 7) {
        throw_kz(env, KZ_ERR_INVALID_ARG, "guardNew: bad parameter array");
        return 0;
    }
    (*env)->GetIntArrayRegion(env, ip, 0, 7, i);
    kz_guard_params p = kz_guard_default_params();
    p.policy = (kz_guard_policy)i[0];
    p.action = (kz_guard_action)i[1];
    p.check_every = i[2];
    p.max_verdict_tokens = i[3];
    p.n_ctx = i[4];
    p.n_threads = i[5];
    p.kv_type = (kz_kv_type)i[6];
    char err[512];
    kz_guard *g = kz_guard_new(MODEL(m), &p, err, sizeof err);
    if (!g) { throw_new_failed(env, err); return 0; }
    kz_topology_pin_self();
    return HANDLE(g);
}

JNI_FN(void, guardFree)(JNIEnv *env, jclass cls, jlong g) {
    (void)env, (void)cls;
    kz_guard_free(GUARD(g));
}

JNI_FN(jbyteArray, guardCategoryName)(JNIEnv *env, jclass cls, jint i) {
    (void)cls;
    const char *n = kz_guard_category_name(i);
    return n ? bytes_new(env, n, strlen(n)) : NULL;
}

/* rc of a kz_guard_* check: -1 throws the guard's message (the verdict is blocked anyway: a
 * caller that catches and goes on must fail closed), else the verdict out and its text */
static jbyteArray verdict_out(JNIEnv *env, kz_guard *g, int rc, const kz_guard_verdict *v, jdoubleArray out) {
    if (rc < 0) { throw_guard(env, g); return NULL; }
    double d[12] = { v->label, v->p_safe, v->p_controversial, v->p_unsafe, v->categories, v->refusal,
                     v->unsafe, v->blocked, v->malformed, v->n_eval, v->n_reused, v->t_ms };
    (*env)->SetDoubleArrayRegion(env, out, 0, 12, d);
    size_t n = strnlen(v->text, sizeof v->text);
    return bytes_new(env, v->text, n);
}

/* the checks' prologue: guard g open and out long enough for a verdict; 0 after throwing */
static int guard_ready(JNIEnv *env, jlong g, jdoubleArray out) {
    if (!is_open(env, g, "guard")) return 0;
    if (arr_len(env, out) >= 12) return 1;
    throw_kz(env, KZ_ERR_INVALID_ARG, "guard: short verdict array");
    return 0;
}

JNI_FN(jbyteArray, guardCheckPrompt)(JNIEnv *env, jclass cls, jlong g, jbyteArray user, jdoubleArray out) {
    (void)cls;
    char *u;
    if (!guard_ready(env, g, out) || !cstr(env, user, NULL, &u)) return NULL;
    kz_guard_verdict v;
    memset(&v, 0, sizeof v);
    int rc = kz_guard_check_prompt(GUARD(g), u ? u : "", &v);
    free(u);
    return verdict_out(env, GUARD(g), rc, &v, out);
}

/* roles / contents: byte[][] of the same length */
JNI_FN(jbyteArray, guardCheckMessages)(JNIEnv *env, jclass cls, jlong g, jobjectArray roles, jobjectArray contents,
                                       jdoubleArray out) {
    (void)cls;
    if (!guard_ready(env, g, out)) return NULL;
    char **r, **c;
    int nr, nc;
    if (cstrs(env, roles, &r, &nr) != 0) return NULL;
    if (cstrs(env, contents, &c, &nc) != 0) { free_strs(r, nr); return NULL; }
    if (nr != nc || nr == 0) {
        free_strs(r, nr);
        free_strs(c, nc);
        throw_kz(env, KZ_ERR_INVALID_ARG, "guard: roles and contents must be non-empty and of the same length");
        return NULL;
    }
    kz_guard_verdict v;
    memset(&v, 0, sizeof v);
    int rc = kz_guard_check_messages(GUARD(g), (const char *const *)r, (const char *const *)c, nr, &v);
    free_strs(r, nr);
    free_strs(c, nc);
    return verdict_out(env, GUARD(g), rc, &v, out);
}

JNI_FN(void, guardResponseBegin)(JNIEnv *env, jclass cls, jlong g, jbyteArray user) {
    (void)cls;
    char *u;
    if (!is_open(env, g, "guard") || !cstr(env, user, NULL, &u)) return;
    int rc = kz_guard_response_begin(GUARD(g), u ? u : "");
    free(u);
    if (rc != 0) throw_guard(env, GUARD(g));
}

/* one piece of the answer: the verdict's text when a check ran, null when only buffered */
JNI_FN(jbyteArray, guardResponseFeed)(JNIEnv *env, jclass cls, jlong g, jbyteArray piece, jdoubleArray out) {
    (void)cls;
    if (!guard_ready(env, g, out)) return NULL;
    if (!piece) { throw_kz(env, KZ_ERR_INVALID_ARG, "guard: null piece"); return NULL; }
    jsize n = (*env)->GetArrayLength(env, piece);
    char *b = malloc((size_t)n + 1);
    if (!b) { throw_kz(env, KZ_ERR_NOMEM, "out of memory"); return NULL; }
    (*env)->GetByteArrayRegion(env, piece, 0, n, (jbyte *)b);
    kz_guard_verdict v;
    memset(&v, 0, sizeof v);
    int rc = kz_guard_response_feed(GUARD(g), b, (size_t)n, &v);
    free(b);
    if (rc == 0) return NULL;
    return verdict_out(env, GUARD(g), rc, &v, out);
}

JNI_FN(jbyteArray, guardResponseEnd)(JNIEnv *env, jclass cls, jlong g, jdoubleArray out) {
    (void)cls;
    if (!guard_ready(env, g, out)) return NULL;
    kz_guard_verdict v;
    memset(&v, 0, sizeof v);
    int rc = kz_guard_response_end(GUARD(g), &v);
    return verdict_out(env, GUARD(g), rc, &v, out);
}
