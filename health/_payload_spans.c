/*
 * health._payload_spans: a record line with the values no check reads cut out, for a cheaper
 * strict decode. msgspec reads every byte of a value it skips or keeps raw; most of a rollout
 * line is the captured calls' request / response payloads, so decoding a copy in which each
 * of them is a short integer costs a fraction of decoding the line.
 *
 * compact(line) -> (copy, requests, responses) | None
 *
 *   The copy is the line with each of these values replaced by 0:
 *     - the value of every "request" or "response" member of every object element of every
 *       "model_calls" array member of every top-level "ng_trajectory" object member;
 *     - the value of every top-level member whose key is not in KEPT_TOP_LEVEL_KEYS, and of
 *       every member but "usage" of every top-level "response" object member (the strict
 *       decode skips those members).
 *   A strict decode of the copy keeps those payloads as Raw or skips them, which a 0 passes
 *   exactly as the original value does, so it succeeds or fails where the line's does.
 *   requests / responses hold, per element of the model_calls array the decoded record keeps,
 *   its payload as a msgspec.Raw over the line's own bytes (a memoryview slice), or None where
 *   the member is absent. msgspec keeps the LAST value of a repeated key, so these are the
 *   last "request" / "response" of each element of the last "model_calls" member of the last
 *   "ng_trajectory" member (tests pin that behaviour of msgspec).
 *   None means "decode the line itself": the line is not an object, a key on the path
 *   (a member of the top-level object, of an ng_trajectory or response object or of a model
 *   call) holds a backslash (an escaped key may spell a field name the byte comparison here
 *   would miss), nothing was replaced, or the bytes end early.
 *
 * The values are skipped without being checked again (_structural_skip.h); the keys on the
 * path are the strict decode's (_strict_paths.h, shared with health._json_vet's vet_compact,
 * which makes the same copy while it vets). This file walks that path and builds the answer. *
 * Why a walk of its own, and not the vetter's (health._json_vet's vet_compact and vet_lean
 * already share one walk, _vet_walk.h, told apart by a flag): compact() serves lines that are
 * already known to be JSON (shallow_json callers of health.fast_path, and the full copy the
 * lean decode falls back to after vet_lean vetted the same line). The vetter's walk checks
 * every byte (UTF-8, escapes, number ranges, depth) because its answer is the check; here
 * the payloads, most of a line, are passed over by bracket counting 64 bytes at a time, with
 * no check to repeat. Merging would make those callers pay the check a second time (on the
 * synthetic corpus of tests/health, compact ~1.6 GB/s against vet_compact ~1.2 GB/s on a
 * loaded 2-core machine; more on payload-heavy lines), or put a "trust the bytes" mode in
 * the vetter's walk, where a slip would accept what orjson refuses. What the two must agree
 * on, the path of keys, is one table (_strict_paths.h) and one copy (_payload_copy.h), and
 * tests/health/test_json_vet_differential.py checks that both copies are byte-identical.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "_payload_copy.h"
#include "_strict_paths.h"
#include "_structural_skip.h"

/* ------------------------------------------------------------------ the path */

typedef enum { KEEP, CUT_REQUEST, CUT_RESPONSE, CUT_SKIPPED, DESCEND } Action;

typedef struct {
    cursor base, end;
    Cut *cuts;
    Py_ssize_t cut_count, cut_capacity;
    CallSpans *calls; /* the elements of the last model_calls array seen (see choose_*) */
    Py_ssize_t call_count, call_capacity;
    int no_memory;
} Scan;

/* Room for one more element in a PyMem array; 0, or -1 with scan->no_memory set. */
static int reserve(Scan *scan, void **items, Py_ssize_t count, Py_ssize_t *capacity, size_t size) {
    if (count < *capacity) return 0;
    Py_ssize_t grown_capacity = *capacity ? *capacity * 2 : 32;
    void *grown = PyMem_Realloc(*items, (size_t)grown_capacity * size);
    if (grown == NULL) {
        scan->no_memory = 1;
        return -1;
    }
    *items = grown;
    *capacity = grown_capacity;
    return 0;
}

