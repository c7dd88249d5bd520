/*
 * UTF-8 well-formedness of a string's raw bytes, as orjson requires it: no overlong forms, no
 * encoded surrogates (ED A0-BF ..), nothing past U+10FFFF, no truncated or stray continuation
 * bytes. (Bytes >= 0x80 outside strings are never valid JSON, so validating UTF-8 inside
 * strings validates the whole input, as orjson does.) Two checks with one answer: 16 bytes at
 * a time where the CPU has SSSE3 (cpu_has_ssse3, set once at import by init_tables in
 * _json_scan.h), else sequence by sequence. Its own header because the vector check is long
 * and self-contained; included by _json_scan.h, which sets VET_SSSE3 where it can be built.
 */
#ifndef HEALTH_JSON_UTF8_H
#define HEALTH_JSON_UTF8_H

#include "_json_cursor.h"

#ifdef VET_SSSE3
/* Whether the CPU has SSSE3: set once by init_tables at import, process-wide and never
 * changed afterwards (both UTF-8 checks give the same answer; this only picks the faster). */
static int cpu_has_ssse3;
#endif

/* A well-formed UTF-8 sequence of 2-4 bytes at p (p[0] >= 0x80): the byte after it, or NULL.
 * Each lead byte fixes the range of its first continuation byte, which rules out overlong
 * forms (C0, C1, E0 80-9F, F0 80-8F), surrogates (ED A0-BF) and code points past U+10FFFF
 * (F4 90-BF, F5-FF). */
static inline cursor skip_utf8_sequence(cursor p, cursor end)
{
    unsigned char lead = p[0], low = 0x80, high = 0xBF;
    Py_ssize_t length;
    if (lead < 0xC2) {
        return NULL; /* a continuation byte, or an overlong two-byte lead */
    }
    if (lead < 0xE0) {
        length = 2;
    }
    else if (lead < 0xF0) {
        length = 3;
        low = lead == 0xE0 ? 0xA0 : 0x80;
        high = lead == 0xED ? 0x9F : 0xBF;
    }
    else if (lead < 0xF5) {
        length = 4;
        low = lead == 0xF0 ? 0x90 : 0x80;
        high = lead == 0xF4 ? 0x8F : 0xBF;
    }
    else {
        return NULL;
    }
    if (end - p < length || p[1] < low || p[1] > high) {
        return NULL;
    }
    for (Py_ssize_t i = 2; i < length; i++) {
        if ((p[i] & 0xC0) != 0x80) {
            return NULL;
        }
    }
    return p + length;
}

/* Is [p, q) well-formed UTF-8, sequence by sequence? (q: an ASCII byte or the end, so a
 * sequence must be complete before it.) */
static int utf8_valid_bytewise(cursor p, cursor q)
{
    while (p < q) {
        if (*p < 0x80) {
            p++;
            continue;
        }
        p = skip_utf8_sequence(p, q);
        if (p == NULL) {
            return 0;
        }
    }
    return 1;
}

#ifdef VET_SSSE3
/* Is [p, q) well-formed UTF-8? Every byte is judged with the one to three bytes before it,
 * 16 at a time. Three table lookups (the previous byte's high and low nibble, this byte's
 * high nibble) each give the set of rule violations that nibble is compatible with; a
 * violation happens where all three agree:
 *
 *   TOO_SHORT   a lead byte not followed by a continuation byte
 *   TOO_LONG    a continuation byte after an ASCII byte
 *   TWO_CONTS   a continuation byte after a continuation byte (allowed only as the 3rd/4th
 *               byte of a sequence: checked against the bytes two and three back)
 *   OVERLONG_2  C0, C1 then anything; OVERLONG_3 E0 then 80-9F; OVERLONG_4 F0 then 80-8F
 *   SURROGATE   ED then A0-BF
 *   TOO_LARGE   F4 then 90-BF, or F5-FF then a continuation byte (TOO_LARGE_1000 covers the
 *               80-8F half for F5-FF; it shares a bit with OVERLONG_4, whose lead bytes differ)
 */
#define TOO_SHORT (1 << 0)
#define TOO_LONG (1 << 1)
#define OVERLONG_3 (1 << 2)
#define TOO_LARGE (1 << 3)
#define SURROGATE (1 << 4)
#define OVERLONG_2 (1 << 5)
#define TOO_LARGE_1000 (1 << 6)
#define OVERLONG_4 (1 << 6)
#define TWO_CONTS (1 << 7)
#define CARRY (TOO_SHORT | TOO_LONG | TWO_CONTS)

