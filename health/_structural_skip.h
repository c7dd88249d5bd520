/*
 * Skipping a value of a vetted JSON text without checking it, for health._payload_spans'
 * copy of a line: the line has been vetted as one JSON text (health.json_vet), so this is a
 * structural scan, not a validator. Strings are skipped by looking for the next quote or
 * backslash (a backslash and the byte after it are passed over together, which covers \" and
 * \\; a \uXXXX escape's hex digits are neither), containers by counting brackets outside
 * strings (64 bytes at a time, with AVX2 and PCLMUL where the CPU has them), and scalars
 * (numbers, true, false, null) end at the first ',', '}', ']' or whitespace. Every read is
 * bounds-checked all the same, so unvetted bytes give a wrong copy or None, never a read
 * past the buffer. Apart from the path the copy follows, which reads keys and not bytes.
 */
#ifndef HEALTH_STRUCTURAL_SKIP_H
#define HEALTH_STRUCTURAL_SKIP_H

#include <stdint.h>
#include <string.h>

#include "_json_cursor.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__) && !defined(SPANS_PORTABLE)
#include <emmintrin.h>
#define SPANS_SSE2 1
#endif

/* The first quote or backslash at or after p, or end. */
static inline cursor find_string_stop(cursor p, cursor end) {
#ifdef SPANS_SSE2
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    while (end - p >= 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)p);
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash)));
        if (mask) return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\') p++;
    return p;
}

/* Past the closing quote of the string whose content starts at p; NULL if the bytes end. */
static cursor skip_string(cursor p, cursor end) {
    for (;;) {
        p = find_string_stop(p, end);
        if (p >= end) return NULL;
        if (*p == '"') return p + 1;
        /* a backslash escapes exactly the next byte; a backslash as the last byte would put p
         * past end, which C does not allow even unread: checked first */
        if (end - p < 2) return NULL;
        p += 2;
    }
}

/* Containers are skipped 64 bytes at a time with bit masks (one bit per byte):
 *   escaped   bytes preceded by an odd run of backslashes (found run by run: backslashes are
 *             rare outside string-heavy payloads; a run may continue from the previous block);
 *   quotes    unescaped '"'; in_string = the running parity of quotes (prefix XOR, carried
 *             from block to block), so a byte is inside a string when an odd number of quotes
 *             precede it (the closing quote itself counts as outside, which is harmless);
 *   open / close  brackets outside strings.
 * The depth can only reach zero in a block holding at least `depth` closing brackets; other
 * blocks just add their balance. */
typedef struct {
    uint64_t quote, backslash, open, close;
} Masks;

static inline uint64_t prefix_xor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

#ifdef SPANS_SSE2
static inline uint64_t mask16(__m128i hits) { return (uint64_t)(unsigned)_mm_movemask_epi8(hits); }

static inline Masks block_masks(const unsigned char *block) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(block + 16 * i));
        __m128i folded = _mm_or_si128(bytes, lower);
        m.quote |= mask16(_mm_cmpeq_epi8(bytes, quote)) << (16 * i);
        m.backslash |= mask16(_mm_cmpeq_epi8(bytes, backslash)) << (16 * i);
        m.open |= mask16(_mm_cmpeq_epi8(folded, open)) << (16 * i);
        m.close |= mask16(_mm_cmpeq_epi8(folded, close)) << (16 * i);
    }
    return m;
}
#else
static inline Masks block_masks(const unsigned char *block) {
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 64; i++) {
        unsigned char c = block[i], folded = c | 0x20;
        uint64_t bit = (uint64_t)1 << i;
        if (c == '"') m.quote |= bit;
        if (c == '\\') m.backslash |= bit;
        if (folded == '{') m.open |= bit;
        if (folded == '}') m.close |= bit;
    }
    return m;
}
#endif

/* The bytes escaped by a backslash; *carry says whether the first byte of the next block is. */
static inline uint64_t escaped_bytes(uint64_t backslash, int *carry) {
    uint64_t escaped = 0;
    if (*carry) {
        escaped = 1;
        backslash &= ~(uint64_t)1;
    }
    *carry = 0;
    while (backslash) {
        int i = __builtin_ctzll(backslash);
        if (i == 63) {
            *carry = 1;
            break;
        }
        escaped |= (uint64_t)1 << (i + 1);
        backslash &= ~((uint64_t)3 << i);
    }
    return escaped;
}

