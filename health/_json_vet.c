/*
 * health._json_vet: is a byte string one JSON text that orjson reads to the values msgspec
 * decodes, nested at most N containers deep? One forward pass over the bytes, no allocation,
 * no copy, no tape: the callers only need the yes/no, and then decode with msgspec themselves.
 *
 * Acceptance (a refusal is always safe: the callers then take orjson's full path):
 *
 *   document    whitespace* value whitespace*, nothing else; empty input refused. Whitespace
 *               is exactly space, tab, line feed, carriage return (so a byte-order mark, a form
 *               feed, a NUL or a non-breaking space anywhere outside a string is refused).
 *   value       object, array, string, number, or the literals true / false / null (lowercase).
 *   containers  no trailing comma, keys are strings, one ':' per member. Depth counts
 *               containers: a scalar document is 0 deep, "{}" 1, "[[1]]" 2. orjson refuses
 *               documents more than 1024 deep, so a larger limit acts as 1024.
 *   strings     bytes 0x00-0x1F refused raw; escapes are \" \\ \/ \b \f \n \r \t and \uXXXX
 *               (hex digits either case); a \u escape in D800-DBFF must be followed at once by
 *               a \u escape in DC00-DFFF, and one in DC00-DFFF may not stand alone. Raw bytes
 *               must be well-formed UTF-8: no overlong forms, no encoded surrogates
 *               (ED A0-BF ..), nothing past U+10FFFF, no truncated or stray continuation bytes.
 *               (Bytes >= 0x80 outside strings are never valid JSON, so validating UTF-8 inside
 *               strings validates the whole input, as orjson does.)
 *   numbers     -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?, then by range:
 *               - an integer (no fraction, no exponent) must lie in [-2^63, 2^64 - 1]: orjson
 *                 reads anything wider as a float where msgspec keeps an exact int;
 *               - any other number must round to a finite double: orjson refuses one that
 *                 parses to infinity. Underflow (to zero or a subnormal) is accepted: both
 *                 libraries round correctly.
 *
 * The string scan skips plain bytes 16 at a time (SSE2 on x86-64, 8 at a time with word
 * arithmetic elsewhere): only quotes, backslashes, control bytes and non-ASCII bytes stop it.
 * From a non-ASCII byte, the run of raw content up to the next quote, backslash or control
 * byte is validated as UTF-8 as a whole: 16 bytes at a time where the CPU has SSSE3, else
 * sequence by sequence.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* The vector paths use GCC/clang builtins (count trailing zeros, per-function targets, CPU
 * detection); other compilers build the portable code. */
#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#if defined(__SSE2__) && !defined(VET_PORTABLE)
#include <emmintrin.h>
#include <tmmintrin.h>
#include <immintrin.h>
#define VET_SSE2 1
/* UTF-8 is validated 16 bytes at a time with SSSE3's byte shuffles where the CPU has them
 * (checked once at import); the x86-64 baseline does not promise them. */
#define VET_SSSE3 1
#endif
#else
#define ALWAYS_INLINE inline
#endif

/* orjson's own nesting limit: a deeper document is refused whatever the caller allows. */
#define ORJSON_MAX_DEPTH 1024

/* Inputs at least this long are vetted without the GIL. Below it, handing the GIL over and
 * waiting to take it back (up to the interpreter's switch interval when another thread runs)
 * costs more than it lets others do: a 1 MiB document takes 0.06-0.5 ms to vet. */
#define RELEASE_GIL_BYTES (1u << 20)

typedef const unsigned char *cursor;

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static inline int is_whitespace(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static inline cursor skip_whitespace(cursor p, cursor end)
{
    while (p < end && is_whitespace(*p)) {
        p++;
    }
    return p;
}

/* ---- strings ------------------------------------------------------------------------- */

/* 1 for the bytes a string holds as they are: printable ASCII other than '"' and '\\'. */
static unsigned char plain_string_byte[256];

/* 1 for the bytes a string may hold raw, once its UTF-8 is checked: any but '"', '\\' and
 * control bytes. */
static unsigned char content_byte[256];

#ifdef VET_SSSE3
static int cpu_has_ssse3;
#endif

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

/* ---- numbers ------------------------------------------------------------------------- */

/* 2^1024 - 2^970: halfway between the largest double and 2^1024. A decimal value at or past
 * it rounds to infinity (at exactly halfway, to even, which is 2^1024). */
static const char halfway_to_overflow[] =
    "17976931348623158079372897140530341507993413271003782693617377898044496829276475094664901797758720"
    "70963302864166928879109465555478519404026306574886715058206819089020007083836762738548458177115317"
    "64475730270069855571366959622842914819860834936475292719074168444365510704342711559699508093042880"
    "177904174497792";
#define HALFWAY_DIGITS ((Py_ssize_t)(sizeof(halfway_to_overflow) - 1))
#define HALFWAY_EXPONENT 308

/* An integer's digits (no sign, no leading zero unless the integer is 0): within the 64-bit
 * range orjson keeps as an int? [-2^63, 2^64 - 1] */
static int integer_in_range(cursor digits, Py_ssize_t count, int negative)
{
    if (count < 19) {
        return 1; /* below 10^18 */
    }
    if (count > 20) {
        return 0; /* at least 10^20 > 2^64 */
    }
    uint64_t value = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        unsigned digit = (unsigned)(digits[i] - '0');
        if (value > (UINT64_MAX - digit) / 10) {
            return 0; /* past 2^64 - 1 */
        }
        value = value * 10 + digit;
    }
    return !negative || value <= ((uint64_t)1 << 63);
}

/* Does the decimal value with significant digits from `first` (skipping a '.'), up to
 * `last`, and decimal exponent HALFWAY_EXPONENT stay below halfway_to_overflow? */
static int below_overflow(cursor first, cursor last)
{
    Py_ssize_t i = 0;
    for (cursor p = first; p < last; p++) {
        if (*p == '.') {
            continue;
        }
        if (i == HALFWAY_DIGITS) {
            if (*p != '0') {
                return 0; /* equal so far, then more: past halfway */
            }
            continue;
        }
        char expected = halfway_to_overflow[i++];
        if ((char)*p != expected) {
            return (char)*p < expected;
        }
    }
    /* the digits ran out equal to a prefix: below exactly when halfway has a non-zero digit left */
    for (; i < HALFWAY_DIGITS; i++) {
        if (halfway_to_overflow[i] != '0') {
            return 1;
        }
    }
    return 0;
}

/* A fraction or exponent number: does it round to a finite double? `integer` holds the
 * integer digits (`integer_count`), `fraction` .. `fraction_end` the fraction digits (empty
 * when there is none), `exponent` the decimal exponent (saturated, which still decides any
 * magnitude correctly). */
