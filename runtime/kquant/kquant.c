/* Matrix products that read GGUF quantized blocks exactly as the file stores them.
 *
 * y[m, n] = Σ_k x[m, k] · W[n, k], with W's rows kept as the GGUF's 256-weight super-blocks (Q4_K:
 * 144 bytes, Q6_K: 210 bytes) and x quantized per 256 values to int8 with one float scale and the
 * sums of every 16 values, the way the GGUF reference runtime does. Each super-block's product is
 * then an exact integer dot product, scaled once:
 *
 *   Q4_K  w = d·sc_j·q − dmin·m_j   (q 4-bit, 8 sub-blocks of 32 with 6-bit sc_j, m_j)
 *         x·w = dx·(d·Σ_j sc_j·Σ q·qx − dmin·Σ_j m_j·Σ_j qx)
 *   Q5_K  the same with q 5-bit: Q4_K's nibbles and a fifth bit each from 32 more bytes (176 bytes)
 *   Q6_K  w = d·sc_b·(q − 32)       (q 6-bit, 16 sub-blocks of 16 with int8 sc_b)
 *         x·w = dx·d·(Σ_b sc_b·Σ q·qx − 32·Σ_b sc_b·Σ_b qx)
 *
 * The GGUF's blocks of 32 (Q4_1: 20 bytes, Q8_0: 34 bytes) meet x quantized per 32 values, with the
 * block's sum of codes for Q4_1's min, as the reference runtime pairs them:
 *
 *   Q4_1  w = d·q + m               (q 4-bit)       x·w = dx·(d·Σ q·qx + m·Σ qx)
 *   Q8_0  w = d·q                   (q int8)        x·w = dx·d·Σ q·qx
 *
 * Every code path computes the same integer dot products per block; they differ only in the order
 * the scaled blocks are summed in float (the tests hold each path to the exact product). The vector
 * path is chosen when the library loads, from what this CPU reports, never from how the library
 * was compiled: the build runs on any x86-64, and AVX2 / AVX-VNNI / AVX-512 code lives in functions
 * compiled for that instruction set alone. Below 8 tokens each weight row meets up to four tokens
 * (decode, drafts); from 8 on the tiled product (kquant_x86.inc, kquant_avx512.inc) runs 8 or 16
 * tokens per vector (a prefill; Q4_1 8 on every x86 path, Q8_0 row by row). On aarch64
 * (kquant_neon.inc) the row kernels run NEON, with the dot-product instructions where the kernel
 * reports them (HWCAP_ASIMDDP), at every token count.
 *
 * The same library is an ONNX Runtime custom-op library (RegisterCustomOps): the op
 * hexrag.KQuantMatMul(x float[..., K], blocks uint8[N, K/block·bytes]) -> float[..., N], attributes
 * ggml_type, N, K and alpha (a constant the output is multiplied by), its rows shared out over the
 * session's own thread pool; and hexrag.KQuantGather(ids int32[...], blocks) -> float[..., K], the
 * rows of a token embedding kept as the file's blocks.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ort_abi.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KQ_X86 1
#endif

#if defined(__aarch64__)
#include <arm_neon.h>
#define KQ_ARM 1
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* the kernel's bit for the dot-product instructions */
#endif
#endif
#endif

#if defined(_WIN32)
#define KQ_EXPORT __declspec(dllexport)
#else
#define KQ_EXPORT __attribute__((visibility("default")))
#endif

#define QK 256
#define QK32 32
enum { Q4_1_CHUNK = 64 }; /* Q4_1 blocks the tiled product unpacks at once: 8 KB of codes, 4 weight rows */

enum { KQ_Q4_1 = 3, KQ_Q8_0 = 8, KQ_Q4_K = 12, KQ_Q5_K = 13, KQ_Q6_K = 14 }; /* GGML's type numbers */
/* best last within an architecture; avx512: the 256-bit kernels on AVX-512's VNNI, the 512-bit tiled product */
enum {
  KQ_PATH_SCALAR = 0, KQ_PATH_AVX2 = 1, KQ_PATH_AVXVNNI = 2, KQ_PATH_AVX512 = 3,
  KQ_PATH_NEON = 4, KQ_PATH_DOTPROD = 5, KQ_PATH_COUNT = 6
};

typedef struct {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qs[128];
} block_q4_k;

typedef struct { /* Q4_K's scales and mins, with each code's fifth bit in qh */
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
} block_q5_k;

typedef struct {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
} block_q6_k;

typedef struct { /* one quantized super-block of the activations */
  float d;
  int8_t qs[QK];
  int16_t bsums[QK / 16];
} block_q8_k;

typedef struct {
  uint16_t d, m;
  uint8_t qs[QK32 / 2];
} block_q4_1;

typedef struct {
  uint16_t d;
  int8_t qs[QK32];
} block_q8_0;

typedef struct { /* activations quantized per 32, for the blocks of 32 */
  float d;
  int32_t sum; /* Σ qs: Q4_1's min term */
  int8_t qs[QK32];
} block_q8_32;

_Static_assert(sizeof(block_q4_k) == 144, "Q4_K block");
_Static_assert(sizeof(block_q5_k) == 176, "Q5_K block");
_Static_assert(sizeof(block_q6_k) == 210, "Q6_K block");
_Static_assert(sizeof(block_q4_1) == 20, "Q4_1 block");
_Static_assert(sizeof(block_q8_0) == 34, "Q8_0 block");

