/* The compiled header scan of an append's entries: sessiond.store._entryscan.
 *
 * ``scan_headers(lines, header_type, unset)`` gives the same list of
 * ``EntryHeader`` as the pure-Python ``sessiond.store.entries.decode_headers``
 * for a batch of the usual kind, in one pass over each line: it checks that the
 * line is exactly one JSON object in valid UTF-8 with no raw line break, and
 * reads the routing fields as it goes. Python's path does the same with a typed
 * msgspec decode (which skips every other field byte by byte), a search for line
 * breaks and an ASCII or UTF-8 check of the batch joined into one copy.
 *
 * It answers only where the answer is certain: anything it does not read to the
 * end with certainty gives None for the whole batch, and Python's path then
 * decides (accepts, or refuses naming the entry). So it never accepts a line
 * Python's path refuses, nor reads a header differently: it declines
 *   - a raw line break, a control character in a string, invalid UTF-8,
 *     anything that is not JSON (Python's path names the error);
 *   - a routing field of the wrong type (Python's path names it);
 *   - a key of the object written with an escape (it may spell a routing
 *     field), a routing field's string value written with one, a routing
 *     field given twice, a lone surrogate escape anywhere (Python's path masks
 *     it), nesting deeper than MAX_DEPTH, a number longer than MAX_NUMBER, a
 *     uuid of more than MAX_UUID bytes (Python's path refuses one of more
 *     than MAX_UUID characters).
 * tests/store/test_entryscan.py holds it to Python's path with hypothesis.
 *
 * No state: each call reads its arguments and returns new objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 128  /* far below msgspec's limit (Python's recursion limit) */
#define MAX_NUMBER 64  /* characters; msgspec skips longer ones too, but no transcript writes them */
#define MAX_UUID 256   /* sessiond.wire.core.MAX_UUID: a longer uuid is refused, by Python's path */

enum { F_TYPE, F_UUID, F_PARENT, F_LOGICAL_PARENT, F_SIDECHAIN, F_AGENT, F_SUBTYPE, F_SOURCE_TOOL, NFIELDS };

typedef const unsigned char *Pos;

/* ------------------------------------------------------------------ strings */

/* The offset of the first byte in p[0..16) that needs a look ('"', '\\', a
 * control character, non-ASCII), 16 when none does. */
static inline int
first_to_look_at(Pos p)
{
#ifdef __SSE2__
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i look = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
                                _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));  /* signed: non-ASCII too */
    int mask = _mm_movemask_epi8(look);
    return mask ? __builtin_ctz((unsigned)mask) : 16;
#else
    for (int i = 0; i < 16; i++)
        if (p[i] == '"' || p[i] == '\\' || p[i] < 0x20 || p[i] >= 0x80)
            return i;
    return 16;
#endif
}

static inline int
hex4(Pos p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return 0;
        v = (v << 4) | d;
    }
    *out = v;
    return 1;
}

/* The length of the valid UTF-8 sequence at p (lead byte >= 0x80), as Python's
 * strict decoder takes it (no overlong form, no surrogate, at most U+10FFFF); 0
 * for anything else. */
static inline int
utf8_length(Pos p, Pos end)
{
    unsigned c = p[0];
    Py_ssize_t left = end - p;
#define CONT(i) (left > (i) && (p[i] & 0xC0) == 0x80)
    if (c >= 0xC2 && c <= 0xDF)
        return CONT(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!CONT(1) || !CONT(2)) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && p[1] > 0x9F) return 0;  /* a surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!CONT(1) || !CONT(2) || !CONT(3)) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && p[1] > 0x8F) return 0;  /* past U+10FFFF */
        return 4;
    }
#undef CONT
    return 0;
}

/* Past the closing quote of the string whose opening quote is just before p;
 * NULL to decline. *escaped: whether it holds an escape. */