static int float_is_finite(cursor integer, Py_ssize_t integer_count, cursor fraction, cursor fraction_end,
                           int64_t exponent)
{
    cursor first = integer;
    int64_t magnitude; /* the decimal exponent of the first significant digit */
    if (integer[0] != '0') {
        magnitude = (int64_t)integer_count - 1 + exponent;
    }
    else {
        first = fraction;
        while (first < fraction_end && *first == '0') {
            first++;
        }
        if (first == fraction_end) {
            return 1; /* zero, whatever the exponent */
        }
        magnitude = -(int64_t)(first - fraction) - 1 + exponent;
    }
    if (magnitude != HALFWAY_EXPONENT) {
        return magnitude < HALFWAY_EXPONENT;
    }
    return below_overflow(first, fraction < fraction_end ? fraction_end : integer + integer_count);
}

/* A number starting at p ('-' or a digit): the byte after it, or NULL if the syntax is wrong
 * or orjson would refuse it or read a value msgspec does not. */
static cursor skip_number(cursor p, cursor end)
{
    int negative = *p == '-';
    p += negative;
    cursor integer = p;
    if (p >= end || !is_digit(*p)) {
        return NULL;
    }
    if (*p == '0') {
        p++; /* a leading zero stands alone: "01" leaves "1" to be refused as trailing content */
    }
    else {
        while (p < end && is_digit(*p)) {
            p++;
        }
    }
    Py_ssize_t integer_count = p - integer;
    cursor fraction = p, fraction_end = p;
    int is_integer = 1;
    if (p < end && *p == '.') {
        fraction = ++p;
        while (p < end && is_digit(*p)) {
            p++;
        }
        if (p == fraction) {
            return NULL;
        }
        fraction_end = p;
        is_integer = 0;
    }
    int64_t exponent = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int exponent_negative = 0;
        if (p < end && (*p == '+' || *p == '-')) {
            exponent_negative = *p == '-';
            p++;
        }
        if (p >= end || !is_digit(*p)) {
            return NULL;
        }
        for (; p < end && is_digit(*p); p++) {
            if (exponent < 1000000000) { /* saturate: far past any double either way */
                exponent = exponent * 10 + (*p - '0');
            }
        }
        exponent = exponent_negative ? -exponent : exponent;
        is_integer = 0;
    }
    if (is_integer) {
        return integer_in_range(integer, integer_count, negative) ? p : NULL;
    }
    return float_is_finite(integer, integer_count, fraction, fraction_end, exponent) ? p : NULL;
}

/* ---- the document -------------------------------------------------------------------- */

static inline cursor skip_literal(cursor p, cursor end, const char *word, Py_ssize_t length)
{
    return end - p >= length && memcmp(p, word, (size_t)length) == 0 ? p + length : NULL;
}

/* 1 if [p, end) is one JSON text as described at the top, at most max_depth containers deep. */
static int vet_document(cursor p, cursor end, int max_depth)
{
    /* open[d] is the closer the container at depth d expects: '}' or ']' */
    unsigned char open[ORJSON_MAX_DEPTH + 1];
    int depth = 0;

    p = skip_whitespace(p, end);
value: /* p at the first byte of a value (whitespace already skipped) */
    if (p >= end) {
        return 0;
    }
    switch (*p) {
    case '{':
        if (++depth > max_depth) {
            return 0;
        }
        open[depth] = '}';
        p = skip_whitespace(p + 1, end);
        if (p < end && *p == '}') {
            p++;
            depth--;
            goto after_value;
        }
        goto member;
    case '[':
        if (++depth > max_depth) {
            return 0;
        }
        open[depth] = ']';
        p = skip_whitespace(p + 1, end);
        if (p < end && *p == ']') {
            p++;
            depth--;
            goto after_value;
        }
        goto value;
    case '"':
        p = skip_string(p + 1, end);
        break;
    case 't':
        p = skip_literal(p, end, "true", 4);
        break;
    case 'f':
        p = skip_literal(p, end, "false", 5);
        break;
    case 'n':
        p = skip_literal(p, end, "null", 4);
        break;
    default:
        if (*p != '-' && !is_digit(*p)) {
            return 0;
        }
        p = skip_number(p, end);
        break;
    }
    if (p == NULL) {
        return 0;
    }

after_value: /* just past a complete value: a separator, a closer, or the end */
    p = skip_whitespace(p, end);
    if (depth == 0) {
        return p == end;
    }
    if (p >= end) {
        return 0;
    }
    if (*p == ',') {
        p = skip_whitespace(p + 1, end);
        if (open[depth] == ']') {
            goto value;
        }
        goto member;
    }
    if (*p != open[depth]) {
        return 0;
    }
    p++;
    depth--;
    goto after_value;

member: /* p at an object member's key (whitespace already skipped) */
    if (p >= end || *p != '"') {
        return 0;
    }
    p = skip_string(p + 1, end);
    if (p == NULL) {
        return 0;
    }
    p = skip_whitespace(p, end);
    if (p >= end || *p != ':') {
        return 0;
    }
    p = skip_whitespace(p + 1, end);
    goto value;
}

/* ---- vet_compact: the vetter and the payload-span copy in one pass ---------------------- */

/*
 * The same acceptance as vet_document, found in two stages over the bytes, as the batch fast
 * path also wants the line's payload-span copy (see compact() below):
 *
 * Stage 1 reads 64-byte blocks and makes one bit per byte: quotes, backslashes, whitespace,
 * the operators {}[]:, , control bytes, bytes >= 0x80. A byte is escaped when an odd run of
 * backslashes precedes it; the in-string mask is the running parity of the unescaped quotes
 * (a prefix XOR: one carry-less multiply by all ones where the CPU has PCLMUL), carried from
 * block to block. Each block then yields, in order, the positions the grammar needs: every
 * operator outside strings, every opening quote, and the first byte of every run of other
 * bytes outside strings (a scalar: number or literal, or garbage). In the same block, stage 1
 * refuses a control byte inside a string, checks each escape (its letter, \u's four hex
 * digits and surrogate pairing) and, for blocks holding a byte >= 0x80, validates UTF-8 with
 * the three-nibble tables of utf8_chunk_errors, carried across blocks.
 *
 * Stage 2 walks those positions with the grammar of vet_document: containers, depth, one
 * ':' per member, commas; a scalar is parsed in place (skip_number, the literals) and must
 * end where its run ends. Between two positions lie only whitespace, string contents (already
 * checked by stage 1) or the rest of a scalar's run, so every byte is judged. Stage 1 runs a
 * few kilobytes ahead of stage 2 into a fixed buffer, so nothing is allocated per document
 * but the copy's cut list.
 *
 * Where a backslash or a quote lies outside a string, the masks may misplace strings after
 * it; such a document is invalid JSON, and a backslash outside strings always reaches stage 2
 * as (part of) a scalar, which it refuses. So the answer is exactly vet_document's.
 */

/* Positions stage 1 hands over per refill: room for one more block past the threshold. */
#define INDEX_CAPACITY 4096
#define INDEX_SLACK 64