/* Past the bracket closing the container whose content starts at p; masks_of computes a
 * block's masks (inlined, so each vector width gets its own copy of the loop). */
static ALWAYS_INLINE cursor skip_container_with(cursor p, cursor end, Masks (*masks_of)(const unsigned char *),
                                                uint64_t (*parity_of)(uint64_t)) {
    uint64_t depth = 1, in_string = 0; /* in_string: all ones while the block starts in a string */
    int carry = 0;
    unsigned char padded[64];
    while (p < end) {
        const unsigned char *block = p;
        if (end - p < 64) {
            memset(padded, ' ', sizeof padded);
            memcpy(padded, p, (size_t)(end - p));
            block = padded;
        }
        Masks m = masks_of(block);
        uint64_t quotes = m.quote;
        if (m.backslash | (uint64_t)carry) quotes &= ~escaped_bytes(m.backslash, &carry);
        uint64_t inside = parity_of(quotes) ^ in_string;
        in_string = (uint64_t)((int64_t)inside >> 63);
        uint64_t open = m.open & ~inside, close = m.close & ~inside;
        uint64_t closes = (uint64_t)__builtin_popcountll(close);
        if (closes < depth) {
            depth = depth + (uint64_t)__builtin_popcountll(open) - closes;
        } else {
            for (uint64_t brackets = open | close; brackets; brackets &= brackets - 1) {
                uint64_t bit = brackets & (~brackets + 1);
                if (open & bit) {
                    depth++;
                } else if (--depth == 0) {
                    /* compared as offsets: in the padded last block the bracket may lie past
                     * end, and a pointer past end may not even be formed */
                    Py_ssize_t after = (Py_ssize_t)__builtin_ctzll(bit) + 1;
                    return after <= end - p ? p + after : NULL;
                }
            }
        }
        if (end - p <= 64) break; /* the last block (p + 64 would pass end) */
        p += 64;
    }
    return NULL;
}

#ifdef SPANS_SSE2
#include <immintrin.h>

__attribute__((target("avx2"))) static inline Masks block_masks_avx2(const unsigned char *block) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\');
    const __m256i lower = _mm256_set1_epi8(0x20);
    const __m256i open = _mm256_set1_epi8('{'), close = _mm256_set1_epi8('}');
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 2; i++) {
        __m256i bytes = _mm256_loadu_si256((const __m256i *)(block + 32 * i));
        __m256i folded = _mm256_or_si256(bytes, lower);
        m.quote |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, quote)) << (32 * i);
        m.backslash |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, backslash)) << (32 * i);
        m.open |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, open)) << (32 * i);
        m.close |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, close)) << (32 * i);
    }
    return m;
}

/* The prefix XOR as one carry-less multiplication by all ones. */
__attribute__((target("pclmul"))) static inline uint64_t prefix_xor_clmul(uint64_t x) {
    return (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_set_epi64x(0, (long long)x), _mm_set1_epi8(-1), 0));
}

__attribute__((target("avx2,pclmul"))) static cursor skip_container_avx2(cursor p, cursor end) {
    return skip_container_with(p, end, block_masks_avx2, prefix_xor_clmul);
}

/* AVX2 and PCLMUL: set once at import from the CPU, so process-wide, like the CPU itself.
 * Only _use_avx2() (tests, comparing both loops) changes it afterwards, for the whole process:
 * both loops give the same answer, so a concurrent scan is never wrong, only slower. */
static int has_avx2 = 0;
#endif

static cursor skip_container_baseline(cursor p, cursor end) { return skip_container_with(p, end, block_masks, prefix_xor); }

static cursor skip_container(cursor p, cursor end) {
#ifdef SPANS_SSE2
    if (has_avx2) return skip_container_avx2(p, end);
#endif
    return skip_container_baseline(p, end);
}

/* Past the value starting at p (p is not whitespace). */
static cursor skip_value(cursor p, cursor end) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return skip_string(p + 1, end);
    case '{':
    case '[': return skip_container(p + 1, end);
    default:
        while (p < end && *p != ',' && *p != '}' && *p != ']' && !is_whitespace(*p)) p++;
        return p;
    }
}

#endif /* HEALTH_STRUCTURAL_SKIP_H */