static Pos
skip_string(Pos p, Pos end, int *escaped)
{
    *escaped = 0;
    for (;;) {
        while (end - p >= 16) {
            int i = first_to_look_at(p);
            p += i;
            if (i < 16)
                break;
        }
        if (p >= end)
            return NULL;
        unsigned c = *p;
        if (c == '"')
            return p + 1;
        if (c == '\\') {
            *escaped = 1;
            if (end - p < 2)
                return NULL;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u': {
                unsigned u, low;
                if (end - p < 6 || !hex4(p + 2, &u))
                    return NULL;
                p += 6;
                if (u >= 0xDC00 && u <= 0xDFFF)
                    return NULL;  /* a lone low surrogate */
                if (u >= 0xD800 && u <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, &low)
                        || low < 0xDC00 || low > 0xDFFF)
                        return NULL;  /* a lone high surrogate */
                    p += 6;
                }
                continue;
            }
            default:
                return NULL;
            }
        }
        if (c < 0x20)
            return NULL;
        if (c >= 0x80) {
            int n = utf8_length(p, end);
            if (!n)
                return NULL;
            p += n;
            continue;
        }
        p++;
    }
}

/* ------------------------------------------------------------------ values */

static inline Pos
skip_ws(Pos p, Pos end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static inline int
is_digit(unsigned c)
{
    return c >= '0' && c <= '9';
}

static Pos
skip_number(Pos p, Pos end)
{
    Pos start = p;
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && is_digit(*p))
            p++;
    else
        return NULL;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
    }
    return p - start > MAX_NUMBER ? NULL : p;
}

static inline Pos
skip_word(Pos p, Pos end, const char *word, Py_ssize_t n)
{
    return end - p >= n && memcmp(p, word, n) == 0 ? p + n : NULL;
}

static Pos skip_value(Pos p, Pos end, int depth);

/* Past the '}' or ']' closing the container whose opener is just before p. */
static Pos
skip_container(Pos p, Pos end, int depth, unsigned close)
{
    int escaped;
    if (depth > MAX_DEPTH)
        return NULL;
    p = skip_ws(p, end);
    if (p < end && *p == close)
        return p + 1;
    for (;;) {
        if (close == '}') {
            if (p >= end || *p != '"' || !(p = skip_string(p + 1, end, &escaped)))
                return NULL;
            p = skip_ws(p, end);
            if (p >= end || *p != ':')
                return NULL;
            p = skip_ws(p + 1, end);
        }
        if (!(p = skip_value(p, end, depth)))
            return NULL;
        p = skip_ws(p, end);
        if (p >= end)
            return NULL;
        if (*p == close)
            return p + 1;
        if (*p != ',')
            return NULL;
        p = skip_ws(p + 1, end);
    }
}

static Pos
skip_value(Pos p, Pos end, int depth)
{
    int escaped;
    if (p >= end)
        return NULL;
    switch (*p) {
    case '"': return skip_string(p + 1, end, &escaped);
    case '{': return skip_container(p + 1, end, depth + 1, '}');
    case '[': return skip_container(p + 1, end, depth + 1, ']');
    case 't': return skip_word(p, end, "true", 4);
    case 'f': return skip_word(p, end, "false", 5);
    case 'n': return skip_word(p, end, "null", 4);
    default: return skip_number(p, end);
    }
}

/* ------------------------------------------------------------------ one line */

static int
field_of(Pos key, Py_ssize_t n)
{
#define IS(name) (n == (Py_ssize_t)sizeof(name) - 1 && memcmp(key, name, n) == 0)
    switch (n) {
    case 4: return IS("type") ? F_TYPE : IS("uuid") ? F_UUID : -1;
    case 7: return IS("agentId") ? F_AGENT : IS("subtype") ? F_SUBTYPE : -1;
    case 10: return IS("parentUuid") ? F_PARENT : -1;
    case 11: return IS("isSidechain") ? F_SIDECHAIN : -1;
    case 17: return IS("logicalParentUuid") ? F_LOGICAL_PARENT : -1;
    case 23: return IS("sourceToolAssistantUUID") ? F_SOURCE_TOOL : -1;
    default: return -1;
    }
#undef IS
}

/* The value of a routing field: a new reference; NULL with no exception set to
 * decline, NULL with one set on a failure. */