/* The bytes that may follow a scalar: whitespace, an operator, a quote (a string right after
 * a scalar is refused by the grammar), and the document's end (checked apart). */
static unsigned char ends_scalar[256];

static void init_fused_tables(void)
{
    static const char enders[] = " \t\n\r{}[]:,\"";
    for (const char *c = enders; *c; c++) {
        ends_scalar[(unsigned char)*c] = 1;
    }
}

typedef struct {
    uint64_t quote, backslash, space, op, control, high;
} BlockBits;

#ifdef VET_SSE2
static inline uint64_t bits16(__m128i hits) { return (uint64_t)(unsigned)_mm_movemask_epi8(hits); }

static inline BlockBits block_bits_sse2(const unsigned char *block)
{
    BlockBits b = {0, 0, 0, 0, 0, 0};
    const __m128i last_control = _mm_set1_epi8(0x1F), lower = _mm_set1_epi8(0x20);
    for (int i = 0; i < 4; i++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(block + 16 * i));
        __m128i folded = _mm_or_si128(x, lower);
        int shift = 16 * i;
        b.quote |= bits16(_mm_cmpeq_epi8(x, _mm_set1_epi8('"'))) << shift;
        b.backslash |= bits16(_mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))) << shift;
        b.space |= bits16(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, lower), _mm_cmpeq_epi8(x, _mm_set1_epi8('\t'))),
                                       _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\n')),
                                                    _mm_cmpeq_epi8(x, _mm_set1_epi8('\r')))))
                   << shift;
        b.op |= bits16(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(folded, _mm_set1_epi8('{')),
                                                 _mm_cmpeq_epi8(folded, _mm_set1_epi8('}'))),
                                    _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(':')),
                                                 _mm_cmpeq_epi8(x, _mm_set1_epi8(',')))))
                << shift;
        b.control |= bits16(_mm_cmpeq_epi8(_mm_min_epu8(x, last_control), x)) << shift;
        b.high |= bits16(x) << shift;
    }
    return b;
}
#define block_bits_baseline block_bits_sse2
#else
static inline BlockBits block_bits_portable(const unsigned char *block)
{
    BlockBits b = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 64; i++) {
        unsigned char c = block[i], folded = c | 0x20;
        uint64_t bit = (uint64_t)1 << i;
        b.quote |= c == '"' ? bit : 0;
        b.backslash |= c == '\\' ? bit : 0;
        b.space |= is_whitespace(c) ? bit : 0;
        b.op |= (folded == '{' || folded == '}' || c == ':' || c == ',') ? bit : 0;
        b.control |= c < 0x20 ? bit : 0;
        b.high |= c >= 0x80 ? bit : 0;
    }
    return b;
}
#define block_bits_baseline block_bits_portable
#endif

static inline uint64_t prefix_xor_shifts(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* The bytes escaped by a backslash; *carry: whether the next block's first byte is (it is on
 * entry when this block's first byte is). Within a run of backslashes they pair up from its
 * first: a byte is escaped when the run just before it has odd length, which is when the
 * byte and the run's first backslash lie at positions of different parity. Adding a run's
 * first bit to the run carries through it, which marks the runs that start at even
 * positions. */
static inline uint64_t escaped_bytes(uint64_t backslash, int *carry)
{
    const uint64_t even = 0x5555555555555555ULL;
    uint64_t escaped = (uint64_t)*carry;
    backslash &= ~escaped; /* an escaped backslash escapes nothing */
    uint64_t starts = backslash & ~(backslash << 1);
    uint64_t from_even = ((backslash + (starts & even)) ^ backslash) & backslash;
    uint64_t from_odd = backslash & ~from_even;
    escaped |= ((from_even << 1) & ~even) | ((from_odd << 1) & even);
    /* the last byte is a backslash that escapes the next block's first */
    *carry = (int)((backslash & ~escaped) >> 63);
    return escaped;
}

/* The bytes that may follow a backslash: " \ / b f n r t, and u (checked further). */
typedef struct {
    uint64_t letter, u;
} EscapeBits;

#ifdef VET_SSE2
static inline EscapeBits escape_bits(const unsigned char *block)
{
    EscapeBits e = {0, 0};
    for (int i = 0; i < 4; i++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(block + 16 * i));
        __m128i hit = _mm_or_si128(
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                         _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('/')), _mm_cmpeq_epi8(x, _mm_set1_epi8('b')))),
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('f')), _mm_cmpeq_epi8(x, _mm_set1_epi8('n'))),
                         _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('r')), _mm_cmpeq_epi8(x, _mm_set1_epi8('t')))));
        e.letter |= bits16(hit) << (16 * i);
        e.u |= bits16(_mm_cmpeq_epi8(x, _mm_set1_epi8('u'))) << (16 * i);
    }
    return e;
}
#else
static inline EscapeBits escape_bits(const unsigned char *block)
{
    EscapeBits e = {0, 0};
    for (int i = 0; i < 64; i++) {
        unsigned char c = block[i];
        uint64_t bit = (uint64_t)1 << i;
        e.letter |= (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't')
                        ? bit : 0;
        e.u |= c == 'u' ? bit : 0;
    }
    return e;
}
#endif

typedef struct {
    cursor base, end, next; /* next: the first byte not yet indexed */
    uint32_t length;
    uint64_t in_string;     /* all ones while the next block starts inside a string */
    uint64_t scalar_carry;  /* 1 when the last byte indexed is part of a scalar run */
    int escape_carry;       /* the next block's first byte is escaped */
    cursor escapes_checked; /* a \u high surrogate's low half, checked with it, ends here */
    int error;
    int utf8_pending;       /* the last block held a byte >= 0x80 */
#ifdef VET_SSE2
    __m128i utf8_previous, utf8_errors;
#endif
    int saw_high;           /* any byte >= 0x80 (for the bytewise UTF-8 check) */
    uint32_t count, pos;
    uint32_t index[INDEX_CAPACITY + INDEX_SLACK];
} Indexer;

/* 1 if a \u escape whose 'u' is in `us` (the block at `block`) is invalid: four hex digits,
 * and a surrogate pair's halves together (a low half is checked with its high half). */
static int check_unicode_escapes(Indexer *ix, cursor block, uint64_t us)
{
    for (; us; us &= us - 1) {
        cursor u = block + __builtin_ctzll(us);
        if (u < ix->escapes_checked) {
            continue;
        }
        cursor after = skip_escape(u, ix->end);
        if (after == NULL) {
            return 1;
        }
        ix->escapes_checked = after;
    }
    return 0;
}

/* Writes the positions of `bits` (block at offset `at`) at out + *count. */
static ALWAYS_INLINE void write_positions(uint32_t *out, uint32_t *count, uint32_t at, uint64_t bits)
{
    out += *count;
    *count += (uint32_t)__builtin_popcountll(bits);
    while (bits) {
        *out++ = at + (uint32_t)__builtin_ctzll(bits);
        bits &= bits - 1;
    }
}

