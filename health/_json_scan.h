/*
 * The strict scan of JSON's tokens other than numbers: whitespace, literals and strings, each
 * checked exactly as orjson accepts it. Shared by every walk of health._json_vet (the vetter
 * alone, the vet-and-copy pass, the ingest body's rows), so there is one string check.
 *
 *   strings     bytes 0x00-0x1F refused raw; escapes are \" \\ \/ \b \f \n \r \t and \uXXXX
 *               (hex digits either case); a \u escape in D800-DBFF must be followed at once by
 *               a \u escape in DC00-DFFF, and one in DC00-DFFF may not stand alone. Raw bytes
 *               must be well-formed UTF-8 (_json_utf8.h).
 *   literals    true / false / null, lowercase.
 *
 * The string scan skips plain bytes 16 at a time (SSE2 on x86-64, 8 at a time with word
 * arithmetic elsewhere): only quotes, backslashes, control bytes and non-ASCII bytes stop it.
 * From a non-ASCII byte, the run of raw content up to the next quote, backslash or control
 * byte is validated as UTF-8 as a whole. init_tables() must run once before any scan.
 */
#ifndef HEALTH_JSON_SCAN_H
#define HEALTH_JSON_SCAN_H

#include <stdint.h>
#include <string.h>

#include "_json_cursor.h"

/* The vector paths use GCC/clang builtins (count trailing zeros, per-function targets, CPU
 * detection); other compilers build the portable code. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__) && !defined(VET_PORTABLE)
#include <emmintrin.h>
#include <tmmintrin.h>
#define VET_SSE2 1
/* UTF-8 is validated 16 bytes at a time with SSSE3's byte shuffles where the CPU has them
 * (checked once at import); the x86-64 baseline does not promise them. */
#define VET_SSSE3 1
#endif

#include "_json_utf8.h"

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

/* The tables below and cpu_has_ssse3 are the module's only globals: filled once at import
 * (init_tables), process-wide and read-only afterwards, so scans in threads without the GIL
 * share them safely. Nothing tunes a scan through a global: limits come as arguments. */

/* 1 for the bytes a string holds as they are: printable ASCII other than '"' and '\\'. */
static unsigned char plain_string_byte[256];

/* 1 for the bytes a string may hold raw, once its UTF-8 is checked: any but '"', '\\' and
 * control bytes. */
static unsigned char content_byte[256];

/* Fills the byte tables and detects SSSE3: once, when the module is imported. */
static void init_tables(void)
{
    for (int c = 0x20; c < 0x100; c++) {
        content_byte[c] = (c != '"' && c != '\\');
        plain_string_byte[c] = c < 0x80 && content_byte[c];
    }
#ifdef VET_SSSE3
    cpu_has_ssse3 = __builtin_cpu_supports("ssse3");
#endif
}

/* The first byte at or after p that is not a plain string byte (or end). */
static ALWAYS_INLINE cursor skip_plain_string_bytes(cursor p, cursor end)
{
#ifdef VET_SSE2
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i space = _mm_set1_epi8(0x20);
    while (end - p >= 16) {
        __m128i chunk = _mm_loadu_si128((const __m128i *)p);
        /* A signed compare below 0x20 flags both control bytes and bytes >= 0x80 (negative). */
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)),
                                    _mm_cmplt_epi8(chunk, space));
        unsigned mask = (unsigned)_mm_movemask_epi8(stop);
        if (mask != 0) {
            return p + __builtin_ctz(mask);
        }
        p += 16;
    }
#else
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    while (end - p >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        /* Each term sets a byte's high bit if that byte may stop the scan (exact for the
         * lowest such byte, which is all the bytewise loop below needs). */
        uint64_t quotes = word ^ (ones * '"'), backslashes = word ^ (ones * '\\');
        uint64_t stop = ((quotes - ones) & ~quotes) | ((backslashes - ones) & ~backslashes)
                        | (word - ones * 0x20) | word;
        if ((stop & highs) != 0) {
            break;
        }
        p += 8;
    }
#endif
    while (p < end && plain_string_byte[*p]) {
        p++;
    }
    return p;
}

static inline int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The code unit of the four hex digits at p, or -1. */
static inline long hex4(cursor p, cursor end)
{
    if (end - p < 4) {
        return -1;
    }
    long unit = 0;
    for (int i = 0; i < 4; i++) {
        int digit = hex_value(p[i]);
        if (digit < 0) {
            return -1;
        }
        unit = unit * 16 + digit;
    }
    return unit;
}

/* An escape whose backslash is just before p: the byte after it, or NULL. */
static inline cursor skip_escape(cursor p, cursor end)
{
    if (p >= end) {
        return NULL;
    }
    switch (*p) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return p + 1;
    case 'u':
        break;
    default:
        return NULL;
    }
    long unit = hex4(p + 1, end);
    if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) {
        return NULL; /* not four hex digits, or a low surrogate with no high one before it */
    }
    p += 5;
    if (unit < 0xD800 || unit > 0xDBFF) {
        return p;
    }
    /* a high surrogate: the low one must follow as the very next escape */
    if (end - p < 2 || p[0] != '\\' || p[1] != 'u') {
        return NULL;
    }
    unit = hex4(p + 2, end);
    return unit >= 0xDC00 && unit <= 0xDFFF ? p + 6 : NULL;
}

/* The first byte at or after p that is a quote, a backslash or a control byte (or end):
 * where a run of raw string content, ASCII or not, ends. */
static inline cursor skip_content_bytes(cursor p, cursor end)
{
#ifdef VET_SSE2
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i backslash = _mm_set1_epi8('\\');
    const __m128i last_control = _mm_set1_epi8(0x1F);
    while (end - p >= 16) {
        __m128i chunk = _mm_loadu_si128((const __m128i *)p);
        /* unsigned: a byte is a control byte when min(byte, 0x1F) is the byte itself */
        __m128i control = _mm_cmpeq_epi8(_mm_min_epu8(chunk, last_control), chunk);
        __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(chunk, quote), _mm_cmpeq_epi8(chunk, backslash)),
                                    control);
        unsigned mask = (unsigned)_mm_movemask_epi8(stop);
        if (mask != 0) {
            return p + __builtin_ctz(mask);
        }
        p += 16;
    }
#endif
    while (p < end && content_byte[*p]) {
        p++;
    }
    return p;
}

/* A string whose opening quote is just before p: the byte after its closing quote, or NULL. */
static ALWAYS_INLINE cursor skip_string(cursor p, cursor end)
{
    for (;;) {
        p = skip_plain_string_bytes(p, end);
        if (p >= end) {
            return NULL; /* unterminated */
        }
        unsigned char c = *p;
        if (c == '"') {
            return p + 1;
        }
        if (c == '\\') {
            p = skip_escape(p + 1, end);
        }
        else if (c >= 0x80) {
            /* non-ASCII text: the whole run of raw content from here is checked as UTF-8 */
            cursor run_end = skip_content_bytes(p, end);
            p = utf8_valid(p, run_end) ? run_end : NULL;
        }
        else {
            return NULL; /* a raw control byte */
        }
        if (p == NULL) {
            return NULL;
        }
    }
}

/* The literal `word` (true, false or null) at p: the byte after it, or NULL. */
static inline cursor skip_literal(cursor p, cursor end, const char *word, Py_ssize_t length)
{
    return end - p >= length && memcmp(p, word, (size_t)length) == 0 ? p + length : NULL;
}

#endif /* HEALTH_JSON_SCAN_H */
