/*
 * Where the vet-and-copy walk records values as it passes them: the roles of the objects and
 * arrays on the path, what a member's key says of its value, and the cut list. A rollout line
 * (vet_compact) leads to its calls' payloads and the values the strict decode skips, and, when
 * asked, to the free text of its conversations; an ingest body (vet_event_rows) to each
 * event's "row". Apart from the walk (_vet_walk.h) so the walk reads as the grammar it checks;
 * the lists grow with PyMem_Raw*, so no GIL is needed.
 */
#ifndef HEALTH_VET_SPANS_H
#define HEALTH_VET_SPANS_H

#include <string.h>

#include "_json_cursor.h"
#include "_payload_copy.h"
#include "_strict_paths.h"

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
    ROLE_INVOCATIONS, /* with elide_unread: an ng_trajectory's invocations, turns, tool calls */
    ROLE_INVOCATION,
    ROLE_TURNS,
    ROLE_TURN,
    ROLE_TOOL_CALLS,
    ROLE_TOOL_CALL,
    ROLE_CONVERSATION,    /* an invocation's conversation, and any array inside one */
    ROLE_CONVERSATION_OBJECT, /* an object inside a conversation: an item or a content part */
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
    VALUE_INVOCATIONS,   /* an array value becomes ROLE_INVOCATIONS, else kept */
    VALUE_TURNS,         /* an array value becomes ROLE_TURNS, else kept */
    VALUE_TOOL_CALLS,    /* an array value becomes ROLE_TOOL_CALLS, else kept */
    VALUE_CONVERSATION,  /* an array value becomes ROLE_CONVERSATION, else kept */
    VALUE_IN_CONVERSATION, /* a container value stays in the conversation's roles, else kept */
    VALUE_CUT_TEXT,      /* a string value becomes "", a container stays in the conversation */
} ValueAction;