#if defined(VET_SSE2) && defined(VET_SSSE3)
/* The same, eight positions at a time without a branch per position: past the last one,
 * tzcnt of 0 writes 64 into the slack, which the count leaves unread. */
__attribute__((target("bmi"))) static ALWAYS_INLINE void write_positions_bmi(uint32_t *out, uint32_t *count, uint32_t at,
                                                                            uint64_t bits)
{
    out += *count;
    uint32_t written = (uint32_t)__builtin_popcountll(bits);
    *count += written;
    for (uint32_t done = 0;; done += 8) {
        for (int k = 0; k < 8; k++) {
            out[done + (uint32_t)k] = at + (uint32_t)_tzcnt_u64(bits);
            bits = _blsr_u64(bits);
        }
        if (done + 8 >= written) {
            break;
        }
    }
}
#endif

/* Stage 1's state from block to block, kept in registers while a run of blocks is indexed. */
typedef struct {
    uint64_t in_string;    /* all ones while the next block starts inside a string */
    uint64_t scalar_carry; /* 1 when the last byte indexed is part of a scalar run */
    int escape_carry;      /* the next block's first byte is escaped */
    int error;
    uint32_t count;
} Carry;

/* One block's positions (the block's first byte at offset `at`). */
static ALWAYS_INLINE void index_block(Indexer *ix, Carry *carry, const unsigned char *block, uint32_t at, BlockBits b,
                                      uint64_t (*parity_of)(uint64_t),
                                      void (*write)(uint32_t *, uint32_t *, uint32_t, uint64_t))
{
    uint64_t quotes = b.quote;
    if (b.backslash | (uint64_t)carry->escape_carry) {
        uint64_t escaped = escaped_bytes(b.backslash, &carry->escape_carry);
        EscapeBits e = escape_bits(block);
        quotes &= ~escaped;
        carry->error |= (escaped & ~(e.letter | e.u)) != 0;
        if (escaped & e.u) {
            carry->error |= check_unicode_escapes(ix, ix->base + at, escaped & e.u);
        }
    }
    uint64_t inside = parity_of(quotes) ^ carry->in_string; /* the opening quote and the contents */
    carry->in_string = (uint64_t)((int64_t)inside >> 63);
    uint64_t string = inside | quotes;
    carry->error |= (b.control & string) != 0; /* a raw control byte in a string */
    uint64_t scalar = ~(string | b.space | b.op);
    uint64_t scalar_starts = scalar & ~((scalar << 1) | carry->scalar_carry);
    carry->scalar_carry = scalar >> 63;
    write(ix->index, &carry->count, at, (b.op & ~string) | (quotes & inside) | scalar_starts);
}

#ifdef VET_SSE2
/* UTF-8 of one block (see utf8_chunk_errors), carried across blocks; an ASCII block only
 * closes what the one before left open. */
#define CHECK_UTF8_BLOCK(block, high)                                                                      \
    do {                                                                                                   \
        if (high) {                                                                                        \
            for (int k = 0; k < 4; k++) {                                                                  \
                __m128i chunk = _mm_loadu_si128((const __m128i *)((block) + 16 * k));                      \
                ix->utf8_errors = _mm_or_si128(ix->utf8_errors, utf8_chunk_errors(chunk, ix->utf8_previous)); \
                ix->utf8_previous = chunk;                                                                 \
            }                                                                                              \
            ix->utf8_pending = 1;                                                                          \
        }                                                                                                  \
        else if (ix->utf8_pending) {                                                                       \
            __m128i chunk = _mm_loadu_si128((const __m128i *)(block));                                     \
            ix->utf8_errors = _mm_or_si128(ix->utf8_errors, utf8_chunk_errors(chunk, ix->utf8_previous));  \
            ix->utf8_previous = _mm_setzero_si128();                                                       \
            ix->utf8_pending = 0;                                                                          \
        }                                                                                                  \
    } while (0)
#endif

/* Indexes blocks until the buffer is nearly full or the bytes end. use_vector_utf8: the
 * CPU has SSSE3 (else UTF-8 is checked bytewise once the last block is indexed). */
static ALWAYS_INLINE void index_blocks(Indexer *ix, BlockBits (*bits_of)(const unsigned char *),
                                       uint64_t (*parity_of)(uint64_t),
                                       void (*write)(uint32_t *, uint32_t *, uint32_t, uint64_t), int use_vector_utf8)
{
    Carry carry = {ix->in_string, ix->scalar_carry, ix->escape_carry, 0, 0};
    cursor next = ix->next, end = ix->end, base = ix->base;
    int saw_high = 0;
    (void)use_vector_utf8;
    while (end - next >= 64 && carry.count <= INDEX_CAPACITY && !carry.error) {
        BlockBits b = bits_of(next);
        if (b.high) {
            saw_high = 1;
#ifdef VET_SSE2
            if (use_vector_utf8) {
                CHECK_UTF8_BLOCK(next, 1);
            }
#endif
        }
#ifdef VET_SSE2
        else if (use_vector_utf8 && ix->utf8_pending) {
            CHECK_UTF8_BLOCK(next, 0);
        }
#endif
        index_block(ix, &carry, next, (uint32_t)(next - base), b, parity_of, write);
        next += 64;
    }
    if (next < end && end - next < 64 && carry.count <= INDEX_CAPACITY && !carry.error) {
        /* the last, partial block, padded with spaces */
        unsigned char padded[64];
        memset(padded, ' ', sizeof padded);
        memcpy(padded, next, (size_t)(end - next));
        BlockBits b = bits_of(padded);
        saw_high |= b.high != 0;
#ifdef VET_SSE2
        if (use_vector_utf8) {
            CHECK_UTF8_BLOCK(padded, b.high);
        }
#endif
        index_block(ix, &carry, padded, (uint32_t)(next - base), b, parity_of, write);
        next = end;
    }
    ix->next = next;
    ix->in_string = carry.in_string;
    ix->scalar_carry = carry.scalar_carry;
    ix->escape_carry = carry.escape_carry;
    ix->error = carry.error;
    ix->count = carry.count;
    ix->pos = 0;
    ix->saw_high |= saw_high;
    if (next == end && !ix->error) {
        /* the last block: no string may be left open, nor a UTF-8 sequence */
        ix->error = ix->in_string != 0;
#ifdef VET_SSE2
        if (use_vector_utf8) {
            if (ix->utf8_pending) {
                ix->utf8_errors = _mm_or_si128(ix->utf8_errors, utf8_chunk_errors(_mm_setzero_si128(), ix->utf8_previous));
            }
            ix->error |= _mm_movemask_epi8(_mm_cmpeq_epi8(ix->utf8_errors, _mm_setzero_si128())) != 0xFFFF;
        }
        else
#endif
        if (ix->saw_high && !utf8_valid_bytewise(ix->base, ix->end)) {
            ix->error = 1;
        }
    }
}