static float fp16_to_fp32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (man << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal: normalize */
    exp = 113;
    while (!(man & 0x400)) {
      man <<= 1;
      exp--;
    }
    bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* ---- activations ---- */

/* n values as int8 codes at 127 / max |x|, rounded half to even; returns the block's scale (1 / that),
 * 0 for a block of zeros (its codes all 0) */
static float quantize_block(const float *x, int n, int8_t *qs) {
  float amax = 0.f;
  for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
  if (amax == 0.f) {
    memset(qs, 0, (size_t)n);
    return 0.f;
  }
  const float iscale = 127.f / amax;
  for (int j = 0; j < n; j++) qs[j] = (int8_t)lrintf(iscale * x[j]);
  return 1.f / iscale;
}

static void quantize_row_q8_k(const float *x, void *y_, int64_t k) {
  block_q8_k *y = y_;
  for (int64_t i = 0; i < k / QK; i++, x += QK) {
    block_q8_k *b = &y[i];
    b->d = quantize_block(x, QK, b->qs);
    for (int j = 0; j < QK / 16; j++) {
      int s = 0;
      for (int l = 0; l < 16; l++) s += b->qs[16 * j + l];
      b->bsums[j] = (int16_t)s;
    }
  }
}

static void quantize_row_q8_32(const float *x, void *y_, int64_t k) {
  block_q8_32 *y = y_;
  for (int64_t i = 0; i < k / QK32; i++, x += QK32) {
    block_q8_32 *b = &y[i];
    b->d = quantize_block(x, QK32, b->qs);
    b->sum = 0;
    for (int j = 0; j < QK32; j++) b->sum += b->qs[j];
  }
}

/* ---- the 6-bit scales and mins of a Q4_K block ---- */

/* 12 bytes -> 8 scales (out[0..1]) and 8 mins (out[2..3]), one byte each. The first four of each
 * are the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four take their low 4 bits
 * from bytes 8-11 (low nibble: scales, high: mins) and their top 2 from bits 6-7 of bytes 0-3
 * (scales) and 4-7 (mins). */
static inline void q4_k_scale_words(const uint8_t *q, uint32_t *out) {
  uint32_t w0, w1, w2;
  memcpy(&w0, q, 4);
  memcpy(&w1, q + 4, 4);
  memcpy(&w2, q + 8, 4);
  out[0] = w0 & 0x3f3f3f3fu;
  out[1] = (w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u);
  out[2] = w1 & 0x3f3f3f3fu;
  out[3] = ((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u);
}

static inline int32_t q4_k_min_term(const uint8_t *mn, const int16_t *bsums) {
  int32_t s = 0;
  for (int j = 0; j < 8; j++) s += mn[j] * (bsums[2 * j] + bsums[2 * j + 1]);
  return s;
}

static inline int32_t q6_k_offset_term(const int8_t *sc, const int16_t *bsums) {
  int32_t s = 0;
  for (int b = 0; b < 16; b++) s += sc[b] * bsums[b];
  return 32 * s;
}

/* ---- scalar path ---- */

/* a block's codes, one per weight in element order: Q4_K's 32-byte chunk j holds sub-block 2j in its
 * low nibbles and 2j+1 in its high ones */
static void q4_k_codes(const block_q4_k *b, uint8_t *codes) {
  for (int j = 0; j < 4; j++)
    for (int l = 0; l < 32; l++) {
      codes[64 * j + l] = b->qs[32 * j + l] & 0xf;
      codes[64 * j + 32 + l] = b->qs[32 * j + l] >> 4;
    }
}

/* Q5_K's 5-bit codes (0..31): Q4_K's nibbles, chunk j's low ones with bit 2j of qh[l] on top, its high
 * ones with bit 2j+1 */
static void q5_k_codes(const block_q5_k *b, uint8_t *codes) {
  for (int j = 0; j < 4; j++)
    for (int l = 0; l < 32; l++) {
      codes[64 * j + l] = (b->qs[32 * j + l] & 0xf) | (((b->qh[l] >> (2 * j)) & 1) << 4);
      codes[64 * j + 32 + l] = (b->qs[32 * j + l] >> 4) | (((b->qh[l] >> (2 * j + 1)) & 1) << 4);
    }
}

/* Q6_K's 6-bit codes (0..63): in each half of 128, quarter j takes its low 4 bits from a nibble of
 * ql (j = 0, 1: the low nibbles of ql[0..31], ql[32..63]; j = 2, 3: their high nibbles) and its top 2
 * from bits 2j, 2j+1 of qh */
static void q6_k_codes(const block_q6_k *b, uint8_t *codes) {
  for (int half = 0; half < 2; half++) {
    const uint8_t *ql = b->ql + 64 * half, *qh = b->qh + 32 * half;
    uint8_t *c = codes + 128 * half;
    for (int l = 0; l < 32; l++) {
      c[l] = (ql[l] & 0xf) | ((qh[l] & 3) << 4);
      c[l + 32] = (ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4);
      c[l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
      c[l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
    }
  }
}

/* Σ over the block's sub-blocks of `len` values: scale × Σ code × activation */
static int32_t scaled_dot(const uint8_t *codes, const int8_t *y, int len, const int *scales) {
  int32_t isum = 0;
  for (int s = 0; s < QK / len; s++) {
    int32_t part = 0;
    for (int l = 0; l < len; l++) part += codes[len * s + l] * y[len * s + l];
    isum += scales[s] * part;
  }
  return isum;
}

/* one block of codes with Q4_K's (and Q5_K's) 6-bit scales and mins against an activation block */
static float dot_min_block(const uint8_t *codes, const uint8_t *scales12, uint16_t d, uint16_t dmin,
                           const block_q8_k *a) {
  uint32_t scw[4];
  q4_k_scale_words(scales12, scw);
  const uint8_t *sc = (const uint8_t *)scw, *mn = sc + 8;
  const int scales[8] = {sc[0], sc[1], sc[2], sc[3], sc[4], sc[5], sc[6], sc[7]};
  const int32_t isum = scaled_dot(codes, a->qs, 32, scales);
  const int32_t imin = q4_k_min_term(mn, a->bsums);
  return a->d * (fp16_to_fp32(d) * (float)isum - fp16_to_fp32(dmin) * (float)imin);
}

/* block i of a Q4_K row, or of a Q5_K row when `five`: its codes in element order, and the block read as
 * a Q4_K one for d, dmin and the scales, which both keep first */
static const block_q4_k *min_k_block(const void *row, int64_t i, int five, uint8_t *codes) {
  if (five) {
    const block_q5_k *b = (const block_q5_k *)row + i;
    q5_k_codes(b, codes);
    return (const block_q4_k *)b;
  }
  const block_q4_k *b = (const block_q4_k *)row + i;
  q4_k_codes(b, codes);
  return b;
}

static float dot_min_k_one(const void *w, const block_q8_k *a, int64_t nb, int five) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; i++) {
    uint8_t codes[QK];
    const block_q4_k *b = min_k_block(w, i, five, codes);
    sum += dot_min_block(codes, b->scales, b->d, b->dmin, &a[i]);
  }
  return sum;
}

static float dot_q4_k_one(const block_q4_k *w, const block_q8_k *a, int64_t nb) { return dot_min_k_one(w, a, nb, 0); }
static float dot_q5_k_one(const block_q5_k *w, const block_q8_k *a, int64_t nb) { return dot_min_k_one(w, a, nb, 1); }

static float dot_q6_k_one(const block_q6_k *w, const block_q8_k *a, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; i++) {
    uint8_t codes[QK];
    int scales[16];
    q6_k_codes(&w[i], codes);
    for (int s = 0; s < 16; s++) scales[s] = w[i].scales[s];
    const int32_t isum = scaled_dot(codes, a[i].qs, 16, scales) - q6_k_offset_term(w[i].scales, a[i].bsums);
    sum += a[i].d * (fp16_to_fp32(w[i].d) * (float)isum);
  }
  return sum;
}

static float dot_q4_1_one(const block_q4_1 *w, const block_q8_32 *a, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; i++) {
    int32_t isum = 0;
    for (int l = 0; l < QK32 / 2; l++)
      isum += (w[i].qs[l] & 0xf) * a[i].qs[l] + (w[i].qs[l] >> 4) * a[i].qs[l + QK32 / 2];
    sum += a[i].d * (fp16_to_fp32(w[i].d) * (float)isum + fp16_to_fp32(w[i].m) * (float)a[i].sum);
  }
  return sum;
}