static PyObject *
field_value(int field, Pos *pp, Pos end)
{
    Pos p = *pp;
    if (p >= end)
        return NULL;
    if (*p == 'n') {
        if (!(*pp = skip_word(p, end, "null", 4)))
            return NULL;
        Py_RETURN_NONE;
    }
    if (field == F_SIDECHAIN) {
        if ((*pp = skip_word(p, end, "true", 4)))
            Py_RETURN_TRUE;
        if ((*pp = skip_word(p, end, "false", 5)))
            Py_RETURN_FALSE;
        return NULL;  /* the wrong type: Python's path names it */
    }
    if (*p != '"')
        return NULL;
    int escaped;
    Pos after = skip_string(p + 1, end, &escaped);
    if (!after || escaped)
        return NULL;
    if (field == F_UUID && after - p - 2 > MAX_UUID)
        return NULL;  /* maybe too long (bytes, not characters): Python's path decides */
    *pp = after;
    return PyUnicode_DecodeUTF8((const char *)p + 1, after - p - 2, "strict");
}

/* The header of one line: a new reference; NULL with no exception set to
 * decline, NULL with one set on a failure. */
static PyObject *
scan_line(PyObject *line, PyObject *header_type, PyObject *unset)
{
    Pos p = (Pos)PyBytes_AS_STRING(line);
    Pos end = p + PyBytes_GET_SIZE(line);
    PyObject *fields[NFIELDS] = {NULL};
    PyObject *header = NULL;
    int escaped;

    p = skip_ws(p, end);
    if (p >= end || *p != '{')
        goto done;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto closed;
    }
    for (;;) {
        if (p >= end || *p != '"')
            goto done;
        Pos key = p + 1;
        if (!(p = skip_string(key, end, &escaped)) || escaped)
            goto done;  /* an escaped key may spell a routing field */
        int field = field_of(key, p - 1 - key);
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            goto done;
        p = skip_ws(p + 1, end);
        if (field >= 0) {
            if (fields[field])
                goto done;  /* given twice */
            if (!(fields[field] = field_value(field, &p, end)))
                goto done;
        }
        else if (!(p = skip_value(p, end, 1)))
            goto done;
        p = skip_ws(p, end);
        if (p >= end)
            goto done;
        if (*p == '}') {
            p++;
            break;
        }
        if (*p != ',')
            goto done;
        p = skip_ws(p + 1, end);
    }
closed:
    if (skip_ws(p, end) != end)
        goto done;
    for (int i = 0; i < NFIELDS; i++) {
        if (!fields[i]) {
            fields[i] = (i == F_PARENT || i == F_LOGICAL_PARENT) ? unset : Py_None;
            Py_INCREF(fields[i]);
        }
    }
    header = PyObject_Vectorcall(header_type, fields, NFIELDS, NULL);
done:
    for (int i = 0; i < NFIELDS; i++)
        Py_XDECREF(fields[i]);
    return header;
}

/* ------------------------------------------------------------------ module */

static PyObject *
scan_headers(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "scan_headers(lines, header_type, unset)");
        return NULL;
    }
    PyObject *lines = args[0], *header_type = args[1], *unset = args[2];
    if (!PyList_CheckExact(lines))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(lines);
    PyObject *out = PyList_New(n);
    if (!out)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        PyObject *header = PyBytes_CheckExact(line) ? scan_line(line, header_type, unset) : NULL;
        if (!header) {
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        PyList_SET_ITEM(out, i, header);
    }
    return out;
}

static PyMethodDef methods[] = {
    {"scan_headers", (PyCFunction)(void (*)(void))scan_headers, METH_FASTCALL,
     "scan_headers(lines, header_type, unset): each line's header (header_type of the\n"
     "routing fields in their order, unset for an absent parentUuid or\n"
     "logicalParentUuid), or None when any line is not certain to be accepted."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_entryscan",
    "The compiled header scan of an append's entries (see sessiond/store/entries.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__entryscan(void)
{
    return PyModule_Create(&module_def);
}