#if defined(VET_SSE2) && defined(VET_SSSE3)

__attribute__((target("avx2"))) static inline BlockBits block_bits_avx2(const unsigned char *block)
{
    BlockBits b = {0, 0, 0, 0, 0, 0};
    /* whitespace by a lookup on the low nibble: only ' ', '\t', '\n', '\r' find themselves */
    const __m256i spaces = _mm256_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0, ' ', 0, 0, 0,
                                            0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0);
    const __m256i last_control = _mm256_set1_epi8(0x1F), lower = _mm256_set1_epi8(0x20);
    for (int i = 0; i < 2; i++) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(block + 32 * i));
        __m256i folded = _mm256_or_si256(x, lower);
        int shift = 32 * i;
#define BITS32(v) ((uint64_t)(uint32_t)_mm256_movemask_epi8(v) << shift)
        b.quote |= BITS32(_mm256_cmpeq_epi8(x, _mm256_set1_epi8('"')));
        b.backslash |= BITS32(_mm256_cmpeq_epi8(x, _mm256_set1_epi8('\\')));
        b.space |= BITS32(_mm256_cmpeq_epi8(_mm256_shuffle_epi8(spaces, x), x));
        b.op |= BITS32(_mm256_or_si256(_mm256_or_si256(_mm256_cmpeq_epi8(folded, _mm256_set1_epi8('{')),
                                                       _mm256_cmpeq_epi8(folded, _mm256_set1_epi8('}'))),
                                       _mm256_or_si256(_mm256_cmpeq_epi8(x, _mm256_set1_epi8(':')),
                                                       _mm256_cmpeq_epi8(x, _mm256_set1_epi8(',')))));
        b.control |= BITS32(_mm256_cmpeq_epi8(_mm256_min_epu8(x, last_control), x));
        b.high |= BITS32(x);
#undef BITS32
    }
    return b;
}

/* The same with 64-byte registers: each comparison gives its 64 bits at once. */
__attribute__((target("avx512f,avx512bw"))) static inline BlockBits block_bits_avx512(const unsigned char *block)
{
    const __m512i spaces = _mm512_broadcast_i32x4(
        _mm_setr_epi8(' ', 0, 0, 0, 0, 0, 0, 0, 0, '\t', '\n', 0, 0, '\r', 0, 0));
    __m512i x = _mm512_loadu_si512((const void *)block);
    __m512i folded = _mm512_or_si512(x, _mm512_set1_epi8(0x20));
    BlockBits b;
    b.quote = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('"'));
    b.backslash = _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8('\\'));
    b.space = _mm512_cmpeq_epi8_mask(_mm512_shuffle_epi8(spaces, x), x);
    b.op = _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('{')) | _mm512_cmpeq_epi8_mask(folded, _mm512_set1_epi8('}')) |
           _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(':')) | _mm512_cmpeq_epi8_mask(x, _mm512_set1_epi8(','));
    b.control = _mm512_cmplt_epu8_mask(x, _mm512_set1_epi8(0x20));
    b.high = _mm512_movepi8_mask(x);
    return b;
}

__attribute__((target("pclmul"))) static inline uint64_t prefix_xor_clmul(uint64_t x)
{
    return (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_set_epi64x(0, (long long)x), _mm_set1_epi8(-1), 0));
}

__attribute__((target("avx2,pclmul,bmi"))) static void index_blocks_avx2(Indexer *ix)
{
    index_blocks(ix, block_bits_avx2, prefix_xor_clmul, write_positions_bmi, 1);
}

__attribute__((target("avx512f,avx512bw,avx2,pclmul,bmi"))) static void index_blocks_avx512(Indexer *ix)
{
    index_blocks(ix, block_bits_avx512, prefix_xor_clmul, write_positions_bmi, 1);
}

static int fused_has_avx2;   /* AVX2, PCLMUL and BMI, checked once at import */
static int fused_has_avx512; /* and AVX-512 BW */
#endif

#ifdef VET_SSSE3
__attribute__((target("ssse3"))) static void index_blocks_ssse3(Indexer *ix)
{
    index_blocks(ix, block_bits_baseline, prefix_xor_shifts, write_positions, 1);
}
#endif

static void index_blocks_plain(Indexer *ix) { index_blocks(ix, block_bits_baseline, prefix_xor_shifts, write_positions, 0); }

/* Stage 1's next run of blocks, for stage 2: ix->index holds ix->count positions (none once
 * every block is indexed, or stage 1 refused the document). */
static void refill_positions(Indexer *ix)
{
    if (ix->next == ix->end || ix->error) {
        ix->count = 0;
        return;
    }
#if defined(VET_SSE2) && defined(VET_SSSE3)
    if (fused_has_avx512) {
        index_blocks_avx512(ix);
    }
    else if (fused_has_avx2) {
        index_blocks_avx2(ix);
    }
    else
#endif
#ifdef VET_SSSE3
    if (cpu_has_ssse3) {
        index_blocks_ssse3(ix);
    }
    else
#endif
    {
        index_blocks_plain(ix);
    }
    if (ix->error) {
        ix->count = 0;
    }
}

/* The next position for stage 2 (read .. last: the ones stage 1 has handed over), or the
 * document's length when none is left. */
#define NEXT_POSITION()                                                                                    \
    (read < last ? *read++                                                                                 \
                 : (refill_positions(ix), read = ix->index, last = read + ix->count, read < last ? *read++ : ix->length))

/* ---- the payload-span copy, recorded by stage 2 ------------------------------------------ */

/* The StrictRecord fields' JSON names (health.strict_schema). health.payload_spans refuses
 * the native copy when the two lists differ, so a field added to the record is never cut. */
static const char *const KEPT_TOP_LEVEL_KEYS[] = {
    "_ng_task_index", "_ng_rollout_index", "_ng_attempt_index", "_ng_no_persist", "_ng_failure_class",
    "stage_index",    "_ng_rollout_id",    "response",          "ng_trajectory",
};
#define KEPT_TOP_LEVEL_COUNT (sizeof(KEPT_TOP_LEVEL_KEYS) / sizeof(KEPT_TOP_LEVEL_KEYS[0]))

/* What an object or array on the strict decode's path is: members of these are read by key. */
typedef enum { ROLE_NONE, ROLE_TOP, ROLE_TRAJECTORY, ROLE_CALLS, ROLE_CALL, ROLE_RESPONSE } Role;

/* What a member's key says of its value. */
typedef enum {
    VALUE_KEEP,
    VALUE_TRAJECTORY, /* an object value becomes ROLE_TRAJECTORY, else kept */
    VALUE_RESPONSE,   /* an object value becomes ROLE_RESPONSE, else kept */
    VALUE_CALLS,      /* an array value becomes ROLE_CALLS, else kept */
    VALUE_CUT_SKIPPED,
    VALUE_CUT_REQUEST,
    VALUE_CUT_RESPONSE,
} ValueAction;