static float dot_q8_0_one(const block_q8_0 *w, const block_q8_32 *a, int64_t nb) {
  float sum = 0.f;
  for (int64_t i = 0; i < nb; i++) {
    int32_t isum = 0;
    for (int l = 0; l < QK32; l++) isum += w[i].qs[l] * a[i].qs[l];
    sum += a[i].d * fp16_to_fp32(w[i].d) * (float)isum;
  }
  return sum;
}

/* one row of blocks as floats (the token embedding's rows: KQuantGather) */
/* one row of Q4_K blocks, or of Q5_K ones when `five`, as floats */
static void dequantize_min_k(const void *row, int64_t nb, int five, float *y) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    uint8_t codes[QK];
    uint32_t scw[4];
    const block_q4_k *b = min_k_block(row, i, five, codes);
    q4_k_scale_words(b->scales, scw);
    const uint8_t *sc = (const uint8_t *)scw, *mn = sc + 8;
    const float d = fp16_to_fp32(b->d), dmin = fp16_to_fp32(b->dmin);
    for (int e = 0; e < QK; e++) y[e] = d * sc[e / 32] * codes[e] - dmin * mn[e / 32];
  }
}

static void dequantize_q6_k(const block_q6_k *b, int64_t nb, float *y) {
  for (int64_t i = 0; i < nb; i++, y += QK) {
    uint8_t codes[QK];
    q6_k_codes(&b[i], codes);
    const float d = fp16_to_fp32(b[i].d);
    for (int e = 0; e < QK; e++) y[e] = d * b[i].scales[e / 16] * (codes[e] - 32);
  }
}

static void dequantize_q4_1(const block_q4_1 *b, int64_t nb, float *y) {
  for (int64_t i = 0; i < nb; i++, y += QK32) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    for (int l = 0; l < QK32 / 2; l++) {
      y[l] = d * (b[i].qs[l] & 0xf) + m;
      y[l + QK32 / 2] = d * (b[i].qs[l] >> 4) + m;
    }
  }
}

static void dequantize_q8_0(const block_q8_0 *b, int64_t nb, float *y) {
  for (int64_t i = 0; i < nb; i++, y += QK32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int l = 0; l < QK32; l++) y[l] = d * b[i].qs[l];
  }
}

/* one weight row against `rows` activation rows `stride` blocks apart */
#define KQ_SCALAR_ROWS(kind, act)                                                                        \
  static void dot_##kind##_rows_scalar(const void *row, const void *a, int64_t nb, int64_t stride, int rows, \
                                       float *out) {                                                     \
    for (int r = 0; r < rows; r++) out[r] = dot_##kind##_one(row, (const act *)a + r * stride, nb);       \
  }
KQ_SCALAR_ROWS(q4_k, block_q8_k)
KQ_SCALAR_ROWS(q5_k, block_q8_k)
KQ_SCALAR_ROWS(q6_k, block_q8_k)
KQ_SCALAR_ROWS(q4_1, block_q8_32)
KQ_SCALAR_ROWS(q8_0, block_q8_32)
#undef KQ_SCALAR_ROWS

/* The activations of the tiled product: groups of `lanes` rows (8 for 256-bit vectors, 16 for
 * 512-bit), each block's values (256, or 32 for Q4_1) interleaved 4 at a time
 * (q[group][block][qk/4][lanes][4]), with each row's scale and its sums of 32 (Q4_K's mins, Q4_1's
 * min) or −32 × its sums of 16 (Q6_K's code offset), the group's rows side by side. Padding rows
 * are 0. */
typedef struct {
  int64_t groups, nb, lanes, qk;
  int8_t *q;
  float *d;      /* [groups][nb][lanes] */
  float *s32;    /* [groups][nb][qk/32][lanes], as floats: the kernels scale them, never add them as integers */
  int32_t *s16;  /* [groups][nb][16][lanes] */
} tiles;

/* ---- x86 vector paths ---- */

#ifdef KQ_X86
/* vpshufb masks: Q4_K sub-block s's scale (int16 lane s) in every lane */
static const uint8_t kq_word_masks[8][32] = {
#define KQ_W(s) {2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, \
                 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1, 2*s, 2*s+1}
    KQ_W(0), KQ_W(1), KQ_W(2), KQ_W(3), KQ_W(4), KQ_W(5), KQ_W(6), KQ_W(7)
#undef KQ_W
};
/* Q6_K: lane 2j of the half's scales in the low 8 int16 lanes, lane 2j+1 in the high 8 */
static const uint8_t kq_pair_masks[4][32] = {
#define KQ_P(j) {4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, 4*j, 4*j+1, \
                 4*j+2, 4*j+3, 4*j+2, 4*j+3, 4*j+2, 4*j+3, 4*j+2, 4*j+3, 4*j+2, 4*j+3, 4*j+2, 4*j+3, 4*j+2, 4*j+3, \
                 4*j+2, 4*j+3}
    KQ_P(0), KQ_P(1), KQ_P(2), KQ_P(3)
#undef KQ_P
};

#define KQ_SUFFIX avx2
#define KQ_TARGET __attribute__((target("avx2,fma,f16c")))
#define KQ_MADD(acc, p, s) _mm256_add_epi32(acc, _mm256_madd_epi16(p, s))
/* u8 × s8 in groups of 4 into int32 lanes; the pairs never saturate int16 (6-bit codes, or Q8_0's
 * codes' magnitudes up to 127, times int8) */
