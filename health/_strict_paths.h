/*
 * What the strict decode (health.strict_schema) reads of a rollout line, by the keys on the
 * path to a value: the one list behind both native copies of a line without its payloads
 * (health._json_vet's vet_compact and health._payload_spans' compact), so the two cannot
 * disagree on which values they keep, cut or hand back raw.
 *
 *   the top-level object   ng_trajectory and response are read further (when objects); the
 *                          other StrictRecord fields are kept; any other member is skipped.
 *   an ng_trajectory       model_calls is read further (when an array); the rest is kept.
 *                          invocations, turns and tool_calls are read further for the
 *                          lean copy (below).
 *   a model call           request and response are kept raw (the payloads); the rest is kept.
 *   the top-level response usage is kept; the rest is skipped.
 *
 *
 * The lean copy (vet_lean) also leaves out what the fast path never reads: in each invocation's
 * conversation, a string under one of TEXT_KEYS, at any depth, becomes ""; each turn's question
 * and each tool call's output (kept raw) become 0; a call's request becomes 0 and is not handed
 * back; a null response stays null (RECORD_INVOCATION, RECORD_TURN and RECORD_TOOL_CALL name
 * those members). Every typed conversation field of those names is a free string
 * (health.strict_conversation), so the typed decode passes or fails alike; health.payload_spans
 * checks that at import.
 *
 * Both modules export KEPT_TOP_LEVEL_KEYS; health.payload_spans compares it with
 * StrictRecord's fields at import and does not use a build where they differ, so a field
 * added to the record is never cut.
 */
#ifndef HEALTH_STRICT_PATHS_H
#define HEALTH_STRICT_PATHS_H

#include <string.h>

#include "_json_cursor.h"

/* The StrictRecord fields' JSON names. */
static const char *const KEPT_TOP_LEVEL_KEYS[] = {
    "_ng_task_index", "_ng_rollout_index", "_ng_attempt_index", "_ng_no_persist", "_ng_failure_class",
    "stage_index",    "_ng_rollout_id",    "response",          "ng_trajectory",     "agent_ref",
};
#define KEPT_TOP_LEVEL_COUNT (sizeof(KEPT_TOP_LEVEL_KEYS) / sizeof(KEPT_TOP_LEVEL_KEYS[0]))

/* The conversation members whose string values are free text, elided on request. */
static const char *const TEXT_KEYS[] = {
    "text", "content", "arguments", "output", "refusal", "encrypted_content",
};
#define TEXT_KEY_COUNT (sizeof(TEXT_KEYS) / sizeof(TEXT_KEYS[0]))

/* The objects of a record whose members the strict decode reads by key. */
typedef enum {
    RECORD_TOP,
    RECORD_TRAJECTORY,
    RECORD_CALL,
    RECORD_RESPONSE,
    RECORD_INVOCATION, /* read for the lean copy only, as are the two below */
    RECORD_TURN,
    RECORD_TOOL_CALL,
} RecordObject;

/* What the strict decode does with a member's value. */
typedef enum {
    MEMBER_KEPT,             /* decoded as it stands */
    MEMBER_SKIPPED,          /* a key the record does not name: skipped */
    MEMBER_TRAJECTORY,       /* ng_trajectory: its members are read when it is an object */
    MEMBER_RESPONSE,         /* the top-level response: likewise */
    MEMBER_MODEL_CALLS,      /* its elements are model calls when it is an array */
    MEMBER_INVOCATIONS,      /* its elements are invocations when it is an array */
    MEMBER_TURNS,            /* its elements are turns when it is an array */
    MEMBER_TOOL_CALLS,       /* its elements are tool calls when it is an array */
    MEMBER_REQUEST_PAYLOAD,  /* a call's request: kept raw */
    MEMBER_RESPONSE_PAYLOAD, /* a call's response: kept raw */
    MEMBER_CONVERSATION,     /* an invocation's conversation: its items' free texts */
    MEMBER_UNREAD_RAW,       /* a turn's question, a tool call's output: kept raw, never read */
} RecordMember;