typedef struct {
    Py_ssize_t start, end; /* offsets of a value replaced by 0 in the copy */
} Cut;

typedef struct {
    Py_ssize_t request_start, request_end, response_start, response_end; /* -1: absent */
} CallSpans;

typedef struct {
    Cut *cuts;
    Py_ssize_t cut_count, cut_capacity;
    CallSpans *calls; /* the elements of the last model_calls array seen */
    Py_ssize_t call_count, call_capacity;
    int gave_up;      /* a key on the path holds an escape: the line is decoded itself */
    int no_memory;
} Spans;

/* Room for one more element in a raw-allocated array (no GIL needed); 0, or -1. */
static int reserve(Spans *spans, void **items, Py_ssize_t count, Py_ssize_t *capacity, size_t size)
{
    if (count < *capacity) {
        return 0;
    }
    Py_ssize_t grown_capacity = *capacity ? *capacity * 2 : 32;
    void *grown = PyMem_RawRealloc(*items, (size_t)grown_capacity * size);
    if (grown == NULL) {
        spans->no_memory = 1;
        return -1;
    }
    *items = grown;
    *capacity = grown_capacity;
    return 0;
}

static int add_cut(Spans *spans, ValueAction action, Py_ssize_t from, Py_ssize_t to)
{
    if (reserve(spans, (void **)&spans->cuts, spans->cut_count, &spans->cut_capacity, sizeof(Cut)) < 0) {
        return -1;
    }
    spans->cuts[spans->cut_count++] = (Cut){from, to};
    if (action == VALUE_CUT_REQUEST || action == VALUE_CUT_RESPONSE) {
        CallSpans *call = &spans->calls[spans->call_count - 1]; /* the element being walked */
        /* a repeated key: the last value, as msgspec keeps it */
        if (action == VALUE_CUT_REQUEST) {
            call->request_start = from;
            call->request_end = to;
        }
        else {
            call->response_start = from;
            call->response_end = to;
        }
    }
    return 0;
}

static int add_call(Spans *spans)
{
    if (reserve(spans, (void **)&spans->calls, spans->call_count, &spans->call_capacity, sizeof(CallSpans)) < 0) {
        return -1;
    }
    spans->calls[spans->call_count++] = (CallSpans){-1, -1, -1, -1};
    return 0;
}

static inline int key_is(cursor key, Py_ssize_t length, const char *name)
{
    return (size_t)length == strlen(name) && memcmp(key, name, (size_t)length) == 0;
}

/* What the strict decode does with the value of key [key, key + length) in an object of
 * `role`. msgspec keeps the last value of a repeated key, so the calls restart at each
 * ng_trajectory and model_calls member. */
static ValueAction choose_action(Spans *spans, Role role, cursor key, Py_ssize_t length)
{
    switch (role) {
    case ROLE_TOP:
        if (key_is(key, length, "ng_trajectory")) {
            spans->call_count = 0;
            return VALUE_TRAJECTORY;
        }
        if (key_is(key, length, "response")) {
            return VALUE_RESPONSE;
        }
        for (size_t i = 0; i < KEPT_TOP_LEVEL_COUNT; i++) {
            if (key_is(key, length, KEPT_TOP_LEVEL_KEYS[i])) {
                return VALUE_KEEP;
            }
        }
        return VALUE_CUT_SKIPPED;
    case ROLE_TRAJECTORY:
        if (key_is(key, length, "model_calls")) {
            spans->call_count = 0;
            return VALUE_CALLS;
        }
        return VALUE_KEEP;
    case ROLE_CALL:
        if (key_is(key, length, "request")) {
            return VALUE_CUT_REQUEST;
        }
        return key_is(key, length, "response") ? VALUE_CUT_RESPONSE : VALUE_KEEP;
    case ROLE_RESPONSE:
        return key_is(key, length, "usage") ? VALUE_KEEP : VALUE_CUT_SKIPPED;
    default:
        return VALUE_KEEP;
    }
}

/* ---- stage 2 ----------------------------------------------------------------------------- */

typedef struct {
    Indexer ix;
    Spans spans;
} Fused;

/* The byte at a position, 0 at the document's end. */
static ALWAYS_INLINE unsigned char byte_at(const Indexer *ix, uint32_t i) { return i < ix->length ? ix->base[i] : 0; }

/* Just past the last non-whitespace byte before position i. */
static inline uint32_t trim_back(const Indexer *ix, uint32_t i)
{
    while (i > 0 && is_whitespace(ix->base[i - 1])) {
        i--;
    }
    return i;
}

/* A scalar at position i: 1 if it is a number or literal orjson reads to msgspec's value and
 * it fills its run (the byte after it ends a scalar). */
static ALWAYS_INLINE int scalar_ok(const Indexer *ix, uint32_t i)
{
    cursor p = ix->base + i, end = ix->end;
    switch (*p) {
    case 't':
        p = skip_literal(p, end, "true", 4);
        break;
    case 'f':
        p = skip_literal(p, end, "false", 5);
        break;
    case 'n':
        p = skip_literal(p, end, "null", 4);
        break;
    default:
        if (*p != '-' && !is_digit(*p)) {
            return 0;
        }
        p = skip_number(p, end);
        break;
    }
    return p != NULL && (p == end || ends_scalar[*p]);
}

/* Where a member's key's opening quote is at `quote` and its ':' at `colon`: the key's bytes
 * (an escape anywhere in them gives up the copy). */
static inline ValueAction member_action(Fused *f, Role role, uint32_t quote, uint32_t colon)
{
    cursor key = f->ix.base + quote + 1;
    Py_ssize_t length = (Py_ssize_t)trim_back(&f->ix, colon) - 1 - (Py_ssize_t)(quote + 1);
    if (memchr(key, '\\', (size_t)length) != NULL) {
        f->spans.gave_up = 1;
        return VALUE_KEEP;
    }
    return choose_action(&f->spans, role, key, length);
}

/* 1 if the document is accepted (the copy's cuts recorded in f->spans), 0 if refused, -1 if
 * memory ran out. */
