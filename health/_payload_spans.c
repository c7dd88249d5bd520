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
 * Input rule: the line has been vetted as one JSON text (health.json_vet). This is a
 * structural scan, not a validator: strings are skipped by looking for the next quote or
 * backslash (a backslash and the byte after it are passed over together, which covers \" and
 * \\; a \uXXXX escape's hex digits are neither), containers by counting brackets outside
 * strings, and scalars (numbers, true, false, null) end at the first ',', '}', ']' or
 * whitespace. Every read is bounds-checked all the same, so unvetted bytes give a wrong copy
 * or None, never a read past the buffer.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__SSE2__) && !defined(SPANS_PORTABLE)
#include <emmintrin.h>
#define SPANS_SSE2 1
#endif

typedef const unsigned char *Pos;

/* The StrictRecord fields' JSON names (health.strict_schema). health.payload_spans refuses to use
   the scan when the two lists differ, so a field added to the record is never cut. */
static const char *const KEPT_TOP_LEVEL_KEYS[] = {
    "_ng_task_index", "_ng_rollout_index", "_ng_attempt_index", "_ng_no_persist", "_ng_failure_class",
    "stage_index",    "_ng_rollout_id",    "response",          "ng_trajectory",
};
#define KEPT_TOP_LEVEL_COUNT (sizeof(KEPT_TOP_LEVEL_KEYS) / sizeof(KEPT_TOP_LEVEL_KEYS[0]))

/* ------------------------------------------------------------------ scanning */

static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static inline Pos skip_space(Pos p, Pos end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

/* The first quote or backslash at or after p, or end. */
static inline Pos find_string_stop(Pos p, Pos end) {
#ifdef SPANS_SSE2
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    while (end - p >= 16) {
        __m128i block = _mm_loadu_si128((const __m128i *)p);
        unsigned mask = (unsigned)_mm_movemask_epi8(
            _mm_or_si128(_mm_cmpeq_epi8(block, quote), _mm_cmpeq_epi8(block, backslash)));
        if (mask) return p + __builtin_ctz(mask);
        p += 16;
    }
#endif
    while (p < end && *p != '"' && *p != '\\') p++;
    return p;
}

/* Past the closing quote of the string whose content starts at p; NULL if the bytes end. */
static Pos skip_string(Pos p, Pos end) {
    for (;;) {
        p = find_string_stop(p, end);
        if (p >= end) return NULL;
        if (*p == '"') return p + 1;
        p += 2; /* a backslash escapes exactly the next byte */
    }
}

/* Containers are skipped 64 bytes at a time with bit masks (one bit per byte):
 *   escaped   bytes preceded by an odd run of backslashes (found run by run: backslashes are
 *             rare outside string-heavy payloads; a run may continue from the previous block);
 *   quotes    unescaped '"'; in_string = the running parity of quotes (prefix XOR, carried
 *             from block to block), so a byte is inside a string when an odd number of quotes
 *             precede it (the closing quote itself counts as outside, which is harmless);
 *   open / close  brackets outside strings.
 * The depth can only reach zero in a block holding at least `depth` closing brackets; other
 * blocks just add their balance. */
typedef struct {
    uint64_t quote, backslash, open, close;
} Masks;

static inline uint64_t prefix_xor(uint64_t x) {
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

#ifdef SPANS_SSE2
static inline uint64_t mask16(__m128i hits) { return (uint64_t)(unsigned)_mm_movemask_epi8(hits); }

static inline Masks block_masks(const unsigned char *block) {
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 4; i++) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(block + 16 * i));
        __m128i folded = _mm_or_si128(bytes, lower);
        m.quote |= mask16(_mm_cmpeq_epi8(bytes, quote)) << (16 * i);
        m.backslash |= mask16(_mm_cmpeq_epi8(bytes, backslash)) << (16 * i);
        m.open |= mask16(_mm_cmpeq_epi8(folded, open)) << (16 * i);
        m.close |= mask16(_mm_cmpeq_epi8(folded, close)) << (16 * i);
    }
    return m;
}
#else
static inline Masks block_masks(const unsigned char *block) {
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 64; i++) {
        unsigned char c = block[i], folded = c | 0x20;
        uint64_t bit = (uint64_t)1 << i;
        if (c == '"') m.quote |= bit;
        if (c == '\\') m.backslash |= bit;
        if (folded == '{') m.open |= bit;
        if (folded == '}') m.close |= bit;
    }
    return m;
}
#endif

