/*
 * The answer both native copies of a rollout line give (health._json_vet's vet_compact and
 * health._payload_spans' compact): the line with each cut value replaced by 0, and each
 * model call's payloads as msgspec.Raw slices of the line. Shared so the two answers are
 * built alike; each extension records its cuts and calls in its own pass.
 */
#ifndef HEALTH_PAYLOAD_COPY_H
#define HEALTH_PAYLOAD_COPY_H

#include <string.h>

#include "_json_cursor.h"

typedef struct {
    Py_ssize_t start, end; /* offsets of a value replaced in the copy */
    int text;              /* 0: replaced by 0 (a skipped or raw value); 1: a string replaced by "" */
} Cut;

/* The bytes a cut value becomes in the copy. */
static ALWAYS_INLINE Py_ssize_t cut_filler_size(const Cut *cut)
{
    return cut->text ? 2 : 1;
}

typedef struct {
    Py_ssize_t request_start, request_end, response_start, response_end; /* -1: absent */
} CallSpans;

static PyObject *raw_type; /* msgspec.Raw, once imported */

/* raw_type, imported if not yet: 0, or -1 with an exception set. */
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

/* The `length` bytes at base with each of the cut_count cuts (in order) replaced by 0, or a
 * string cut by "". */
static PyObject *build_copy(const Cut *cuts, Py_ssize_t cut_count, cursor base, Py_ssize_t length)
{
    Py_ssize_t size = length;
    for (Py_ssize_t i = 0; i < cut_count; i++) {
        size -= cuts[i].end - cuts[i].start - cut_filler_size(&cuts[i]);
    }
    PyObject *copy = PyBytes_FromStringAndSize(NULL, size);
    if (copy == NULL) {
        return NULL;
    }
    char *out = PyBytes_AS_STRING(copy);
    Py_ssize_t done = 0;
    for (Py_ssize_t i = 0; i < cut_count; i++) {
        const Cut *cut = &cuts[i];
        memcpy(out, base + done, (size_t)(cut->start - done));
        out += cut->start - done;
        if (cut->text) {
            *out++ = '"';
            *out++ = '"';
        }
        else {
            *out++ = '0';
        }
        done = cut->end;
    }
    memcpy(out, base + done, (size_t)(length - done));
    return copy;
}

/* (copy, requests, responses) of `line` (its bytes: base, length); NULL with an exception set
 * on failure. raw_type must be imported. */
static PyObject *build_result(const Cut *cuts, Py_ssize_t cut_count, const CallSpans *calls, Py_ssize_t call_count,
                              cursor base, Py_ssize_t length, PyObject *line)
{
    PyObject *copy = NULL, *view = NULL, *requests = NULL, *responses = NULL, *result = NULL;
    if ((copy = build_copy(cuts, cut_count, base, length)) == NULL || (view = PyMemoryView_FromObject(line)) == NULL ||
        (requests = PyTuple_New(call_count)) == NULL || (responses = PyTuple_New(call_count)) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < call_count; i++) {
        const CallSpans *call = &calls[i];
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

#endif /* HEALTH_PAYLOAD_COPY_H */