static int walk_document(Fused *f, int max_depth)
{
    Indexer *ix = &f->ix;
    Spans *spans = &f->spans;
    unsigned char open[ORJSON_MAX_DEPTH + 1];
    unsigned char role[ORJSON_MAX_DEPTH + 2];
    int depth = 0;
    ValueAction pending = VALUE_KEEP; /* what the member key just read says of the value */
    int cut_depth = -1;               /* depth of the member whose value is being cut */
    ValueAction cut_action = VALUE_KEEP;
    uint32_t cut_start = 0;
    uint32_t i;
    unsigned char c;
    const uint32_t *read = ix->index, *last = ix->index;
    role[0] = ROLE_NONE;
    role[1] = ROLE_NONE;

    i = NEXT_POSITION();
value: /* i at a value's first byte */
    c = byte_at(ix, i);
    if (role[depth] != ROLE_NONE || pending != VALUE_KEEP || depth == 0) {
        /* on the strict decode's path: a call element, a value to cut, a container to enter */
        Role child = ROLE_NONE;
        if (depth == 0 && c == '{') {
            child = ROLE_TOP;
        }
        if (role[depth] == ROLE_CALLS) {
            if (add_call(spans) < 0) {
                return -1;
            }
            child = c == '{' ? ROLE_CALL : ROLE_NONE;
        }
        switch (pending) {
        case VALUE_TRAJECTORY:
            child = c == '{' ? ROLE_TRAJECTORY : ROLE_NONE;
            break;
        case VALUE_RESPONSE:
            child = c == '{' ? ROLE_RESPONSE : ROLE_NONE;
            break;
        case VALUE_CALLS:
            child = c == '[' ? ROLE_CALLS : ROLE_NONE;
            break;
        case VALUE_CUT_SKIPPED:
        case VALUE_CUT_REQUEST:
        case VALUE_CUT_RESPONSE:
            cut_depth = depth;
            cut_action = pending;
            cut_start = i;
            break;
        default:
            break;
        }
        pending = VALUE_KEEP;
        role[depth + 1] = (unsigned char)child;
    }
    else {
        role[depth + 1] = ROLE_NONE;
    }
    switch (c) {
    case '{':
        if (++depth > max_depth) {
            return 0;
        }
        open[depth] = '}';
        i = NEXT_POSITION();
        if (byte_at(ix, i) == '}') {
            depth--;
            goto after_value;
        }
        goto member;
    case '[':
        if (++depth > max_depth) {
            return 0;
        }
        open[depth] = ']';
        i = NEXT_POSITION();
        if (byte_at(ix, i) == ']') {
            depth--;
            goto after_value;
        }
        goto value;
    case '"':
        goto after_value;
    case 0:
        return 0; /* the end (or a NUL, refused outside strings) */
    default:
        if (!scalar_ok(ix, i)) {
            return 0;
        }
        goto after_value;
    }

after_value: /* i at the last position of a complete value */
    i = NEXT_POSITION();
    c = byte_at(ix, i);
    if (depth == cut_depth) {
        /* the value to cut ends before this separator (and any whitespace) */
        if (add_cut(spans, cut_action, cut_start, trim_back(ix, i)) < 0) {
            return -1;
        }
        cut_depth = -1;
    }
    if (depth == 0) {
        return i == ix->length && !ix->error;
    }
    if (c == ',') {
        i = NEXT_POSITION();
        if (open[depth] == ']') {
            goto value;
        }
        goto member;
    }
    if (c != open[depth]) {
        return 0;
    }
    depth--;
    goto after_value;

member: /* i at an object member's key */
    if (byte_at(ix, i) != '"') {
        return 0;
    }
    {
        uint32_t quote = i;
        i = NEXT_POSITION();
        if (byte_at(ix, i) != ':') {
            return 0;
        }
        if (role[depth] != ROLE_NONE) {
            pending = member_action(f, (Role)role[depth], quote, i);
        }
    }
    i = NEXT_POSITION();
    goto value;
}

static PyObject *raw_type; /* msgspec.Raw, imported on first use */

/* msgspec.Raw over data[start:end] (a memoryview slice: no copy), or None when absent. */
static PyObject *raw_span(PyObject *view, Py_ssize_t start, Py_ssize_t end)
{
    if (start < 0) {
        Py_RETURN_NONE;
    }
    PyObject *slice = PySequence_GetSlice(view, start, end);
    if (slice == NULL) {
        return NULL;
    }
    PyObject *raw = PyObject_CallOneArg(raw_type, slice);
    Py_DECREF(slice);
    return raw;
}