/* The bytes escaped by a backslash; *carry says whether the first byte of the next block is. */
static inline uint64_t escaped_bytes(uint64_t backslash, int *carry) {
    uint64_t escaped = 0;
    if (*carry) {
        escaped = 1;
        backslash &= ~(uint64_t)1;
    }
    *carry = 0;
    while (backslash) {
        int i = __builtin_ctzll(backslash);
        if (i == 63) {
            *carry = 1;
            break;
        }
        escaped |= (uint64_t)1 << (i + 1);
        backslash &= ~((uint64_t)3 << i);
    }
    return escaped;
}

/* Past the bracket closing the container whose content starts at p; masks_of computes a
 * block's masks (inlined, so each vector width gets its own copy of the loop). */
static inline __attribute__((always_inline)) Pos skip_container_with(Pos p, Pos end, Masks (*masks_of)(const unsigned char *),
                                                                     uint64_t (*parity_of)(uint64_t)) {
    uint64_t depth = 1, in_string = 0; /* in_string: all ones while the block starts in a string */
    int carry = 0;
    unsigned char padded[64];
    while (p < end) {
        const unsigned char *block = p;
        if (end - p < 64) {
            memset(padded, ' ', sizeof padded);
            memcpy(padded, p, (size_t)(end - p));
            block = padded;
        }
        Masks m = masks_of(block);
        uint64_t quotes = m.quote;
        if (m.backslash | (uint64_t)carry) quotes &= ~escaped_bytes(m.backslash, &carry);
        uint64_t inside = parity_of(quotes) ^ in_string;
        in_string = (uint64_t)((int64_t)inside >> 63);
        uint64_t open = m.open & ~inside, close = m.close & ~inside;
        uint64_t closes = (uint64_t)__builtin_popcountll(close);
        if (closes < depth) {
            depth = depth + (uint64_t)__builtin_popcountll(open) - closes;
        } else {
            for (uint64_t brackets = open | close; brackets; brackets &= brackets - 1) {
                uint64_t bit = brackets & (~brackets + 1);
                if (open & bit) {
                    depth++;
                } else if (--depth == 0) {
                    Pos after = p + __builtin_ctzll(bit) + 1;
                    return after <= end ? after : NULL;
                }
            }
        }
        p += 64;
    }
    return NULL;
}

#ifdef SPANS_SSE2
#include <immintrin.h>

__attribute__((target("avx2"))) static inline Masks block_masks_avx2(const unsigned char *block) {
    const __m256i quote = _mm256_set1_epi8('"'), backslash = _mm256_set1_epi8('\\');
    const __m256i lower = _mm256_set1_epi8(0x20);
    const __m256i open = _mm256_set1_epi8('{'), close = _mm256_set1_epi8('}');
    Masks m = {0, 0, 0, 0};
    for (int i = 0; i < 2; i++) {
        __m256i bytes = _mm256_loadu_si256((const __m256i *)(block + 32 * i));
        __m256i folded = _mm256_or_si256(bytes, lower);
        m.quote |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, quote)) << (32 * i);
        m.backslash |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(bytes, backslash)) << (32 * i);
        m.open |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, open)) << (32 * i);
        m.close |= (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(folded, close)) << (32 * i);
    }
    return m;
}

/* The prefix XOR as one carry-less multiplication by all ones. */
__attribute__((target("pclmul"))) static inline uint64_t prefix_xor_clmul(uint64_t x) {
    return (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_set_epi64x(0, (long long)x), _mm_set1_epi8(-1), 0));
}

__attribute__((target("avx2,pclmul"))) static Pos skip_container_avx2(Pos p, Pos end) {
    return skip_container_with(p, end, block_masks_avx2, prefix_xor_clmul);
}

static int has_avx2 = 0; /* AVX2 and PCLMUL, checked once at import */
#endif

static Pos skip_container_baseline(Pos p, Pos end) { return skip_container_with(p, end, block_masks, prefix_xor); }

static Pos skip_container(Pos p, Pos end) {
#ifdef SPANS_SSE2
    if (has_avx2) return skip_container_avx2(p, end);
#endif
    return skip_container_baseline(p, end);
}

/* Past the value starting at p (p is not whitespace). */
static Pos skip_value(Pos p, Pos end) {
    if (p >= end) return NULL;
    switch (*p) {
    case '"': return skip_string(p + 1, end);
    case '{':
    case '[': return skip_container(p + 1, end);
    default:
        while (p < end && *p != ',' && *p != '}' && *p != ']' && !is_space(*p)) p++;
        return p;
    }
}

/* ------------------------------------------------------------------ the path */

typedef enum { KEEP, CUT_REQUEST, CUT_RESPONSE, CUT_SKIPPED, DESCEND } Action;

typedef struct {
    Py_ssize_t start, end; /* offsets of a value replaced by 0 in the copy */
} Cut;