#define KQ_DPBUSD(acc, u, s) \
  _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)))
#include "kquant_x86.inc"
#undef KQ_SUFFIX
#undef KQ_TARGET
#undef KQ_MADD
#undef KQ_DPBUSD

#define KQ_SUFFIX avxvnni
#define KQ_TARGET __attribute__((target("avx2,fma,f16c,avxvnni")))
#define KQ_MADD(acc, p, s) _mm256_dpwssd_avx_epi32(acc, p, s)
#define KQ_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#include "kquant_x86.inc"
#undef KQ_SUFFIX
#undef KQ_TARGET
#undef KQ_MADD
#undef KQ_DPBUSD

/* the same 256-bit kernels with AVX-512's VNNI instructions on 256-bit vectors (AVX512-VL): the
 * CPUs with AVX512-VNNI but not the VEX-encoded AVX-VNNI (AMD Zen 4) get integer dot products too */
#define KQ_SUFFIX avx512vl
#define KQ_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#define KQ_MADD(acc, p, s) _mm256_dpwssd_epi32(acc, p, s)
#define KQ_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#include "kquant_x86.inc"
#undef KQ_SUFFIX
#undef KQ_TARGET
#undef KQ_MADD
#undef KQ_DPBUSD
#include "kquant_avx512.inc"
#endif

/* ---- aarch64 vector paths ---- */

#ifdef KQ_ARM
/* 16 int8 products summed four per int32 lane without the dot-product extension */
static inline int32x4_t kq_dot_neon(int32x4_t acc, int8x16_t w, int8x16_t y) {
  return vpadalq_s16(vpadalq_s16(acc, vmull_s8(vget_low_s8(w), vget_low_s8(y))), vmull_high_s8(w, y));
}
#define KQ_SUFFIX neon
#define KQ_TARGET
#define KQ_DOT(acc, w, y) kq_dot_neon(acc, w, y)
#include "kquant_neon.inc"
#undef KQ_SUFFIX
#undef KQ_TARGET
#undef KQ_DOT

#define KQ_SUFFIX dotprod
#if defined(__clang__)
#define KQ_TARGET __attribute__((target("dotprod")))
#else
#define KQ_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
#define KQ_DOT(acc, w, y) vdotq_s32(acc, w, y)
#include "kquant_neon.inc"
#undef KQ_SUFFIX
#undef KQ_TARGET
#undef KQ_DOT
#endif

/* ---- dispatch ---- */

/* `a`: activation blocks of the weight type's kind (block_q8_k or block_q8_32), `stride` blocks a row */
typedef void (*dot_fn)(const void *row, const void *a, int64_t nb, int64_t stride, int rows, float *out);

/* what the product needs to know of a weight type: its table index, values and bytes per block,
 * and the activation block it meets */
typedef struct {
  int index, qk;
  int64_t bytes, act_bytes;
} kq_format;

static const kq_format *format_of(int64_t type) {
  static const kq_format q4_k = {0, QK, sizeof(block_q4_k), sizeof(block_q8_k)},
                         q6_k = {1, QK, sizeof(block_q6_k), sizeof(block_q8_k)},
                         q4_1 = {2, QK32, sizeof(block_q4_1), sizeof(block_q8_32)},
                         q8_0 = {3, QK32, sizeof(block_q8_0), sizeof(block_q8_32)},
                         q5_k = {4, QK, sizeof(block_q5_k), sizeof(block_q8_k)};
  switch (type) {
    case KQ_Q4_K: return &q4_k;
    case KQ_Q6_K: return &q6_k;
    case KQ_Q4_1: return &q4_1;
    case KQ_Q8_0: return &q8_0;
    case KQ_Q5_K: return &q5_k;
    default: return NULL;
  }
}

static int path_available(int path) {
  if (path == KQ_PATH_SCALAR) return 1;
#ifdef KQ_X86
  __builtin_cpu_init();
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (path == KQ_PATH_AVX2) return avx2;
  if (path == KQ_PATH_AVXVNNI) return avx2 && __builtin_cpu_supports("avxvnni");
  if (path == KQ_PATH_AVX512)
    return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
#ifdef KQ_ARM
  if (path == KQ_PATH_NEON) return 1; /* Advanced SIMD is part of every aarch64 CPU */
#if defined(__linux__)
  if (path == KQ_PATH_DOTPROD) return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
  return 0;
}

static int best_path(void) {
  for (int p = KQ_PATH_COUNT - 1; p > 0; p--)
    if (path_available(p)) return p;
  return KQ_PATH_SCALAR;
}

static int kq_path = -1;

static int current_path(void) {
  if (kq_path < 0) kq_path = best_path();
  return kq_path;
}

/* each path's row kernels, in kq_format.index order */
static dot_fn dot_for(int64_t type) {
  const kq_format *f = format_of(type);
  if (!f) return NULL;
  switch (current_path()) {
#ifdef KQ_X86
    case KQ_PATH_AVX2: {
      static const dot_fn k[] = {dot_q4_k_rows_avx2, dot_q6_k_rows_avx2, dot_q4_1_rows_avx2, dot_q8_0_rows_avx2,
                                 dot_q5_k_rows_avx2};
      return k[f->index];
    }
    case KQ_PATH_AVXVNNI: {
      static const dot_fn k[] = {dot_q4_k_rows_avxvnni, dot_q6_k_rows_avxvnni, dot_q4_1_rows_avxvnni,
                                 dot_q8_0_rows_avxvnni, dot_q5_k_rows_avxvnni};
      return k[f->index];
    }
    case KQ_PATH_AVX512: {
      static const dot_fn k[] = {dot_q4_k_rows_avx512vl, dot_q6_k_rows_avx512vl, dot_q4_1_rows_avx512vl,
                                 dot_q8_0_rows_avx512vl, dot_q5_k_rows_avx512vl};
      return k[f->index];
    }
#endif
#ifdef KQ_ARM
    case KQ_PATH_NEON: {
      static const dot_fn k[] = {dot_q4_k_neon, dot_q6_k_neon, dot_q4_1_neon, dot_q8_0_neon, dot_q5_k_neon};
      return k[f->index];
    }
    case KQ_PATH_DOTPROD: {
      static const dot_fn k[] = {dot_q4_k_dotprod, dot_q6_k_dotprod, dot_q4_1_dotprod, dot_q8_0_dotprod,
                                 dot_q5_k_dotprod};
      return k[f->index];
    }
#endif
    default: {
      static const dot_fn k[] = {dot_q4_k_rows_scalar, dot_q6_k_rows_scalar, dot_q4_1_rows_scalar,
                                 dot_q8_0_rows_scalar, dot_q5_k_rows_scalar};
      return k[f->index];
    }
  }
}