/* The line with each cut value replaced by 0. */
static PyObject *build_copy(const Spans *spans, cursor base, Py_ssize_t length)
{
    Py_ssize_t size = length;
    for (Py_ssize_t i = 0; i < spans->cut_count; i++) {
        size -= spans->cuts[i].end - spans->cuts[i].start - 1;
    }
    PyObject *copy = PyBytes_FromStringAndSize(NULL, size);
    if (copy == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(copy);
    Py_ssize_t done = 0;
    for (Py_ssize_t i = 0; i < spans->cut_count; i++) {
        const Cut *cut = &spans->cuts[i];
        memcpy(out, base + done, (size_t)(cut->start - done));
        out += cut->start - done;
        *out++ = '0';
        done = cut->end;
    }
    memcpy(out, base + done, (size_t)(length - done));
    return copy;
}

/* (copy, requests, responses) from an accepted walk; NULL with an exception set on failure. */
static PyObject *build_result(const Spans *spans, cursor base, Py_ssize_t length, PyObject *line)
{
    PyObject *copy = NULL, *view = NULL, *requests = NULL, *responses = NULL, *result = NULL;
    if ((copy = build_copy(spans, base, length)) == NULL || (view = PyMemoryView_FromObject(line)) == NULL ||
        (requests = PyTuple_New(spans->call_count)) == NULL || (responses = PyTuple_New(spans->call_count)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < spans->call_count; i++) {
        const CallSpans *call = &spans->calls[i];
        PyObject *request = raw_span(view, call->request_start, call->request_end);
        if (request == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(requests, i, request); /* steals the reference */
        PyObject *response = raw_span(view, call->response_start, call->response_end);
        if (response == NULL) {
            goto done;
        }
        PyTuple_SET_ITEM(responses, i, response);
    }
    result = PyTuple_Pack(3, copy, requests, responses);
done:
    Py_XDECREF(copy);
    Py_XDECREF(view);
    Py_XDECREF(requests);
    Py_XDECREF(responses);
    return result;
}

PyDoc_STRVAR(vet_compact_doc,
"vet_compact(line, max_depth=1024, /) -> bool | None | (bytes, tuple, tuple)\n--\n\n"
"vet(line, max_depth) and the payload-span copy of health._payload_spans.compact(line) in\n"
"one pass: False if vet() refuses the line; else compact()'s answer for it: None (decode\n"
"the line itself), or (copy, requests, responses) with the payloads as msgspec.Raw slices.");

static PyObject *vet_compact(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long max_depth = ORJSON_MAX_DEPTH;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "vet_compact() takes 1 or 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    if (nargs == 2) {
        max_depth = PyLong_AsLong(args[1]);
        if (max_depth == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (max_depth < 0) {
            PyErr_Format(PyExc_ValueError, "vet_compact() max_depth must be >= 0, got %ld", max_depth);
            return NULL;
        }
        if (max_depth > ORJSON_MAX_DEPTH) {
            max_depth = ORJSON_MAX_DEPTH;
        }
    }
    if (raw_type == NULL) {
        PyObject *msgspec = PyImport_ImportModule("msgspec");
        if (msgspec == NULL) {
            return NULL;
        }
        raw_type = PyObject_GetAttrString(msgspec, "Raw"); /* kept for the process's life */
        Py_DECREF(msgspec);
        if (raw_type == NULL) {
            return NULL;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if ((uint64_t)view.len >= UINT32_MAX) { /* positions are 32-bit: vetted alone, decoded whole */
        int accepted;
        Py_BEGIN_ALLOW_THREADS
        accepted = vet_document((cursor)view.buf, (cursor)view.buf + view.len, (int)max_depth);
        Py_END_ALLOW_THREADS
        PyBuffer_Release(&view);
        if (accepted) {
            Py_RETURN_NONE;
        }
        Py_RETURN_FALSE;
    }
    Fused *f = PyMem_RawMalloc(sizeof(Fused));
    if (f == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    memset(&f->spans, 0, sizeof f->spans);
    memset(&f->ix, 0, offsetof(Indexer, index));
    f->ix.base = f->ix.next = (cursor)view.buf;
    f->ix.end = f->ix.base + view.len;
    f->ix.length = (uint32_t)view.len;
#ifdef VET_SSE2
    f->ix.utf8_previous = f->ix.utf8_errors = _mm_setzero_si128();
#endif
    int outcome;
    if ((size_t)view.len >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        outcome = walk_document(f, (int)max_depth);
        Py_END_ALLOW_THREADS
    }
    else {
        outcome = walk_document(f, (int)max_depth);
    }
    PyObject *result;
    if (outcome < 0) {
        result = PyErr_NoMemory();
    }
    else if (outcome == 0) {
        result = Py_NewRef(Py_False);
    }
    else if (f->spans.gave_up || f->spans.cut_count == 0) {
        result = Py_NewRef(Py_None);
    }
    else {
        result = build_result(&f->spans, f->ix.base, view.len, args[0]);
    }
    PyMem_RawFree(f->spans.cuts);
    PyMem_RawFree(f->spans.calls);
    PyMem_RawFree(f);
    PyBuffer_Release(&view);
    return result;
}

/* Tests run every stage-1 loop on one CPU: 0 the portable loop, 1 SSSE3 (or portable), 2
 * AVX2, 3 AVX-512 (each where the CPU has it). Returns the loop that ran before. */
static PyObject *use_stage1(PyObject *module, PyObject *level_object)
{
    (void)module;
    long level = PyLong_AsLong(level_object);
    if (level == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long was = 0;
#if defined(VET_SSE2) && defined(VET_SSSE3)
    was = fused_has_avx512 ? 3 : fused_has_avx2 ? 2 : cpu_has_ssse3 ? 1 : 0;
    __builtin_cpu_init();
    fused_has_avx512 = level >= 3 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
    fused_has_avx2 = level >= 2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") &&
                     __builtin_cpu_supports("bmi");
    fused_has_avx512 = fused_has_avx512 && fused_has_avx2;
    cpu_has_ssse3 = level >= 1 && __builtin_cpu_supports("ssse3");
#else
    (void)level;
#endif
    return PyLong_FromLong(was);
}

/* ---- the Python function ------------------------------------------------------------- */

PyDoc_STRVAR(vet_doc,
"vet(data, max_depth=1024, /)\n--\n\n"
"True exactly when orjson.loads(data) succeeds with the values msgspec decodes (no integer\n"
"outside [-2**63, 2**64 - 1]) and data nests at most max_depth containers ('{}' is 1 deep,\n"
"a scalar 0; past 1024, orjson's own limit applies). data: any contiguous buffer, read in\n"
"place without the GIL when it is large.");

static PyObject *vet(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "vet() takes 1 or 2 positional arguments (%zd given)", nargs);
        return NULL;
    }
    long max_depth = ORJSON_MAX_DEPTH;
    if (nargs == 2) {
        max_depth = PyLong_AsLong(args[1]);
        if (max_depth == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (max_depth < 0) {
            PyErr_Format(PyExc_ValueError, "vet() max_depth must be >= 0, got %ld", max_depth);
            return NULL;
        }
        if (max_depth > ORJSON_MAX_DEPTH) {
            max_depth = ORJSON_MAX_DEPTH;
        }
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {
        return NULL; /* not a contiguous bytes-like object: the TypeError / BufferError stands */
    }
    cursor start = (cursor)view.buf, end = start + view.len;
    int accepted;
    if ((size_t)view.len >= RELEASE_GIL_BYTES) {
        /* The buffer stays exported until released below, so a bytearray cannot be resized
         * meanwhile. */
        Py_BEGIN_ALLOW_THREADS
        accepted = vet_document(start, end, (int)max_depth);
        Py_END_ALLOW_THREADS
    }
    else {
        accepted = vet_document(start, end, (int)max_depth);
    }
    PyBuffer_Release(&view);
    return PyBool_FromLong(accepted);
}

static PyMethodDef json_vet_methods[] = {
    {"vet", (PyCFunction)(void (*)(void))vet, METH_FASTCALL, vet_doc},
    {"vet_compact", (PyCFunction)(void (*)(void))vet_compact, METH_FASTCALL, vet_compact_doc},
    {"_use_stage1", use_stage1, METH_O,
     "_use_stage1(level, /) -> int\n--\n\nFor tests: which stage-1 loop vet_compact runs (0 portable, 1 SSSE3, 2 AVX2)."},
    {NULL, NULL, 0, NULL},
};

static int json_vet_exec(PyObject *module)
{
    init_tables();
    init_fused_tables();
#if defined(VET_SSE2) && defined(VET_SSSE3)
    fused_has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("bmi");
    fused_has_avx512 = fused_has_avx2 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
#endif
    PyObject *keys = PyTuple_New((Py_ssize_t)KEPT_TOP_LEVEL_COUNT);
    if (keys == NULL) {
        return -1;
    }
    for (size_t i = 0; i < KEPT_TOP_LEVEL_COUNT; i++) {
        PyObject *key = PyUnicode_FromString(KEPT_TOP_LEVEL_KEYS[i]);
        if (key == NULL) {
            Py_DECREF(keys);
            return -1;
        }
        PyTuple_SET_ITEM(keys, (Py_ssize_t)i, key);
    }
    if (PyModule_AddObject(module, "KEPT_TOP_LEVEL_KEYS", keys) < 0) {
        Py_DECREF(keys);
        return -1;
    }
    return PyModule_AddIntConstant(module, "MAX_DEPTH", ORJSON_MAX_DEPTH);
}

static PyModuleDef_Slot json_vet_slots[] = {
    {Py_mod_exec, (void *)json_vet_exec},
    {0, NULL},
};

static struct PyModuleDef json_vet_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "health._json_vet",
    .m_doc = "orjson's exact acceptance of a JSON text, vetted in one pass without building it.",
    .m_size = 0,
    .m_methods = json_vet_methods,
    .m_slots = json_vet_slots,
};

PyMODINIT_FUNC PyInit__json_vet(void)
{
    return PyModuleDef_Init(&json_vet_module);
}
