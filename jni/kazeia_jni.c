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

static void throw_ctx(JNIEnv *env, kz_context *c) {
    const char *m = kz_context_error(c);
    throw_kz(env, kz_context_status(c), m && *m ? m : "the engine failed without a message");
}

/* a Java byte[] as a NUL-terminated C string (malloc'd); NULL array -> NULL with *ok = 1 */
static char *cstr(JNIEnv *env, jbyteArray a, int *ok) {
    *ok = 1;
    if (!a) return NULL;
    jsize n = (*env)->GetArrayLength(env, a);
    char *s = malloc((size_t)n + 1);
    if (!s) { *ok = 0; throw_kz(env, KZ_ERR_NOMEM, "out of memory copying a string"); return NULL; }
    (*env)->GetByteArrayRegion(env, a, 0, n, (jbyte *)s);
    s[n] = 0;
    if (memchr(s, 0, (size_t)n)) {
        free(s);
        *ok = 0;
        throw_kz(env, KZ_ERR_INVALID_ARG, "text contains a NUL character");
        return NULL;
    }
    return s;
}

#define MODEL(h) ((kz_model *)(uintptr_t)(h))
#define CTX(h) ((kz_context *)(uintptr_t)(h))
#define NEED(h, what) \
    if (!(h)) { throw_kz(env, KZ_ERR_INVALID_ARG, what " is closed"); return 0; }

JNI_FN(jbyteArray, version)(JNIEnv *env, jclass cls) {
    (void)cls;
    const char *v = kz_version();
    return bytes_new(env, v, strlen(v));
}

JNI_FN(jlong, modelLoad)(JNIEnv *env, jclass cls, jbyteArray path, jint n_threads, jint repack) {
    (void)cls;
    int ok;
    char *p = cstr(env, path, &ok);
    if (!ok) return 0;
    if (!p) { throw_kz(env, KZ_ERR_INVALID_ARG, "model path is null"); return 0; }
    kz_model_params mp = kz_model_default_params();
    mp.n_threads = n_threads;
    if (repack >= 0) mp.repack_weights = repack;
    char err[512];
    kz_status st = KZ_OK;
    kz_model *m = kz_model_load_ex(p, &mp, &st, err, sizeof err);
    free(p);
    if (!m) { throw_kz(env, st, err); return 0; }
    return (jlong)(uintptr_t)m;
}

JNI_FN(void, modelFree)(JNIEnv *env, jclass cls, jlong m) {
    (void)env, (void)cls;
    kz_model_free(MODEL(m));
}

/* model facts: 0 arch-independent ints; describe as bytes */
JNI_FN(jint, modelInfo)(JNIEnv *env, jclass cls, jlong m, jint what) {
    (void)cls;
    NEED(m, "model");
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
    NEED(m, "model");
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
    NEED(m, "model");
    jint i[7];
    jfloat f[6];
    if (!ip || !fp || (*env)->GetArrayLength(env, ip) != 7 || (*env)->GetArrayLength(env, fp) != 6) {
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
    return (jlong)(uintptr_t)c;
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
    NEED(c, "context");
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

/* Runs kz_generate_raw; stats out (7 doubles): n_prompt, n_reused, n_gen, t_prefill_ms,
 * t_decode_ms, stop, peak RSS MiB. Throws on an engine error (and rethrows the sink's). */
JNI_FN(jint, generate)(JNIEnv *env, jclass cls, jlong c, jbyteArray system, jbyteArray user, jint max_tokens,
                 jobject sink, jdoubleArray stats_out) {
    (void)cls;
    NEED(c, "context");
    if (!sink || !stats_out || (*env)->GetArrayLength(env, stats_out) < 7) {
        throw_kz(env, KZ_ERR_INVALID_ARG, "generate: null sink or short stats array");
        return 0;
    }
    int ok;
    char *sys = cstr(env, system, &ok);
    if (!ok) return 0;
    char *usr = cstr(env, user, &ok);
    if (!ok) { free(sys); return 0; }
    gen_ud ud = { env, sink };
    kz_stats st;
    int rc = kz_generate_raw(CTX(c), sys, usr ? usr : "", max_tokens, on_token, &ud, &st);
    free(sys);
    free(usr);
    double d[7] = { st.n_prompt, st.n_reused, st.n_gen, st.t_prefill_ms, st.t_decode_ms, (double)st.stop, peak_rss_mib() };
    if (!(*env)->ExceptionCheck(env)) (*env)->SetDoubleArrayRegion(env, stats_out, 0, 7, d);
    if (rc != 0) { throw_ctx(env, CTX(c)); return 0; }
    return (jint)st.n_gen;
}

JNI_FN(jintArray, tokenize)(JNIEnv *env, jclass cls, jlong m, jbyteArray text, jboolean special) {
    (void)cls;
    NEED(m, "model");
    int ok;
    char *s = cstr(env, text, &ok);
    if (!ok) return NULL;
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
    NEED(m, "model");
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
    NEED(m, "model");
    NEED(c, "context");
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
    NEED(c, "context");
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
    if (!c) { throw_kz(env, KZ_ERR_INVALID_ARG, "context is closed"); return; }
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
    if (!c) { throw_kz(env, KZ_ERR_INVALID_ARG, "context is closed"); return; }
    int ok;
    char *p = cstr(env, path, &ok);
    if (!ok) return;
    if (!p) { throw_kz(env, KZ_ERR_INVALID_ARG, "path is null"); return; }
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
