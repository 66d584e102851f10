#include "ops.h"

void kz_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    /* double sum: rows up to ~10^4 wide, keeps the mean exact to f32 precision */
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float r = (float)(1.0 / sqrt(ss / n + eps));
    if (w) for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
    else for (int i = 0; i < n; i++) y[i] = x[i] * r;
}

void kz_l2norm(float *x, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double nrm = sqrt(ss);
    if (nrm < eps) nrm = eps;
    const float r = (float)(1.0 / nrm);
    for (int i = 0; i < n; i++) x[i] *= r;
}

void kz_scale(float *x, int n, float s) {
    for (int i = 0; i < n; i++) x[i] *= s;
}

void kz_add(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

void kz_swiglu(float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) a[i] = kz_silu(a[i]) * b[i];
}

void kz_rmsnorm_gated(float *o, const float *z, const float *w, int n, float eps) {
    kz_rmsnorm(o, o, w, n, eps);
    for (int i = 0; i < n; i++) o[i] *= kz_silu(z[i]);
}

void kz_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double sum = 0.0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    const float r = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= r;
}

float kz_dot(const float *a, const float *b, int n) {
    /* 4 partial sums: lets the compiler vectorise without -ffast-math */
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1];
        s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3];
    }
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

void kz_rope_table(float *cs, int n_rot, int pos, float base, const unsigned char *use_pos) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = (use_pos && !use_pos[i]) ? 0.0 : (double)pos * pow((double)base, -2.0 * i / n_rot);
        cs[2 * i] = (float)cos(th);
        cs[2 * i + 1] = (float)sin(th);
    }
}

void kz_rope_neox(float *x, int n_rot, const float *cs) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cs[2 * i], s = cs[2 * i + 1];
        const float x0 = x[i], x1 = x[i + half];
        x[i] = x0 * c - x1 * s;
        x[i + half] = x0 * s + x1 * c;
    }
}

void kz_imrope_mask(unsigned char *use_pos, int n_rot, const int sec[4]) {
    const int half = n_rot / 2;
    const int sect_dims = sec[0] + sec[1] + sec[2] + sec[3];
    for (int i = 0; i < half; i++) {
        if (sect_dims <= 0) { use_pos[i] = 1; continue; }
        /* IMROPE interleaves t,h,w per pair; text positions are (p,p,p,0), so only the
         * 4th ("e") slot rotates by position 0 */
        const int s = i % sect_dims;
        int t = (s % 3 == 1 && s < 3 * sec[1]) || (s % 3 == 2 && s < 3 * sec[2]) ||
                (s % 3 == 0 && s < 3 * sec[0]);
        use_pos[i] = (unsigned char)t;
    }
}