typedef void (*gemm_fn)(int type, const uint8_t *const *row, int rows, const tiles *t, int64_t g0, int64_t g1,
                        float *const *tot);

/* NULL: the type is multiplied row by row here (the portable path; Q8_0, which is only ever an LM
 * head, a row per token asked for) */
static gemm_fn gemm_for(int64_t type) {
  if (type == KQ_Q8_0) return NULL;
  switch (current_path()) {
#ifdef KQ_X86
    case KQ_PATH_AVX2: return type == KQ_Q4_1 ? gemm_rows_q4_1_avx2 : gemm_rows_avx2;
    case KQ_PATH_AVXVNNI: return type == KQ_Q4_1 ? gemm_rows_q4_1_avxvnni : gemm_rows_avxvnni;
    case KQ_PATH_AVX512: return type == KQ_Q4_1 ? gemm_rows_q4_1_avx512vl : gemm_rows_avx512;
#endif
    default: return NULL;
  }
}

typedef void (*quantize_fn)(const float *x, void *y, int64_t k);

/* activations quantized into the blocks `qk` values wide that the weight type meets */
static quantize_fn quantize_for(int qk) {
  switch (current_path()) {
#ifdef KQ_X86
    case KQ_PATH_AVX2: return qk == QK ? quantize_row_avx2 : quantize_row_32_avx2;
    case KQ_PATH_AVXVNNI: return qk == QK ? quantize_row_avxvnni : quantize_row_32_avxvnni;
    case KQ_PATH_AVX512: return qk == QK ? quantize_row_avx512vl : quantize_row_32_avx512vl;
#endif
    default: return qk == QK ? quantize_row_q8_k : quantize_row_q8_32;
  }
}

/* activation rows per vector of the tiled product, and weight rows per call (Q4_1's product is the
 * 256-bit one on every x86 path) */
static int64_t gemm_lanes(int64_t type) { return current_path() == KQ_PATH_AVX512 && type != KQ_Q4_1 ? 16 : 8; }
static int gemm_rows_per_call(int64_t type) { return current_path() == KQ_PATH_AVX512 || type == KQ_Q4_1 ? 4 : 2; }

/* ---- the product ---- */

enum { GEMM_MIN_ROWS = 8 };             /* from a tile of 8 tokens on, the tiled product */
enum { CACHE_BYTES = 512 * 1024 };       /* what a core's L2 holds of one operand, with room to spare */

typedef struct {
  int type;
  dot_fn dot;
  gemm_fn gemm; /* NULL: row by row */
  quantize_fn quantize;
  const uint8_t *w;
  const float *x;
  int64_t row_bytes, act_bytes, nb, n, k, m, rows_per_task;
  uint8_t *xq; /* m rows of nb activation blocks, act_bytes each */
  tiles tl;
  float *y;
  float alpha;
} job;

/* Weight rows r0..r1 against every activation row, one weight row and four activation rows at a
 * time. The activations are walked in tiles that stay in a core's L2 cache (a prefill's 512 tokens
 * of an 8960-wide input are 4.6 MB). */
static void run_rows(const job *jb, int64_t r0, int64_t r1) {
  int64_t tile = CACHE_BYTES / (jb->nb * jb->act_bytes) / 4 * 4;
  if (tile < 4) tile = 4;
  float out[4];
  for (int64_t m0 = 0; m0 < jb->m; m0 += tile) {
    const int64_t m1 = m0 + tile < jb->m ? m0 + tile : jb->m;
    for (int64_t r = r0; r < r1; r++) {
      const uint8_t *row = jb->w + r * jb->row_bytes;
      for (int64_t i = m0; i < m1; i += 4) {
        const int rows = m1 - i < 4 ? (int)(m1 - i) : 4;
        jb->dot(row, jb->xq + i * jb->nb * jb->act_bytes, jb->nb, jb->nb, rows, out);
        for (int t = 0; t < rows; t++) jb->y[(i + t) * jb->n + r] = jb->alpha * out[t];
      }
    }
  }
}

enum { MAX_TILE_GROUPS = 64, MAX_GEMM_ROWS = 4 };

/* The tiled product of weight rows r0..r1: groups of 8 or 16 tokens in L2-sized tiles, 2 or 4
 * weight rows at a time. */
static void run_rows_tiled(const job *jb, int64_t r0, int64_t r1) {
  const int64_t lanes = jb->tl.lanes;
  const int per_call = gemm_rows_per_call(jb->type);
  int64_t tile = CACHE_BYTES / (jb->k * lanes);
  tile = tile < 1 ? 1 : tile > MAX_TILE_GROUPS ? MAX_TILE_GROUPS : tile;
  float tot_buf[MAX_GEMM_ROWS][MAX_TILE_GROUPS * 16];
  for (int64_t g0 = 0; g0 < jb->tl.groups; g0 += tile) {
    const int64_t g1 = g0 + tile < jb->tl.groups ? g0 + tile : jb->tl.groups;
    for (int64_t r = r0; r < r1; r += per_call) {
      const int rows = r + per_call <= r1 ? per_call : (int)(r1 - r);
      const uint8_t *row[MAX_GEMM_ROWS];
      float *tot[MAX_GEMM_ROWS];
      for (int t = 0; t < rows; t++) {
        row[t] = jb->w + (r + t) * jb->row_bytes;
        tot[t] = tot_buf[t];
        memset(tot_buf[t], 0, (size_t)((g1 - g0) * lanes) * sizeof(float));
      }
      jb->gemm(jb->type, row, rows, &jb->tl, g0, g1, tot);
      for (int t = 0; t < rows; t++)
        for (int64_t i = g0 * lanes; i < g1 * lanes && i < jb->m; i++)
          jb->y[i * jb->n + r + t] = jb->alpha * tot[t][i - g0 * lanes];
    }
  }
}