typedef struct {
    Py_ssize_t request_start, request_end, response_start, response_end; /* -1: absent */
} CallSpans;

typedef struct {
    Pos base, end;
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

static int add_cut(Scan *scan, Action action, Pos start, Pos end) {
    if (reserve(scan, (void **)&scan->cuts, scan->cut_count, &scan->cut_capacity, sizeof(Cut)) < 0) return -1;
    Py_ssize_t from = start - scan->base, to = end - scan->base;
    scan->cuts[scan->cut_count++] = (Cut){from, to};
    if (action == CUT_REQUEST || action == CUT_RESPONSE) {
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
static Pos read_key(Pos p, Pos end, Pos *key, Py_ssize_t *key_length) {
    if (p >= end || *p != '"') return NULL;
    Pos stop = find_string_stop(p + 1, end);
    if (stop >= end || *stop != '"') return NULL;
    *key = p + 1;
    *key_length = stop - (p + 1);
    p = skip_space(stop + 1, end);
    if (p >= end || *p != ':') return NULL;
    return skip_space(p + 1, end);
}

static inline int key_is(Pos key, Py_ssize_t length, const char *name) {
    return (size_t)length == strlen(name) && memcmp(key, name, (size_t)length) == 0;
}

/* What to do with one member's value, chosen from its key. A chooser may reset the calls:
 * msgspec keeps the last value of a repeated key, so only the calls of the last model_calls
 * member of the last ng_trajectory member are the decoded record's. */
typedef Action (*Chooser)(Scan *scan, Pos key, Py_ssize_t length, Pos value);
typedef Pos (*Descender)(Scan *scan, Pos key, Py_ssize_t length, Pos p);

static Pos scan_object(Scan *scan, Pos p, Chooser choose, Descender descend);

static Action choose_call_member(Scan *scan, Pos key, Py_ssize_t length, Pos value) {
    (void)scan;
    (void)value;
    if (key_is(key, length, "request")) return CUT_REQUEST;
    return key_is(key, length, "response") ? CUT_RESPONSE : KEEP;
}

/* p is just past '[' of a model_calls array: each object element is scanned for payloads. */
static Pos scan_model_calls(Scan *scan, Pos p) {
    Pos end = scan->end;
    p = skip_space(p, end);
    if (p < end && *p == ']') return p + 1;
    for (;;) {
        if (p >= end || add_call(scan) < 0) return NULL;
        p = *p == '{' ? scan_object(scan, p + 1, choose_call_member, NULL) : skip_value(p, end);
        if (p == NULL) return NULL;
        p = skip_space(p, end);
        if (p >= end) return NULL;
        if (*p == ']') return p + 1;
        if (*p != ',') return NULL;
        p = skip_space(p + 1, end);
    }
}

static Action choose_trajectory_member(Scan *scan, Pos key, Py_ssize_t length, Pos value) {
    if (!key_is(key, length, "model_calls")) return KEEP;
    scan->call_count = 0;
    return *value == '[' ? DESCEND : KEEP;
}

static Pos scan_model_calls_member(Scan *scan, Pos key, Py_ssize_t length, Pos p) {
    (void)key;
    (void)length;
    return scan_model_calls(scan, p);
}

static Action choose_response_member(Scan *scan, Pos key, Py_ssize_t length, Pos value) {
    (void)scan;
    (void)value;
    return key_is(key, length, "usage") ? KEEP : CUT_SKIPPED;
}

/* The top-level members the strict decode reads inside: ng_trajectory, and response, of
 * which it reads usage alone. */
static Pos scan_top_level_member(Scan *scan, Pos key, Py_ssize_t length, Pos p) {
    if (key_is(key, length, "ng_trajectory")) return scan_object(scan, p, choose_trajectory_member, scan_model_calls_member);
    return scan_object(scan, p, choose_response_member, NULL);
}

static Action choose_top_level_member(Scan *scan, Pos key, Py_ssize_t length, Pos value) {
    if (key_is(key, length, "ng_trajectory")) {
        scan->call_count = 0;
        return *value == '{' ? DESCEND : KEEP;
    }
    if (key_is(key, length, "response")) return *value == '{' ? DESCEND : KEEP;
    for (size_t i = 0; i < KEPT_TOP_LEVEL_COUNT; i++) {
        if (key_is(key, length, KEPT_TOP_LEVEL_KEYS[i])) return KEEP;
    }
    return CUT_SKIPPED;
}

/* p is just past an object's '{'. Each member's value is kept, cut, or scanned further
 * (descend gets the member's key and the position just past the value's opening bracket);
 * returns the position past the closing '}'. */
static Pos scan_object(Scan *scan, Pos p, Chooser choose, Descender descend) {
    Pos end = scan->end;
    p = skip_space(p, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        Pos key;
        Py_ssize_t key_length;
        Pos value = read_key(p, end, &key, &key_length);
        if (value == NULL || value >= end) return NULL;
        Action action = choose(scan, key, key_length, value);
        if (action == DESCEND) {
            p = descend(scan, key, key_length, value + 1);
        } else {
            p = skip_value(value, end);
            if (p != NULL && action != KEEP && add_cut(scan, action, value, p) < 0) return NULL;
        }
        if (p == NULL) return NULL;
        p = skip_space(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = skip_space(p + 1, end);
    }
}

/* ------------------------------------------------------------------ the result */

static PyObject *raw_type; /* msgspec.Raw, imported once */

/* msgspec.Raw over data[start:end] (a memoryview slice: no copy), or None when absent. */
static PyObject *raw_span(PyObject *view, Py_ssize_t start, Py_ssize_t end) {
    if (start < 0) Py_RETURN_NONE;
    PyObject *slice = PySequence_GetSlice(view, start, end);
    if (slice == NULL) return NULL;
    PyObject *raw = PyObject_CallOneArg(raw_type, slice);
    Py_DECREF(slice);
    return raw;
}

/* The line with each cut value replaced by 0. */
static PyObject *build_copy(const Scan *scan) {
    Py_ssize_t length = scan->end - scan->base, size = length;
    for (Py_ssize_t i = 0; i < scan->cut_count; i++) size -= scan->cuts[i].end - scan->cuts[i].start - 1;
    PyObject *copy = PyBytes_FromStringAndSize(NULL, size);
    if (copy == NULL) return NULL;
    char *out = PyBytes_AS_STRING(copy);
    Py_ssize_t done = 0;
    for (Py_ssize_t i = 0; i < scan->cut_count; i++) {
        const Cut *cut = &scan->cuts[i];
        memcpy(out, scan->base + done, (size_t)(cut->start - done));
        out += cut->start - done;
        *out++ = '0';
        done = cut->end;
    }
    memcpy(out, scan->base + done, (size_t)(length - done));
    return copy;
}

/* (copy, requests, responses) from a finished scan; NULL with an exception set on failure. */
static PyObject *build_result(const Scan *scan, PyObject *line) {
    PyObject *copy = NULL, *view = NULL, *requests = NULL, *responses = NULL, *result = NULL;
    if ((copy = build_copy(scan)) == NULL || (view = PyMemoryView_FromObject(line)) == NULL ||
        (requests = PyTuple_New(scan->call_count)) == NULL || (responses = PyTuple_New(scan->call_count)) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < scan->call_count; i++) {
        const CallSpans *call = &scan->calls[i];
        PyObject *request = raw_span(view, call->request_start, call->request_end);
        if (request == NULL) goto done;
        PyTuple_SET_ITEM(requests, i, request); /* steals the reference */
        PyObject *response = raw_span(view, call->response_start, call->response_end);
        if (response == NULL) goto done;
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

static PyObject *compact(PyObject *module, PyObject *line) {
    (void)module;
    Py_buffer buffer;
    if (PyObject_GetBuffer(line, &buffer, PyBUF_SIMPLE) < 0) return NULL;
    Scan scan = {(Pos)buffer.buf, (Pos)buffer.buf + buffer.len, NULL, 0, 0, NULL, 0, 0, 0};
    PyObject *result = NULL;
    Pos p = skip_space(scan.base, scan.end);
    if (p < scan.end && *p == '{') {
        /* The GIL stays held: the scan takes microseconds and allocates with PyMem. */
        Pos after = scan_object(&scan, p + 1, choose_top_level_member, scan_top_level_member);
        if (after != NULL && scan.cut_count > 0) result = build_result(&scan, line);
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
    if (raw_type == NULL) {
        PyObject *msgspec = PyImport_ImportModule("msgspec");
        if (msgspec == NULL) return -1;
        raw_type = PyObject_GetAttrString(msgspec, "Raw"); /* kept for the process's life */
        Py_DECREF(msgspec);
        if (raw_type == NULL) return -1;
    }
#ifdef SPANS_SSE2
    __builtin_cpu_init();
    has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("pclmul");
#endif
    PyObject *keys = PyTuple_New((Py_ssize_t)KEPT_TOP_LEVEL_COUNT);
    if (keys == NULL) return -1;
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
    return 0;
}

static PyModuleDef_Slot slots[] = {{Py_mod_exec, exec_module}, {0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "health._payload_spans", NULL, 0, methods, slots, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__payload_spans(void) { return PyModuleDef_Init(&module_def); }
