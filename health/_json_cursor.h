/*
 * The byte cursor and JSON's whitespace, shared by both native passes (health._json_vet and
 * health._payload_spans) so they agree on what separates tokens: exactly space, tab, line
 * feed and carriage return (a byte-order mark, a form feed, a NUL or a non-breaking space is
 * not whitespace). Header-only: every function is static inline, so each extension inlines
 * its own copy. Like every header here, it is included after <Python.h> (for Py_ssize_t).
 */
#ifndef HEALTH_JSON_CURSOR_H
#define HEALTH_JSON_CURSOR_H

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* A position in the bytes being read (never written). */
typedef const unsigned char *cursor;

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

#endif /* HEALTH_JSON_CURSOR_H */