static int alloc_tiles(tiles *t, int type, int64_t qk, int64_t m, int64_t nb, int64_t lanes) {
  t->lanes = lanes;
  t->groups = (m + lanes - 1) / lanes;
  t->nb = nb;
  t->qk = qk;
  const size_t cells = (size_t)(t->groups * nb * lanes);
  t->q = calloc(cells * (size_t)qk, 1);
  t->d = calloc(cells, sizeof(float));
  t->s32 = type == KQ_Q6_K ? NULL : calloc(cells * (size_t)(qk / 32), sizeof(float));
  t->s16 = type == KQ_Q6_K ? calloc(cells * 16, sizeof(int32_t)) : NULL;
  return t->q && t->d && (t->s32 || t->s16);
}

/* a block's scale and its values, 4 at a time, into one lane of the tiles */
static void tile_block(tiles *t, int64_t at, int64_t lane, float d, const int8_t *qs) {
  t->d[at * t->lanes + lane] = d;
  int8_t *q = t->q + at * t->qk * t->lanes + lane * 4;
  for (int64_t k = 0; k < t->qk / 4; k++) memcpy(q + k * t->lanes * 4, qs + 4 * k, 4);
}

/* one quantized activation row into its lane of the tiles (rows write disjoint bytes: the rows of a
 * prefill are placed in parallel) */
static void tile_row(tiles *t, const block_q8_k *row_blocks, int64_t row) {
  const int64_t g = row / t->lanes, lane = row % t->lanes, lanes = t->lanes;
  for (int64_t i = 0; i < t->nb; i++) {
    const block_q8_k *b = row_blocks + i;
    const int64_t at = g * t->nb + i;
    tile_block(t, at, lane, b->d, b->qs);
    if (t->s32)
      for (int s = 0; s < 8; s++)
        t->s32[(at * 8 + s) * lanes + lane] = (float)(b->bsums[2 * s] + b->bsums[2 * s + 1]);
    else
      for (int s = 0; s < 16; s++) t->s16[(at * 16 + s) * lanes + lane] = -32 * b->bsums[s];
  }
}

static void tile_row_32(tiles *t, const block_q8_32 *row_blocks, int64_t row) {
  const int64_t g = row / t->lanes, lane = row % t->lanes;
  for (int64_t i = 0; i < t->nb; i++) {
    const int64_t at = g * t->nb + i;
    tile_block(t, at, lane, row_blocks[i].d, row_blocks[i].qs);
    t->s32[at * t->lanes + lane] = (float)row_blocks[i].sum;
  }
}

/* activation row `task`: quantized, and placed in the tiles when the tiled product runs */
static void prep_task(void *data, size_t task) {
  const job *jb = data;
  const int64_t row = (int64_t)task;
  uint8_t *xq = jb->xq + row * jb->nb * jb->act_bytes;
  jb->quantize(jb->x + row * jb->k, xq, jb->k);
  if (!jb->gemm) return;
  if (jb->tl.qk == QK) tile_row((tiles *)&jb->tl, (const block_q8_k *)xq, row);
  else tile_row_32((tiles *)&jb->tl, (const block_q8_32 *)xq, row);
}

static void run_task(void *data, size_t task) {
  const job *jb = data;
  const int64_t r0 = (int64_t)task * jb->rows_per_task;
  const int64_t r1 = r0 + jb->rows_per_task < jb->n ? r0 + jb->rows_per_task : jb->n;
  if (jb->gemm) run_rows_tiled(jb, r0, r1);
  else run_rows(jb, r0, r1);
}

static void release(job *jb) {
  free(jb->xq);
  free(jb->tl.q);
  free(jb->tl.d);
  free(jb->tl.s32);
  free(jb->tl.s16);
}

/* 0, or why a type's blocks of `w_bytes` cannot be n rows of k values (both ops' check) */
static const char *check_shape(int64_t type, int64_t w_bytes, int64_t n, int64_t k) {
  const kq_format *f = format_of(type);
  if (!f) return "unsupported ggml_type (Q4_1 = 3, Q8_0 = 8, Q4_K = 12, Q5_K = 13 and Q6_K = 14 are)";
  if (k <= 0 || k % f->qk) return "K must be a positive multiple of the type's block (256 values; Q4_1, Q8_0: 32)";
  if (n <= 0 || w_bytes != n * (k / f->qk) * f->bytes) return "the blocks are not N rows of K values";
  return 0;
}

/* 0, or why the shapes cannot be multiplied */
static const char *prepare(job *jb, int64_t type, const uint8_t *w, int64_t w_bytes, int64_t n, int64_t k,
                           const float *x, int64_t m, float *y, float alpha) {
  memset(jb, 0, sizeof *jb);
  const char *err = check_shape(type, w_bytes, n, k);
  if (err) return err;
  const kq_format *f = format_of(type);
  jb->type = (int)type;
  jb->dot = dot_for(type);
  jb->nb = k / f->qk;
  jb->row_bytes = jb->nb * f->bytes;
  jb->act_bytes = f->act_bytes;
  jb->xq = malloc((size_t)(m > 0 ? m : 1) * (size_t)(jb->nb * jb->act_bytes));
  if (!jb->xq) return "out of memory";
  jb->gemm = m >= GEMM_MIN_ROWS ? gemm_for(type) : NULL;
  jb->quantize = quantize_for(f->qk);
  if (jb->gemm && !alloc_tiles(&jb->tl, jb->type, f->qk, m, jb->nb, gemm_lanes(type))) {
    release(jb);
    return "out of memory";
  }
  jb->w = w;
  jb->x = x;
  jb->n = n;
  jb->k = k;
  jb->m = m;
  jb->y = y;
  jb->alpha = alpha;
  jb->rows_per_task = n;
  return 0;
}

/* ---- the entry points ctypes calls (tests, tools) ---- */

KQ_EXPORT int hexrag_kq_path(void) { return current_path(); }

/* whether this CPU runs a path (its instructions are there) */
KQ_EXPORT int hexrag_kq_path_available(int path) { return path >= 0 && path < KQ_PATH_COUNT && path_available(path); }

/* forces a path for tests; returns the path now in use (an unavailable one is refused) */
KQ_EXPORT int hexrag_kq_force_path(int path) {
  if (hexrag_kq_path_available(path)) kq_path = path;
  return current_path();
}

