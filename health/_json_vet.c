/*
 * health._json_vet: is a byte string one JSON text that orjson reads to the values msgspec
 * decodes, nested at most N containers deep? One forward pass over the bytes, no allocation,
 * no copy, no tape: the callers only need the yes/no, and then decode with msgspec themselves.
 *
 * vet_compact answers the same question and, in the same pass, makes the copy of a rollout
 * line that health._payload_spans.compact makes of a vetted one (the values the strict decode
 * keeps raw or skips replaced by 0, the calls' payloads handed back as msgspec.Raw slices of
 * the line): the batch fast path then reads each line once before its typed decode. The
 * walk records those values' offsets as it passes them, by the path of keys that leads to
 * them; it is the vetter's own walk, so the answer is exactly vet()'s.
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

/* ---- the payload-span copy, recorded on the way (vet_compact) ------------------------- */

/* The StrictRecord fields' JSON names (health.strict_schema). health.payload_spans refuses
 * the native copy when the two lists differ, so a field added to the record is never cut. */
static const char *const KEPT_TOP_LEVEL_KEYS[] = {
    "_ng_task_index", "_ng_rollout_index", "_ng_attempt_index", "_ng_no_persist", "_ng_failure_class",
    "stage_index",    "_ng_rollout_id",    "response",          "ng_trajectory",
};
#define KEPT_TOP_LEVEL_COUNT (sizeof(KEPT_TOP_LEVEL_KEYS) / sizeof(KEPT_TOP_LEVEL_KEYS[0]))

/* What an object or array on the path is: members of these are read by key. A rollout line
 * (ROLE_ROOT: vet_compact) leads to its calls' payloads; an ingest body (ROLE_BODY:
 * vet_event_rows), an array of events or {"events": [...]}, to each event's "row". */
typedef enum {
    ROLE_NONE,
    ROLE_ROOT,
    ROLE_TOP,
    ROLE_TRAJECTORY,
    ROLE_CALLS,
    ROLE_CALL,
    ROLE_RESPONSE,
    ROLE_BODY,
    ROLE_ENVELOPE,
    ROLE_EVENTS,
    ROLE_EVENT,
} Role;

