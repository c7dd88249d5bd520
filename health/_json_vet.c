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
 * them; it is the vetter's own walk, so the answer is exactly vet()'s. A refusal is always
 * safe: the callers then take orjson's full path.
 *
 * This file is the Python-facing glue (arguments, the GIL, building the answers). What is
 * accepted is in the headers: the walk and its grammar (_vet_walk.h), strings, literals and
 * whitespace (_json_scan.h, _json_utf8.h, _json_cursor.h), numbers (_json_number.h);
 * the path the copy follows (_vet_spans.h, _strict_paths.h) and the copy itself
 * (_payload_copy.h, shared with health._payload_spans).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_vet_walk.h"

/* Inputs at least this long are vetted without the GIL. Below it, handing the GIL over and
 * waiting to take it back (up to the interpreter's switch interval when another thread runs)
 * costs more than it lets others do: a 1 MiB document takes 0.06-0.5 ms to vet. */
#define RELEASE_GIL_BYTES (1u << 20)

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

static int walk_buffer(const char *name, PyObject *const *args, Py_ssize_t nargs, Role root, int elide_unread,
                       Py_buffer *view, Spans *spans)
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
    spans->elide_unread = elide_unread;
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

/* What an entry point answers for a document the walk accepted, from its spans. */
typedef PyObject *(*Answer)(const Spans *spans, const Py_buffer *view, PyObject *document);

/* The walk of args[0] from `root`, then: False if it is refused, else answer()'s object; the
 * spans and the buffer released either way. */
static PyObject *walk_and_answer(const char *name, PyObject *const *args, Py_ssize_t nargs, Role root,
                                 int elide_unread, Answer answer)
{
    Py_buffer view;
    Spans spans;
    int outcome = walk_buffer(name, args, nargs, root, elide_unread, &view, &spans);
    if (outcome < 0) {
        return NULL;
    }
    PyObject *result = outcome == 0 ? Py_NewRef(Py_False) : answer(&spans, &view, args[0]);
    PyMem_RawFree(spans.cuts);
    PyMem_RawFree(spans.calls);
    PyBuffer_Release(&view);
    return result;
}

/* (copy, spans) as a tuple, each built by its function; NULL if either fails. */
static PyObject *copy_and(const Spans *spans, const Py_buffer *view, PyObject *(*extra)(const Spans *))
{
    PyObject *copy = build_copy(spans->cuts, spans->cut_count, (cursor)view->buf, view->len);
    PyObject *second = copy == NULL ? NULL : extra(spans);
    PyObject *result = second == NULL ? NULL : PyTuple_Pack(2, copy, second);
    Py_XDECREF(copy);
    Py_XDECREF(second);
    return result;
}

PyDoc_STRVAR(vet_compact_doc,
"vet_compact(line, max_depth=1024, /) -> False | None | (bytes, tuple, tuple)\n--\n\n"
"vet(line, max_depth) and the payload-span copy of health._payload_spans.compact(line) in\n"
"one pass: False if vet() refuses the line; else compact()'s answer for it: None (decode\n"
"the line itself), or (copy, requests, responses) with the payloads as msgspec.Raw slices.");

static PyObject *compact_answer(const Spans *spans, const Py_buffer *view, PyObject *line)
{
    if (spans->gave_up || spans->cut_count == 0) {
        Py_RETURN_NONE;
    }
    return build_result(spans->cuts, spans->cut_count, spans->calls, spans->call_count, (cursor)view->buf, view->len,
                        line);
}

static PyObject *vet_compact(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (import_raw_type() < 0) {
        return NULL;
    }
    return walk_and_answer("vet_compact", args, nargs, ROLE_ROOT, 0, compact_answer);
}

/* Each call's response span as native 64-bit (start, end) pairs ((-1, -1): none in the copy). */
static PyObject *response_spans(const Spans *spans)
{
    PyObject *packed = PyBytes_FromStringAndSize(NULL, spans->call_count * 2 * (Py_ssize_t)sizeof(int64_t));
    if (packed == NULL) {
        return NULL;
    }
    int64_t *out = (int64_t *)PyBytes_AS_STRING(packed);
    for (Py_ssize_t i = 0; i < spans->call_count; i++) {
        out[2 * i] = spans->calls[i].response_start;
        out[2 * i + 1] = spans->calls[i].response_end;
    }
    return packed;
}

PyDoc_STRVAR(vet_lean_doc,
"vet_lean(line, max_depth=1024, /) -> False | None | (bytes, bytes)\n--\n\n"
"vet(line, max_depth) and, in the same pass, the lean copy the batch fast path decodes: False\n"
"if vet() refuses the line; None where vet_compact() gives None (decode the line itself); else\n"
"(copy, responses). The copy is vet_compact()'s, but that a null response stays null, and it\n"
"also leaves out what the fast path never reads: each string under one of TEXT_KEYS in the\n"
"trajectory's conversations (at any depth) becomes \"\", each turn's question and tool call's\n"
"output becomes 0. responses packs each call's (start, end) response offsets in the line as\n"
"native signed 64-bit integers, (-1, -1) where the copy holds no 0 for one.");

static PyObject *lean_answer(const Spans *spans, const Py_buffer *view, PyObject *line)
{
    (void)line;
    if (spans->gave_up || spans->cut_count == 0) {
        Py_RETURN_NONE;
    }
    return copy_and(spans, view, response_spans);
}

static PyObject *vet_lean(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return walk_and_answer("vet_lean", args, nargs, ROLE_ROOT, 1, lean_answer);
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

static PyObject *event_rows_answer(const Spans *spans, const Py_buffer *view, PyObject *body)
{
    (void)body;
    if (spans->gave_up || (spans->envelope && !spans->events_seen)) {
        Py_RETURN_TRUE;
    }
    return copy_and(spans, view, row_spans);
}

static PyObject *vet_event_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return walk_and_answer("vet_event_rows", args, nargs, ROLE_BODY, 0, event_rows_answer);
}

/* ---- the Python function ------------------------------------------------------------- */

PyDoc_STRVAR(vet_doc,
"vet(data, max_depth=1024, /)\n--\n\n"
"True exactly when orjson.loads(data) succeeds, every integer literal in data lies in\n"
"[-2**63, 2**64 - 1] (even one a later duplicate key hides: a deliberate, safe refusal), and\n"
"data nests at most max_depth containers ('{}' is 1 deep, a scalar 0; past 1024, orjson's\n"
"own limit applies). msgspec then decodes the values orjson does. data: any contiguous\n"
"buffer, read in place without the GIL when it is large.");

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
    {"vet_lean", (PyCFunction)(void (*)(void))vet_lean, METH_FASTCALL, vet_lean_doc},
    {"vet_event_rows", (PyCFunction)(void (*)(void))vet_event_rows, METH_FASTCALL, vet_event_rows_doc},
    {NULL, NULL, 0, NULL},
};

static int json_vet_exec(PyObject *module)
{
    init_tables();
    if (add_kept_top_level_keys(module) < 0 || add_name_tuple(module, "TEXT_KEYS", TEXT_KEYS, TEXT_KEY_COUNT) < 0) {
        return -1;
    }
    if (PyModule_AddIntConstant(module, "MAX_DEPTH", ORJSON_MAX_DEPTH) < 0) {
        return -1;
    }
#ifdef VET_SSE2
    /* 1: built with the vector loops (SSE2, and SSSE3 where the CPU has it); 0: portable only */
    return PyModule_AddIntConstant(module, "VECTOR_PATHS", 1);
#else
    return PyModule_AddIntConstant(module, "VECTOR_PATHS", 0);
#endif
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