/* y[m, n] = alpha · x[m, k] · Wᵀ on the calling thread; returns 0 or an error message */
KQ_EXPORT const char *hexrag_kq_matmul(int64_t type, const uint8_t *w, int64_t w_bytes, int64_t n, int64_t k,
                                       const float *x, int64_t m, float *y, float alpha) {
  job jb;
  const char *err = prepare(&jb, type, w, w_bytes, n, k, x, m, y, alpha);
  if (err) return err;
  for (int64_t i = 0; i < m; i++) prep_task(&jb, (size_t)i);
  run_task(&jb, 0);
  release(&jb);
  return 0;
}

/* rows ids[0..count) of n rows of blocks, as floats [count, k] (KQuantGather); 0 or why not */
KQ_EXPORT const char *hexrag_kq_gather(int64_t type, const uint8_t *w, int64_t w_bytes, int64_t n, int64_t k,
                                       const int32_t *ids, int64_t count, float *y) {
  const char *err = check_shape(type, w_bytes, n, k);
  if (err) return err;
  const kq_format *f = format_of(type);
  const int64_t nb = k / f->qk, row_bytes = nb * f->bytes;
  for (int64_t i = 0; i < count; i++)
    if (ids[i] < 0 || ids[i] >= n) return "a token id outside the table";
  for (int64_t i = 0; i < count; i++) {
    const uint8_t *row = w + ids[i] * row_bytes;
    float *out = y + i * k;
    switch (type) {
      case KQ_Q4_K: dequantize_min_k(row, nb, 0, out); break;
      case KQ_Q5_K: dequantize_min_k(row, nb, 1, out); break;
      case KQ_Q6_K: dequantize_q6_k((const block_q6_k *)row, nb, out); break;
      case KQ_Q4_1: dequantize_q4_1((const block_q4_1 *)row, nb, out); break;
      default: dequantize_q8_0((const block_q8_0 *)row, nb, out); break;
    }
  }
  return 0;
}

/* ---- the ONNX Runtime custom ops ---- */

typedef struct {
  OrtApi api;
  int64_t type, n, k;
  float alpha;
} kernel;

static OrtStatus *fail(OrtApi api, const char *msg) {
  return ORT_FN(api, ORT_CreateStatus, OrtCreateStatusFn)(ORT_INVALID_ARGUMENT, msg);
}

static OrtStatus *create_kernel(const OrtCustomOp16 *op, OrtApi api, const OrtKernelInfo *info, void **out) {
  (void)op;
  kernel *kn = calloc(1, sizeof *kn);
  if (!kn) return fail(api, "hexrag K-quant ops: out of memory");
  kn->api = api;
  OrtKernelInfoGetAttributeInt64Fn get_int = ORT_FN(api, ORT_KernelInfoGetAttribute_int64,
                                                    OrtKernelInfoGetAttributeInt64Fn);
  const char *names[3] = {"ggml_type", "N", "K"};
  int64_t *slots[3] = {&kn->type, &kn->n, &kn->k};
  for (int i = 0; i < 3; i++) {
    OrtStatus *st = get_int(info, names[i], slots[i]);
    if (st) {
      free(kn);
      return st;
    }
  }
  OrtStatus *st = ORT_FN(api, ORT_KernelInfoGetAttribute_float, OrtKernelInfoGetAttributeFloatFn)(
      info, "alpha", &kn->alpha);
  if (st) { /* optional */
    ORT_FN(api, ORT_ReleaseStatus, OrtReleaseStatusFn)(st);
    kn->alpha = 1.f;
  }
  const kq_format *f = format_of(kn->type);
  if (!f || kn->k <= 0 || kn->k % f->qk) {
    free(kn);
    return fail(api, "hexrag K-quant ops: unsupported ggml_type or K not a multiple of its block");
  }
  *out = kn;
  return 0;
}

#define TRY(call)                  \
  do {                             \
    OrtStatus *st_ = (call);       \
    if (st_) return st_;           \
  } while (0)

/* a tensor's dimensions (rank at most 8) and / or element count; NULL: not wanted */
static OrtStatus *shape_of(OrtApi api, const OrtValue *v, int64_t *dims, size_t *rank, size_t *count) {
  OrtTensorTypeAndShapeInfo *info;
  TRY(ORT_FN(api, ORT_GetTensorTypeAndShape, OrtGetTensorTypeAndShapeFn)(v, &info));
  OrtStatus *st = 0;
  if (rank) {
    st = ORT_FN(api, ORT_GetDimensionsCount, OrtGetDimensionsCountFn)(info, rank);
    if (!st && *rank > 8) st = fail(api, "hexrag K-quant ops: tensors of rank above 8 are not taken");
    if (!st) st = ORT_FN(api, ORT_GetDimensions, OrtGetDimensionsFn)(info, dims, *rank);
  }
  if (!st && count) st = ORT_FN(api, ORT_GetTensorShapeElementCount, OrtGetTensorShapeElementCountFn)(info, count);
  ORT_FN(api, ORT_ReleaseTensorTypeAndShapeInfo, OrtReleaseTensorTypeAndShapeInfoFn)(info);
  return st;
}

/* both ops' inputs: the first (x or ids) with its shape, and the blocks */
typedef struct {
  int64_t dims[9]; /* room for one more: the gather's output appends K */
  size_t rank, count, w_count;
  void *in, *w;
} op_inputs;

static OrtStatus *inputs_of(OrtApi api, OrtKernelContext *ctx, op_inputs *io) {
  const OrtValue *iv, *wv;
  TRY(ORT_FN(api, ORT_KernelContext_GetInput, OrtKernelContextGetInputFn)(ctx, 0, &iv));
  TRY(ORT_FN(api, ORT_KernelContext_GetInput, OrtKernelContextGetInputFn)(ctx, 1, &wv));
  TRY(shape_of(api, iv, io->dims, &io->rank, &io->count));
  TRY(shape_of(api, wv, NULL, NULL, &io->w_count));
  TRY(ORT_FN(api, ORT_GetTensorMutableData, OrtGetTensorMutableDataFn)((OrtValue *)iv, &io->in));
  return ORT_FN(api, ORT_GetTensorMutableData, OrtGetTensorMutableDataFn)((OrtValue *)wv, &io->w);
}

static OrtStatus *output_of(OrtApi api, OrtKernelContext *ctx, const int64_t *dims, size_t rank, void **y) {
  OrtValue *yv;
  TRY(ORT_FN(api, ORT_KernelContext_GetOutput, OrtKernelContextGetOutputFn)(ctx, 0, dims, rank, &yv));
  return ORT_FN(api, ORT_GetTensorMutableData, OrtGetTensorMutableDataFn)(yv, y);
}