static int add_cut(Scan *scan, Action action, cursor start, cursor end) {
    if (reserve(scan, (void **)&scan->cuts, scan->cut_count, &scan->cut_capacity, sizeof(Cut)) < 0) return -1;
    Py_ssize_t from = start - scan->base, to = end - scan->base;
    scan->cuts[scan->cut_count++] = (Cut){from, to, 0};
    if (action == CUT_REQUEST || action == CUT_RESPONSE) {
        /* Invariant: only choose_call_member asks for these cuts, for a member of a model_calls
         * element, and scan_model_calls ran add_call for that element first: call_count > 0.
         * Guarded all the same: -1 without no_memory gives the copy up (None: decode the line). */
        if (scan->call_count <= 0) return -1;
        CallSpans *call = &scan->calls[scan->call_count - 1]; /* the element being scanned */
        if (action == CUT_REQUEST) {
            call->request_start = from; /* a repeated key: the last value, as msgspec keeps it */
            call->request_end = to;
        } else {
            call->response_start = from;
            call->response_end = to;
        }
    }
    return 0;
}

static int add_call(Scan *scan) {
    if (reserve(scan, (void **)&scan->calls, scan->call_count, &scan->call_capacity, sizeof(CallSpans)) < 0)
        return -1;
    scan->calls[scan->call_count++] = (CallSpans){-1, -1, -1, -1};
    return 0;
}

/* One member's key: p is at its opening quote. Sets *key and *key_length, returns the
 * position of the value (after ':' and whitespace), or NULL when the key holds a backslash
 * or the bytes end. */
static cursor read_key(cursor p, cursor end, cursor *key, Py_ssize_t *key_length) {
    if (p >= end || *p != '"') return NULL;
    cursor stop = find_string_stop(p + 1, end);
    if (stop >= end || *stop != '"') return NULL;
    *key = p + 1;
    *key_length = stop - (p + 1);
    p = skip_whitespace(stop + 1, end);
    if (p >= end || *p != ':') return NULL;
    return skip_whitespace(p + 1, end);
}

/* What to do with one member's value, chosen from its key. A chooser may reset the calls:
 * msgspec keeps the last value of a repeated key, so only the calls of the last model_calls
 * member of the last ng_trajectory member are the decoded record's. */
typedef Action (*Chooser)(Scan *scan, cursor key, Py_ssize_t length, cursor value);
typedef cursor (*Descender)(Scan *scan, cursor key, Py_ssize_t length, cursor p);

static cursor scan_object(Scan *scan, cursor p, Chooser choose, Descender descend);

static Action choose_call_member(Scan *scan, cursor key, Py_ssize_t length, cursor value) {
    (void)scan;
    (void)value;
    switch (record_member(RECORD_CALL, key, length)) {
    case MEMBER_REQUEST_PAYLOAD: return CUT_REQUEST;
    case MEMBER_RESPONSE_PAYLOAD: return CUT_RESPONSE;
    default: return KEEP;
    }
}

/* p is just past '[' of a model_calls array: each object element is scanned for payloads. */
static cursor scan_model_calls(Scan *scan, cursor p) {
    cursor end = scan->end;
    p = skip_whitespace(p, end);
    if (p < end && *p == ']') return p + 1;
    for (;;) {
        if (p >= end || add_call(scan) < 0) return NULL;
        p = *p == '{' ? scan_object(scan, p + 1, choose_call_member, NULL) : skip_value(p, end);
        if (p == NULL) return NULL;
        p = skip_whitespace(p, end);
        if (p >= end) return NULL;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p = skip_whitespace(p + 1, end);
    }
}

static Action choose_trajectory_member(Scan *scan, cursor key, Py_ssize_t length, cursor value) {
    if (record_member(RECORD_TRAJECTORY, key, length) != MEMBER_MODEL_CALLS) return KEEP;
    scan->call_count = 0;
    return *value == '[' ? DESCEND : KEEP;
}

static cursor scan_model_calls_member(Scan *scan, cursor key, Py_ssize_t length, cursor p) {
    (void)key;
    (void)length;
    return scan_model_calls(scan, p);
}

static Action choose_response_member(Scan *scan, cursor key, Py_ssize_t length, cursor value) {
    (void)scan;
    (void)value;
    return record_member(RECORD_RESPONSE, key, length) == MEMBER_SKIPPED ? CUT_SKIPPED : KEEP;
}

/* The top-level members the strict decode reads inside: ng_trajectory, and response, of
 * which it reads usage alone. */
static cursor scan_top_level_member(Scan *scan, cursor key, Py_ssize_t length, cursor p) {
    if (record_member(RECORD_TOP, key, length) == MEMBER_TRAJECTORY)
        return scan_object(scan, p, choose_trajectory_member, scan_model_calls_member);
    return scan_object(scan, p, choose_response_member, NULL);
}