__attribute__((target("ssse3"))) static inline __m128i utf8_chunk_errors(__m128i input, __m128i previous)
{
    const __m128i low_nibble = _mm_set1_epi8(0x0F);
    /* by the previous byte's high nibble: 0-7 ASCII, 8-B continuation, C-F leads */
    const __m128i byte_1_high = _mm_setr_epi8(
        TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG, TOO_LONG,
        TWO_CONTS, TWO_CONTS, TWO_CONTS, TWO_CONTS,
        TOO_SHORT | OVERLONG_2,
        TOO_SHORT,
        TOO_SHORT | OVERLONG_3 | SURROGATE,
        (char)(TOO_SHORT | TOO_LARGE | TOO_LARGE_1000 | OVERLONG_4));
    /* by the previous byte's low nibble */
    const __m128i byte_1_low = _mm_setr_epi8(
        (char)(CARRY | OVERLONG_3 | OVERLONG_2 | OVERLONG_4),
        (char)(CARRY | OVERLONG_2),
        (char)CARRY, (char)CARRY,
        (char)(CARRY | TOO_LARGE),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000), (char)(CARRY | TOO_LARGE | TOO_LARGE_1000),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000), (char)(CARRY | TOO_LARGE | TOO_LARGE_1000),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000), (char)(CARRY | TOO_LARGE | TOO_LARGE_1000),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000), (char)(CARRY | TOO_LARGE | TOO_LARGE_1000),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000 | SURROGATE),
        (char)(CARRY | TOO_LARGE | TOO_LARGE_1000), (char)(CARRY | TOO_LARGE | TOO_LARGE_1000));
    /* by this byte's high nibble */
    const __m128i byte_2_high = _mm_setr_epi8(
        TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT,
        (char)(TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE_1000 | OVERLONG_4),
        (char)(TOO_LONG | OVERLONG_2 | TWO_CONTS | OVERLONG_3 | TOO_LARGE),
        (char)(TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE),
        (char)(TOO_LONG | OVERLONG_2 | TWO_CONTS | SURROGATE | TOO_LARGE),
        TOO_SHORT, TOO_SHORT, TOO_SHORT, TOO_SHORT);

    __m128i prev1 = _mm_alignr_epi8(input, previous, 15); /* each byte's predecessor */
    __m128i prev2 = _mm_alignr_epi8(input, previous, 14);
    __m128i prev3 = _mm_alignr_epi8(input, previous, 13);
    __m128i special = _mm_and_si128(
        _mm_and_si128(_mm_shuffle_epi8(byte_1_high, _mm_and_si128(_mm_srli_epi16(prev1, 4), low_nibble)),
                      _mm_shuffle_epi8(byte_1_low, _mm_and_si128(prev1, low_nibble))),
        _mm_shuffle_epi8(byte_2_high, _mm_and_si128(_mm_srli_epi16(input, 4), low_nibble)));
    /* the 3rd byte after an E0-FF lead and the 4th after an F0-FF lead must be continuation
     * bytes (the only place TWO_CONTS is right): saturating subtraction leaves the high bit
     * set exactly for those leads */
    __m128i third = _mm_subs_epu8(prev2, _mm_set1_epi8((char)(0xE0 - 0x80)));
    __m128i fourth = _mm_subs_epu8(prev3, _mm_set1_epi8((char)(0xF0 - 0x80)));
    __m128i must_continue = _mm_and_si128(_mm_or_si128(third, fourth), _mm_set1_epi8((char)0x80));
    return _mm_xor_si128(must_continue, special);
}

__attribute__((target("ssse3"))) static int utf8_valid_ssse3(cursor p, cursor q)
{
    __m128i previous = _mm_setzero_si128(); /* the region follows an ASCII byte */
    __m128i errors = _mm_setzero_si128();
    for (; q - p >= 16; p += 16) {
        __m128i input = _mm_loadu_si128((const __m128i *)p);
        errors = _mm_or_si128(errors, utf8_chunk_errors(input, previous));
        previous = input;
    }
    /* the rest, padded with NUL bytes: at least one, so a sequence cut short by q shows */
    unsigned char tail[16] = {0};
    memcpy(tail, p, (size_t)(q - p));
    errors = _mm_or_si128(errors, utf8_chunk_errors(_mm_loadu_si128((const __m128i *)tail), previous));
    return _mm_movemask_epi8(_mm_cmpeq_epi8(errors, _mm_setzero_si128())) == 0xFFFF;
}
#endif

static inline int utf8_valid(cursor p, cursor q)
{
#ifdef VET_SSSE3
    if (cpu_has_ssse3) {
        return utf8_valid_ssse3(p, q);
    }
#endif
    return utf8_valid_bytewise(p, q);
}

#endif /* HEALTH_JSON_UTF8_H */