/* What a member's key says of its value. */
typedef enum {
    VALUE_KEEP,
    VALUE_TRAJECTORY, /* an object value becomes ROLE_TRAJECTORY, else kept */
    VALUE_RESPONSE,   /* an object value becomes ROLE_RESPONSE, else kept */
    VALUE_CALLS,      /* an array value becomes ROLE_CALLS, else kept */
    VALUE_EVENTS,     /* an array value becomes ROLE_EVENTS, else the copy is given up */
    VALUE_CUT_SKIPPED,
    VALUE_CUT_REQUEST,
    VALUE_CUT_RESPONSE,
    VALUE_CUT_ROW, /* recorded as the element's "request" span */
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
    CallSpans *calls; /* the elements of the last model_calls (or events) array seen */
    Py_ssize_t call_count, call_capacity;
    int gave_up;      /* a key on the path holds an escape, or the shape is not one the copy
                         covers: the document is decoded itself */
    int envelope;     /* an ingest body is an object: its one member must be "events" */
    int events_seen;
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
    if (action != VALUE_CUT_SKIPPED) {
        CallSpans *call = &spans->calls[spans->call_count - 1]; /* the element being walked */
        /* a repeated key: the last value, as msgspec keeps it */
        if (action != VALUE_CUT_RESPONSE) {
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
    case ROLE_ENVELOPE:
        if (!key_is(key, length, "events") || spans->events_seen) {
            spans->gave_up = 1; /* another member, or "events" repeated */
            return VALUE_KEEP;
        }
        spans->events_seen = 1;
        return VALUE_EVENTS;
    case ROLE_EVENT:
        return key_is(key, length, "row") ? VALUE_CUT_ROW : VALUE_KEEP;
    default:
        return VALUE_KEEP;
    }
}

/* The value starting with byte c, in a container of `role` (after a key that said `pending`):
 * the role it takes if it is a container (*child); 1 if it is to be cut, -1 if memory ran
 * out. */
static inline int path_value(Spans *spans, Role role, ValueAction pending, unsigned char c, Role *child)
{
    switch (role) {
    case ROLE_ROOT:
        *child = c == '{' ? ROLE_TOP : ROLE_NONE;
        return 0;
    case ROLE_CALLS:
        *child = c == '{' ? ROLE_CALL : ROLE_NONE;
        return add_call(spans);
    case ROLE_BODY:
        *child = c == '[' ? ROLE_EVENTS : c == '{' ? ROLE_ENVELOPE : ROLE_NONE;
        spans->envelope = c == '{';
        spans->gave_up |= *child == ROLE_NONE;
        return 0;
    case ROLE_EVENTS:
        *child = c == '{' ? ROLE_EVENT : ROLE_NONE;
        return add_call(spans);
    default:
        break;
    }
    switch (pending) {
    case VALUE_TRAJECTORY:
        *child = c == '{' ? ROLE_TRAJECTORY : ROLE_NONE;
        return 0;
    case VALUE_RESPONSE:
        *child = c == '{' ? ROLE_RESPONSE : ROLE_NONE;
        return 0;
    case VALUE_CALLS:
        *child = c == '[' ? ROLE_CALLS : ROLE_NONE;
        return 0;
    case VALUE_EVENTS:
        *child = c == '[' ? ROLE_EVENTS : ROLE_NONE;
        spans->gave_up |= *child == ROLE_NONE;
        return 0;
    case VALUE_CUT_SKIPPED:
    case VALUE_CUT_REQUEST:
    case VALUE_CUT_RESPONSE:
    case VALUE_CUT_ROW:
        return 1;
    default:
        return 0;
    }
}

static cursor vet_value(cursor p, cursor end, int max_depth);

/* 1 if [start, end) is one JSON text as described at the top, at most max_depth containers
 * deep; 0 if not. With spans, the cuts of the copy are recorded on the way from `root`
 * (and -1 means memory ran out); without, the walk is the vetter's alone (the path code is
 * compiled out). With stop, the walk ends after one value (*stop: just past it) and leaves
 * what follows to the caller. */
static ALWAYS_INLINE int walk_document(cursor start, cursor end, int max_depth, Spans *spans, Role root,
                                       cursor *stop)
{
    unsigned char open[ORJSON_MAX_DEPTH + 1];
    unsigned char role[ORJSON_MAX_DEPTH + 1]; /* with spans: the Role of the container at each depth */
    int depth = 0;
    ValueAction pending = VALUE_KEEP; /* what the member key just read says of its value */
    int cut_depth = -1;               /* depth of the member whose value is being cut */
    ValueAction cut_action = VALUE_KEEP;
    cursor cut_start = start;
    Role child;
    cursor p = skip_whitespace(start, end);
    role[0] = (unsigned char)root;
value: /* p at the first byte of a value (whitespace already skipped) */
    if (p >= end) {
        return 0;
    }
    child = ROLE_NONE;
    if (spans != NULL && (role[depth] != ROLE_NONE || pending != VALUE_KEEP)) {
        int cut = path_value(spans, (Role)role[depth], pending, *p, &child);
        if (cut < 0) {
            return -1;
        }
        if (cut) {
            cut_depth = depth;
            cut_action = pending;
            cut_start = p;
        }
        pending = VALUE_KEEP;
    }
    if (spans != NULL && child == ROLE_NONE && (*p == '{' || *p == '[')) {
        /* off the path: the container is vetted by the walk without path code */
        p = vet_value(p, end, max_depth - depth);
        if (p == NULL) {
            return 0;
        }
        goto after_value;
    }
    switch (*p) {
    case '{':
        if (++depth > max_depth) {
            return 0;
        }
        open[depth] = '}';
        if (spans != NULL) {
            role[depth] = (unsigned char)child;
        }
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
        if (spans != NULL) {
            role[depth] = (unsigned char)child;
        }
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
    if (spans != NULL && depth == cut_depth) {
        if (add_cut(spans, cut_action, cut_start - start, p - start) < 0) {
            return -1;
        }
        cut_depth = -1;
    }
    if (stop != NULL && depth == 0) {
        *stop = p;
        return 1;
    }
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
    {
        cursor key = p + 1;
        p = skip_string(key, end);
        if (p == NULL) {
            return 0;
        }
        if (spans != NULL && role[depth] != ROLE_NONE) {
            Py_ssize_t length = p - 1 - key;
            if (memchr(key, '\\', (size_t)length) != NULL) {
                spans->gave_up = 1; /* an escaped key may spell a field name */
            }
            else {
                pending = choose_action(spans, (Role)role[depth], key, length);
            }
        }
    }
    p = skip_whitespace(p, end);
    if (p >= end || *p != ':') {
        return 0;
    }
    p = skip_whitespace(p + 1, end);
    goto value;
}

static int vet_document(cursor start, cursor end, int max_depth)
{
    return walk_document(start, end, max_depth, NULL, ROLE_NONE, NULL);
}

/* The value at p (a container), at most max_depth deep: just past it, or NULL if refused. */
static cursor vet_value(cursor p, cursor end, int max_depth)
{
    cursor stop = NULL;
    return walk_document(p, end, max_depth, NULL, ROLE_NONE, &stop) ? stop : NULL;
}

/* The walk with the copy's cuts recorded in spans, from `root` (ROLE_ROOT or ROLE_BODY): 1
 * accepted, 0 refused, -1 out of memory. */
static int vet_and_cut(cursor start, cursor end, int max_depth, Spans *spans, Role root)
{
    return walk_document(start, end, max_depth, spans, root, NULL);
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

/* max_depth from an optional second argument (default and cap: orjson's); -1 with an
 * exception set. */
static long depth_argument(const char *name, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s() takes 1 or 2 positional arguments (%zd given)", name, nargs);
        return -1;
    }
    if (nargs == 1) {
        return ORJSON_MAX_DEPTH;
    }
    long max_depth = PyLong_AsLong(args[1]);
    if (max_depth == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (max_depth < 0) {
        PyErr_Format(PyExc_ValueError, "%s() max_depth must be >= 0, got %ld", name, max_depth);
        return -1;
    }
    return max_depth > ORJSON_MAX_DEPTH ? ORJSON_MAX_DEPTH : max_depth;
}

/* The walk over a buffer from `root`, the GIL released for large ones: 1, 0, -1 as
 * vet_and_cut, or -2 with an exception set (bad arguments). *view is held on 1 and 0. */
static int walk_buffer(const char *name, PyObject *const *args, Py_ssize_t nargs, Role root, Py_buffer *view,
                       Spans *spans)
{
    long max_depth = depth_argument(name, args, nargs);
    if (max_depth < 0) {
        return -2;
    }
    if (PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) {
        return -2;
    }
    cursor start = (cursor)view->buf, end = start + view->len;
    memset(spans, 0, sizeof *spans);
    int outcome;
    if ((size_t)view->len >= RELEASE_GIL_BYTES) {
        /* the cut lists grow with PyMem_Raw*, which needs no GIL; the buffer stays exported */
        Py_BEGIN_ALLOW_THREADS
        outcome = vet_and_cut(start, end, (int)max_depth, spans, root);
        Py_END_ALLOW_THREADS
    }
    else {
        outcome = vet_and_cut(start, end, (int)max_depth, spans, root);
    }
    if (outcome < 0) {
        PyErr_NoMemory();
        PyBuffer_Release(view);
        PyMem_RawFree(spans->cuts);
        PyMem_RawFree(spans->calls);
        return -1;
    }
    return outcome;
}

static int import_raw_type(void)
{
    if (raw_type == NULL) {
        PyObject *msgspec = PyImport_ImportModule("msgspec");
        if (msgspec == NULL) {
            return -1;
        }
        raw_type = PyObject_GetAttrString(msgspec, "Raw"); /* kept for the process's life */
        Py_DECREF(msgspec);
        if (raw_type == NULL) {
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(vet_compact_doc,
"vet_compact(line, max_depth=1024, /) -> False | None | (bytes, tuple, tuple)\n--\n\n"
"vet(line, max_depth) and the payload-span copy of health._payload_spans.compact(line) in\n"
"one pass: False if vet() refuses the line; else compact()'s answer for it: None (decode\n"
"the line itself), or (copy, requests, responses) with the payloads as msgspec.Raw slices.");

static PyObject *vet_compact(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (import_raw_type() < 0) {
        return NULL;
    }
    Py_buffer view;
    Spans spans;
    int outcome = walk_buffer("vet_compact", args, nargs, ROLE_ROOT, &view, &spans);
    if (outcome < 0) {
        return NULL;
    }
    PyObject *result;
    if (outcome == 0) {
        result = Py_NewRef(Py_False);
    }
    else if (spans.gave_up || spans.cut_count == 0) {
        result = Py_NewRef(Py_None);
    }
    else {
        result = build_result(&spans, (cursor)view.buf, view.len, args[0]);
    }
    PyMem_RawFree(spans.cuts);
    PyMem_RawFree(spans.calls);
    PyBuffer_Release(&view);
    return result;
}

/* [(start, end), ...] of each event's row ((-1, -1): none). */
static PyObject *row_spans(const Spans *spans)
{
    PyObject *list = PyList_New(spans->call_count);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < spans->call_count; i++) {
        PyObject *span = Py_BuildValue("(nn)", spans->calls[i].request_start, spans->calls[i].request_end);
        if (span == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, span);
    }
    return list;
}

PyDoc_STRVAR(vet_event_rows_doc,
"vet_event_rows(body, max_depth=1024, /) -> bool | (bytes, list[tuple[int, int]])\n--\n\n"
"vet(body, max_depth) and, in the same pass, each event's row: False if vet() refuses the\n"
"body; True if it accepts it but it is not an array of events or an object whose one member\n"
"is \"events\" (once, an array), or a key of the object or of an event holds a backslash;\n"
"else (skeleton, spans): spans[i] is the (start, end) offsets of the last \"row\" member's\n"
"value of element i ((-1, -1) without one, or when the element is not an object), and\n"
"skeleton the body with every such value (each occurrence) replaced by 0.");

static PyObject *vet_event_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    Spans spans;
    int outcome = walk_buffer("vet_event_rows", args, nargs, ROLE_BODY, &view, &spans);
    if (outcome < 0) {
        return NULL;
    }
    PyObject *result;
    if (outcome == 0) {
        result = Py_NewRef(Py_False);
    }
    else if (spans.gave_up || (spans.envelope && !spans.events_seen)) {
        result = Py_NewRef(Py_True);
    }
    else {
        PyObject *skeleton = build_copy(&spans, (cursor)view.buf, view.len);
        PyObject *rows = skeleton == NULL ? NULL : row_spans(&spans);
        result = rows == NULL ? NULL : PyTuple_Pack(2, skeleton, rows);
        Py_XDECREF(skeleton);
        Py_XDECREF(rows);
    }
    PyMem_RawFree(spans.cuts);
    PyMem_RawFree(spans.calls);
    PyBuffer_Release(&view);
    return result;
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
    {"vet_event_rows", (PyCFunction)(void (*)(void))vet_event_rows, METH_FASTCALL, vet_event_rows_doc},
    {NULL, NULL, 0, NULL},
};

static int json_vet_exec(PyObject *module)
{
    init_tables();
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