static Action choose_top_level_member(Scan *scan, cursor key, Py_ssize_t length, cursor value) {
    switch (record_member(RECORD_TOP, key, length)) {
    case MEMBER_TRAJECTORY:
        scan->call_count = 0;
        return *value == '{' ? DESCEND : KEEP;
    case MEMBER_RESPONSE: return *value == '{' ? DESCEND : KEEP;
    case MEMBER_SKIPPED: return CUT_SKIPPED;
    default: return KEEP;
    }
}

/* p is just past an object's '{'. Each member's value is kept, cut, or scanned further
 * (descend gets the member's key and the position just past the value's opening bracket);
 * returns the position past the closing '}'. */
static cursor scan_object(Scan *scan, cursor p, Chooser choose, Descender descend) {
    cursor end = scan->end;
    p = skip_whitespace(p, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        cursor key;
        Py_ssize_t key_length;
        cursor value = read_key(p, end, &key, &key_length);
        if (value == NULL || value >= end) return NULL;
        Action action = choose(scan, key, key_length, value);
        if (action == DESCEND) {
            p = descend(scan, key, key_length, value + 1);
        } else {
            p = skip_value(value, end);
            if (p != NULL && action != KEEP && add_cut(scan, action, value, p) < 0) return NULL;
        }
        if (p == NULL) return NULL;
        p = skip_whitespace(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_whitespace(p + 1, end);
    }
}

/* ------------------------------------------------------------------ the answer (_payload_copy.h builds it) */

static PyObject *compact(PyObject *module, PyObject *line) {
    (void)module;
    Py_buffer buffer;
    if (PyObject_GetBuffer(line, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    Scan scan = {(cursor)buffer.buf, (cursor)buffer.buf + buffer.len, NULL, 0, 0, NULL, 0, 0, 0};
    PyObject *result = NULL;
    cursor p = skip_whitespace(scan.base, scan.end);
    if (p < scan.end && *p == '{') {
        /* The GIL stays held: the scan takes microseconds and allocates with PyMem. */
        cursor after = scan_object(&scan, p + 1, choose_top_level_member, scan_top_level_member);
        if (after != NULL && scan.cut_count > 0)
            result = build_result(scan.cuts, scan.cut_count, scan.calls, scan.call_count, scan.base,
                                  scan.end - scan.base, line);
    }
    if (scan.no_memory && result == NULL && !PyErr_Occurred()) PyErr_NoMemory();
    PyMem_Free(scan.cuts);
    PyMem_Free(scan.calls);
    PyBuffer_Release(&buffer);
    if (result == NULL && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}

/* ------------------------------------------------------------------ the module */

/* Tests run both loops on a CPU with AVX2: this turns the AVX2 one off (or back on, where the
 * CPU has it) and returns whether it was on. */
static PyObject *use_avx2(PyObject *module, PyObject *enabled) {
    (void)module;
    int wanted = PyObject_IsTrue(enabled);
    if (wanted < 0) return NULL;
#ifdef SPANS_SSE2
    int was = has_avx2;
    has_avx2 = wanted && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul");
    return PyBool_FromLong(was);
#else
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef methods[] = {
    {"_use_avx2", use_avx2, METH_O, "_use_avx2(enabled, /) -> bool\n--\n\nFor tests: whether the AVX2 loop runs."},
    {"compact", compact, METH_O,
     "compact(line, /) -> (bytes, tuple[Raw | None, ...], tuple[Raw | None, ...]) | None\n--\n\n"
     "The vetted line with its call payloads and skipped top-level values replaced by 0, and\n"
     "the decoded record's calls' request and response payloads as Raw slices of the line\n"
     "(None where absent); None to decode the line itself."},
    {NULL, NULL, 0, NULL},
};

static int exec_module(PyObject *module) {
    if (import_raw_type() < 0) return -1;
#ifdef SPANS_SSE2
    __builtin_cpu_init();
    has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul");
#endif
    if (add_kept_top_level_keys(module) < 0) return -1;
#ifdef SPANS_SSE2
    /* 1: built with the vector loops (SSE2, and AVX2 where the CPU has it); 0: portable only */
    return PyModule_AddIntConstant(module, "VECTOR_PATHS", 1);
#else
    return PyModule_AddIntConstant(module, "VECTOR_PATHS", 0);
#endif
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "health._payload_spans", NULL, 0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__payload_spans(void) { return PyModuleDef_Init(&module_def); }
