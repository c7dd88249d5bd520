/*
 * JSON numbers, checked for orjson's syntax and for the values orjson and msgspec both read
 * alike. Its own header: the range rules (and the overflow constant) are a concept of their
 * own, apart from the string scan.
 *
 *   syntax      -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
 *   ranges      - an integer (no fraction, no exponent) must lie in [-2^63, 2^64 - 1]: orjson
 *                 reads anything wider as a float where msgspec keeps an exact int;
 *                 This holds for every literal, also one a later duplicate key hides (both
 *                 libraries then read the later value): the walk keeps no set of keys, so such
 *                 a document is refused, which only sends it down orjson's full path.
 *               - any other number must round to a finite double: orjson refuses one that
 *                 parses to infinity. Underflow (to zero or a subnormal) is accepted: both
 *                 libraries round correctly.
 */
#ifndef HEALTH_JSON_NUMBER_H
#define HEALTH_JSON_NUMBER_H

#include <stdint.h>

#include "_json_scan.h"

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

#endif /* HEALTH_JSON_NUMBER_H */
