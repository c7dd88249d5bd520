/*
 * The walk of health._json_vet: one forward pass over a JSON text that accepts exactly what
 * orjson reads to the values msgspec decodes, nested at most N containers deep (less one
 * deliberate, safe refusal: an out-of-range integer a later duplicate key hides, see
 * _json_number.h), and can
 * record the copy's cuts (_vet_spans.h) on the way. One walk for vet, vet_compact and
 * vet_event_rows, so the copy's answer is exactly vet()'s.
 *
 *   document    whitespace* value whitespace*, nothing else; empty input refused.
 *   value       object, array, string, number (_json_number.h), or a literal (_json_scan.h).
 *   containers  no trailing comma, keys are strings, one ':' per member. Depth counts
 *               containers: a scalar document is 0 deep, "{}" 1, "[[1]]" 2. orjson refuses
 *               documents more than 1024 deep, so a larger limit acts as 1024.
 */
#ifndef HEALTH_VET_WALK_H
#define HEALTH_VET_WALK_H

#include "_json_number.h"
#include "_json_scan.h"
#include "_vet_spans.h"

/* orjson's own nesting limit: a deeper document is refused whatever the caller allows. */
#define ORJSON_MAX_DEPTH 1024

static cursor vet_value(cursor p, cursor end, int max_depth);

/* 1 if [start, end) is one JSON text as described at the top of this file, at most
 * max_depth containers deep; 0 if not. With spans, the cuts of the copy are recorded on the way from `root`
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
                pending = escaped_key_action(spans, (Role)role[depth]); /* it may spell a field name */
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

#endif /* HEALTH_VET_WALK_H */