typedef struct {
    Cut *cuts;
    Py_ssize_t cut_count, cut_capacity;
    CallSpans *calls; /* the elements of the last model_calls (or events) array seen */
    Py_ssize_t call_count, call_capacity;
    int gave_up;      /* a key on the path holds an escape, or the shape is not one the copy
                         covers: the document is decoded itself */
    int elide_unread; /* a rollout line: the lean copy (_strict_paths.h) */
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
    spans->cuts[spans->cut_count++] = (Cut){from, to, action == VALUE_CUT_TEXT};
    if (action != VALUE_CUT_SKIPPED && action != VALUE_CUT_TEXT) {
        /* Invariant: a request / response / row cut is chosen only for a member of an element
         * of the calls (or events) array, and add_call ran when that element opened, so
         * call_count > 0. Guarded all the same: a broken invariant gives the copy up (the
         * document is decoded itself) instead of writing calls[-1]. */
        if (spans->call_count <= 0) {
            spans->gave_up = 1;
            return 0;
        }
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

/* The role of a container at c inside a conversation (ROLE_NONE: c opens no container). */
static ALWAYS_INLINE Role conversation_child(unsigned char c)
{
    return c == '{' ? ROLE_CONVERSATION_OBJECT : c == '[' ? ROLE_CONVERSATION : ROLE_NONE;
}

/* What an escaped key in an object of `role` says of its value, where an escape cannot be read
 * as a field name: inside an invocation or a conversation, the value is walked on as an
 * unnamed member (a text it may spell is kept, never elided); elsewhere the copy is given up. */
static ALWAYS_INLINE ValueAction escaped_key_action(Spans *spans, Role role)
{
    switch (role) {
    case ROLE_INVOCATION:
    case ROLE_TURN:
    case ROLE_TOOL_CALL:
        return VALUE_KEEP;
    case ROLE_CONVERSATION_OBJECT:
        return VALUE_IN_CONVERSATION;
    default:
        spans->gave_up = 1;
        return VALUE_KEEP;
    }
}

/* What the walk does with the value of key [key, key + length) in an object of `role`: in a
 * record, what the strict decode does with it (_strict_paths.h); in an ingest body, the
 * events and their rows. msgspec keeps the last value of a repeated key, so the calls
 * restart at each ng_trajectory and model_calls member. */
static ValueAction choose_action(Spans *spans, Role role, cursor key, Py_ssize_t length)
{
    switch (role) {
    case ROLE_TOP:
        switch (record_member(RECORD_TOP, key, length)) {
        case MEMBER_TRAJECTORY:
            spans->call_count = 0;
            return VALUE_TRAJECTORY;
        case MEMBER_RESPONSE:
            return VALUE_RESPONSE;
        case MEMBER_SKIPPED:
            return VALUE_CUT_SKIPPED;
        default:
            return VALUE_KEEP;
        }
    case ROLE_TRAJECTORY:
        switch (record_member(RECORD_TRAJECTORY, key, length)) {
        case MEMBER_MODEL_CALLS:
            spans->call_count = 0;
            return VALUE_CALLS;
        case MEMBER_INVOCATIONS:
            return spans->elide_unread ? VALUE_INVOCATIONS : VALUE_KEEP;
        case MEMBER_TURNS:
            return spans->elide_unread ? VALUE_TURNS : VALUE_KEEP;
        case MEMBER_TOOL_CALLS:
            return spans->elide_unread ? VALUE_TOOL_CALLS : VALUE_KEEP;
        default:
            return VALUE_KEEP;
        }
    case ROLE_INVOCATION:
        return record_member(RECORD_INVOCATION, key, length) == MEMBER_CONVERSATION ? VALUE_CONVERSATION : VALUE_KEEP;
    case ROLE_TURN:
        return record_member(RECORD_TURN, key, length) == MEMBER_UNREAD_RAW ? VALUE_CUT_SKIPPED : VALUE_KEEP;
    case ROLE_TOOL_CALL:
        return record_member(RECORD_TOOL_CALL, key, length) == MEMBER_UNREAD_RAW ? VALUE_CUT_SKIPPED : VALUE_KEEP;
    case ROLE_CONVERSATION_OBJECT:
        return is_text_key(key, length) ? VALUE_CUT_TEXT : VALUE_IN_CONVERSATION;
    case ROLE_CALL:
        switch (record_member(RECORD_CALL, key, length)) {
        case MEMBER_REQUEST_PAYLOAD:
            return VALUE_CUT_REQUEST;
        case MEMBER_RESPONSE_PAYLOAD:
            return VALUE_CUT_RESPONSE;
        default:
            return VALUE_KEEP;
        }
    case ROLE_RESPONSE:
        return record_member(RECORD_RESPONSE, key, length) == MEMBER_SKIPPED ? VALUE_CUT_SKIPPED : VALUE_KEEP;
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
    case ROLE_INVOCATIONS:
        *child = c == '{' ? ROLE_INVOCATION : ROLE_NONE;
        return 0;
    case ROLE_TURNS:
        *child = c == '{' ? ROLE_TURN : ROLE_NONE;
        return 0;
    case ROLE_TOOL_CALLS:
        *child = c == '{' ? ROLE_TOOL_CALL : ROLE_NONE;
        return 0;
    case ROLE_CONVERSATION:
        *child = conversation_child(c);
        return 0;
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
    case VALUE_INVOCATIONS:
        *child = c == '[' ? ROLE_INVOCATIONS : ROLE_NONE;
        return 0;
    case VALUE_TURNS:
        *child = c == '[' ? ROLE_TURNS : ROLE_NONE;
        return 0;
    case VALUE_TOOL_CALLS:
        *child = c == '[' ? ROLE_TOOL_CALLS : ROLE_NONE;
        return 0;
    case VALUE_CONVERSATION:
        *child = c == '[' ? ROLE_CONVERSATION : ROLE_NONE;
        return 0;
    case VALUE_IN_CONVERSATION:
        *child = conversation_child(c);
        return 0;
    case VALUE_CUT_TEXT:
        *child = conversation_child(c);
        return c == '"';
    case VALUE_CUT_RESPONSE:
        if (spans->elide_unread && c == 'n') {
            /* the lean copy keeps a null response, which the record reads as none; a call's
             * member, so call_count > 0 (as in add_cut, guarded: the copy is given up) */
            if (spans->call_count <= 0) {
                spans->gave_up = 1;
                return 0;
            }
            CallSpans *call = &spans->calls[spans->call_count - 1];
            call->response_start = call->response_end = -1;
            return 0;
        }
        return 1;
    case VALUE_CUT_SKIPPED:
    case VALUE_CUT_REQUEST:
    case VALUE_CUT_ROW:
        return 1;
    default:
        return 0;
    }
}

#endif /* HEALTH_VET_SPANS_H */