static OrtStatus *compute(void *kernel_, OrtKernelContext *ctx) {
  const kernel *kn = kernel_;
  OrtApi api = kn->api;
  op_inputs io;
  TRY(inputs_of(api, ctx, &io));
  if (io.rank < 1) return fail(api, "KQuantMatMul: x must have rank 1 to 8");
  if (io.dims[io.rank - 1] != kn->k) return fail(api, "KQuantMatMul: x's last dimension is not K");
  const int64_t m = (int64_t)io.count / kn->k;
  io.dims[io.rank - 1] = kn->n;
  void *y;
  TRY(output_of(api, ctx, io.dims, io.rank, &y));
  if (m == 0) return 0;
  job jb;
  const char *err = prepare(&jb, kn->type, io.w, (int64_t)io.w_count, kn->n, kn->k, io.in, m, y, kn->alpha);
  if (err) return fail(api, err);
  /* tasks of whole rows (a multiple of 4: the tiled product takes up to four at a time), enough of
   * them for the pool to balance a shared CPU */
  jb.rows_per_task = (kn->n / 64 > 8 ? kn->n / 64 : 8) & ~(int64_t)3;
  const size_t tasks = (size_t)((kn->n + jb.rows_per_task - 1) / jb.rows_per_task);
  OrtKernelContextParallelForFn parallel_for = ORT_FN(api, ORT_KernelContext_ParallelFor,
                                                      OrtKernelContextParallelForFn);
  OrtStatus *st = 0;
  if (m < GEMM_MIN_ROWS) /* a few rows quantize in well under a microsecond: no pool round trip */
    for (int64_t i = 0; i < m; i++) prep_task(&jb, (size_t)i);
  else
    st = parallel_for(ctx, prep_task, (size_t)m, 0, &jb);
  if (!st) st = parallel_for(ctx, run_task, tasks, 0, &jb);
  release(&jb);
  return st;
}

/* KQuantGather(ids int32[...], blocks uint8[N, K/block·bytes]) -> float[..., K]: the rows of a token
 * embedding kept as the GGUF's blocks */
static OrtStatus *compute_gather(void *kernel_, OrtKernelContext *ctx) {
  const kernel *kn = kernel_;
  OrtApi api = kn->api;
  op_inputs io;
  TRY(inputs_of(api, ctx, &io));
  io.dims[io.rank] = kn->k;
  void *y;
  TRY(output_of(api, ctx, io.dims, io.rank + 1, &y));
  const char *err = hexrag_kq_gather(kn->type, io.w, (int64_t)io.w_count, kn->n, kn->k, io.in, (int64_t)io.count, y);
  return err ? fail(api, err) : 0;
}

static void destroy_kernel(void *kn) { free(kn); }
static const char *op_name(const OrtCustomOp16 *op) { (void)op; return "KQuantMatMul"; }
static const char *gather_name(const OrtCustomOp16 *op) { (void)op; return "KQuantGather"; }
static int gather_input_type(const OrtCustomOp16 *op, size_t i) {
  (void)op;
  return i == 0 ? ORT_TENSOR_INT32 : ORT_TENSOR_UINT8;
}
static const char *op_provider(const OrtCustomOp16 *op) { (void)op; return "CPUExecutionProvider"; }
static int input_type(const OrtCustomOp16 *op, size_t i) { (void)op; return i == 0 ? ORT_TENSOR_FLOAT : ORT_TENSOR_UINT8; }
static size_t input_count(const OrtCustomOp16 *op) { (void)op; return 2; }
static int output_type(const OrtCustomOp16 *op, size_t i) { (void)op; (void)i; return ORT_TENSOR_FLOAT; }
static size_t output_count(const OrtCustomOp16 *op) { (void)op; return 1; }
static int required(const OrtCustomOp16 *op, size_t i) { (void)op; (void)i; return ORT_IO_REQUIRED; }
static int zero_int(const OrtCustomOp16 *op) { (void)op; return 0; }
static int default_memory(const OrtCustomOp16 *op, size_t i) { (void)op; (void)i; return 0; }

/* the two ops differ in name, first input and compute; the rest is what every plain CPU op says */
#define KQ_OP(name_fn, input_type_fn, compute_fn)                                                            \
  {                                                                                                           \
    .version = 16, .GetName = name_fn, .GetExecutionProviderType = op_provider, .GetInputType = input_type_fn, \
    .GetInputTypeCount = input_count, .GetOutputType = output_type, .GetOutputTypeCount = output_count,        \
    .KernelDestroy = destroy_kernel, .GetInputCharacteristic = required, .GetOutputCharacteristic = required,  \
    .GetInputMemoryType = default_memory, .GetVariadicInputMinArity = zero_int,                                \
    .GetVariadicInputHomogeneity = zero_int, .GetVariadicOutputMinArity = zero_int,                            \
    .GetVariadicOutputHomogeneity = zero_int, .CreateKernelV2 = create_kernel, .KernelComputeV2 = compute_fn,  \
  }

static const OrtCustomOp16 kquant_op = KQ_OP(op_name, input_type, compute);
static const OrtCustomOp16 gather_op = KQ_OP(gather_name, gather_input_type, compute_gather);

KQ_EXPORT OrtStatus *RegisterCustomOps(OrtSessionOptions *options, const OrtApiBase *base) {
  OrtApi api = base->GetApi(ORT_API_VERSION_USED);
  if (!api) {
    fprintf(stderr, "hexrag kquant: this ONNX Runtime predates C API version %d\n", ORT_API_VERSION_USED);
    return 0;
  }
  /* one domain for the process: ONNX Runtime keeps a pointer to it in every session */
  static OrtCustomOpDomain *domain;
  if (!domain) {
    TRY(ORT_FN(api, ORT_CreateCustomOpDomain, OrtCreateCustomOpDomainFn)("hexrag", &domain));
    OrtStatus *st = ORT_FN(api, ORT_CustomOpDomain_Add, OrtCustomOpDomainAddFn)(domain, &kquant_op);
    if (!st) st = ORT_FN(api, ORT_CustomOpDomain_Add, OrtCustomOpDomainAddFn)(domain, &gather_op);
    if (st) {
      domain = 0;
      return st;
    }
  }
  return ORT_FN(api, ORT_AddCustomOpDomain, OrtAddCustomOpDomainFn)(options, domain);
}