/* Is the key [key, key + length) (no escapes) exactly `name`? */
static ALWAYS_INLINE int key_is(cursor key, Py_ssize_t length, const char *name)
{
    return (size_t)length == strlen(name) && memcmp(key, name, (size_t)length) == 0;
}

/* What the strict decode does with the value of the member with key [key, key + length) of
 * an `object`. */
static ALWAYS_INLINE RecordMember record_member(RecordObject object, cursor key, Py_ssize_t length)
{
    switch (object) {
    case RECORD_TOP:
        if (key_is(key, length, "ng_trajectory")) {
            return MEMBER_TRAJECTORY;
        }
        if (key_is(key, length, "response")) {
            return MEMBER_RESPONSE;
        }
        for (size_t i = 0; i < KEPT_TOP_LEVEL_COUNT; i++) {
            if (key_is(key, length, KEPT_TOP_LEVEL_KEYS[i])) {
                return MEMBER_KEPT;
            }
        }
        return MEMBER_SKIPPED;
    case RECORD_TRAJECTORY:
        if (key_is(key, length, "model_calls")) {
            return MEMBER_MODEL_CALLS;
        }
        if (key_is(key, length, "invocations")) {
            return MEMBER_INVOCATIONS;
        }
        if (key_is(key, length, "turns")) {
            return MEMBER_TURNS;
        }
        return key_is(key, length, "tool_calls") ? MEMBER_TOOL_CALLS : MEMBER_KEPT;
    case RECORD_CALL:
        if (key_is(key, length, "request")) {
            return MEMBER_REQUEST_PAYLOAD;
        }
        return key_is(key, length, "response") ? MEMBER_RESPONSE_PAYLOAD : MEMBER_KEPT;
    case RECORD_RESPONSE:
        return key_is(key, length, "usage") ? MEMBER_KEPT : MEMBER_SKIPPED;
    case RECORD_INVOCATION:
        return key_is(key, length, "conversation") ? MEMBER_CONVERSATION : MEMBER_KEPT;
    case RECORD_TURN:
        return key_is(key, length, "question") ? MEMBER_UNREAD_RAW : MEMBER_KEPT;
    case RECORD_TOOL_CALL:
        return key_is(key, length, "output") ? MEMBER_UNREAD_RAW : MEMBER_KEPT;
    }
    return MEMBER_KEPT;
}

/* Is the key [key, key + length) (no escapes) one of TEXT_KEYS? */
static ALWAYS_INLINE int is_text_key(cursor key, Py_ssize_t length)
{
    for (size_t i = 0; i < TEXT_KEY_COUNT; i++) {
        if (key_is(key, length, TEXT_KEYS[i])) {
            return 1;
        }
    }
    return 0;
}

/* names[0..count) as the module's tuple `attribute`: 0, or -1 with an exception set. */
static inline int add_name_tuple(PyObject *module, const char *attribute, const char *const *names, size_t count)
{
    PyObject *tuple = PyTuple_New((Py_ssize_t)count);
    if (tuple == NULL) {
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        PyObject *name = PyUnicode_FromString(names[i]);
        if (name == NULL) {
            Py_DECREF(tuple);
            return -1;
        }
        PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, name);
    }
    if (PyModule_AddObject(module, attribute, tuple) < 0) {
        Py_DECREF(tuple);
        return -1;
    }
    return 0;
}

/* KEPT_TOP_LEVEL_KEYS as the module's tuple of that name: 0, or -1 with an exception set. */
static inline int add_kept_top_level_keys(PyObject *module)
{
    return add_name_tuple(module, "KEPT_TOP_LEVEL_KEYS", KEPT_TOP_LEVEL_KEYS, KEPT_TOP_LEVEL_COUNT);
}

#endif /* HEALTH_STRICT_PATHS_H */
