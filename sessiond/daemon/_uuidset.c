/* The compiled dedup set: sessiond.daemon._uuidset.UuidSet.
 *
 * The same set of strings as the pure-Python ``sessiond.daemon.uuidset.UuidSet``
 * (same interface, same answers: tests/daemon/test_uuidset.py holds both to a
 * ``set``), for the daemon's append path, which checks and adds every entry's
 * uuid. A canonical uuid (36 characters, lowercase hex, dashes at 8-13-18-23) is
 * kept as its 16 bytes in one open-addressing table (linear probing, at most 3/4
 * full: 21-43 bytes a uuid, about 30 on average), hashed with SipHash-1-3 under
 * a key drawn at import, so a client cannot pick uuids that pile up in one run
 * of the table. Adding is done on the spot: there is nothing to pack later. The
 * all-zero uuid marks an empty slot, so the nil uuid is a flag of its own.
 * Anything else called a uuid (uppercase, legacy ids, any string, any hashable)
 * stays in a plain ``set`` beside the table (``other``), as in the Python class.
 *
 * The table is one calloc'd block (never pymalloc's arenas): it goes back to the
 * system when freed, with malloc_trim (sessiond/daemon/memory.py). Every
 * operation runs holding the GIL and keeps no pointer into the table across a
 * call that may run Python code (an iterator's next, a hash), so a set used from
 * a worker thread and the loop stays consistent.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint64_t a, b; /* the uuid's 16 bytes, in the order they are written */
} Key;

typedef struct {
    PyObject_HEAD
    Key *table;          /* NULL or `capacity` slots; an all-zero slot is empty */
    Py_ssize_t capacity; /* 0 or a power of two, at least MIN_CAPACITY */
    Py_ssize_t used;     /* keys in the table */
    int has_nil;         /* the nil uuid, which cannot be told from an empty slot */
    PyObject *other;     /* NULL or a set: what is not a canonical uuid */
} UuidSetObject;

#define MIN_CAPACITY 16

static uint64_t sip_k0, sip_k1;
static PyTypeObject UuidSetType;
static PyTypeObject UuidSetIterType;

/* ------------------------------------------------------------------ keys */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                               \
    do {                                                                       \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);              \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                 \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                 \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);              \
    } while (0)

/* SipHash-1-3 of the 16 bytes (CPython's string hash since 3.11). */
static inline uint64_t
key_hash(const Key *k)
{
    uint64_t v0 = sip_k0 ^ 0x736f6d6570736575ULL, v1 = sip_k1 ^ 0x646f72616e646f6dULL;
    uint64_t v2 = sip_k0 ^ 0x6c7967656e657261ULL, v3 = sip_k1 ^ 0x7465646279746573ULL;
    uint64_t m = k->a;
    v3 ^= m; SIPROUND; v0 ^= m;
    m = k->b;
    v3 ^= m; SIPROUND; v0 ^= m;
    m = (uint64_t)16 << 56;
    v3 ^= m; SIPROUND; v0 ^= m;
    v2 ^= 0xff;
    SIPROUND; SIPROUND; SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static int8_t hexval[256];

/* 1 and the key when `u` is a canonical uuid string, 0 when it is anything
 * else, -1 on error. */
static int
parse(PyObject *u, Key *out)
{
    if (!PyUnicode_Check(u))
        return 0;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(u) < 0)
        return -1;
#endif
    if (PyUnicode_GET_LENGTH(u) != 36 || PyUnicode_KIND(u) != PyUnicode_1BYTE_KIND)
        return 0;
    const unsigned char *s = PyUnicode_1BYTE_DATA(u);
    if (s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-')
        return 0;
    /* where each byte's two hex digits start: the loop has a fixed count, unrolled */
    static const unsigned char at[16] = {0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34};
    unsigned char bytes[16];
    int bad = 0;
    for (int j = 0; j < 16; j++) {
        int hi = hexval[s[at[j]]], lo = hexval[s[at[j] + 1]];
        bad |= hi | lo;
        bytes[j] = (unsigned char)((hi << 4) | (lo & 15));
    }
    if (bad < 0)
        return 0;
    memcpy(out, bytes, 16);
    return 1;
}

static PyObject *
key_text(const Key *k)
{
    static const char digits[] = "0123456789abcdef";
    PyObject *out = PyUnicode_New(36, 127);
    if (out == NULL)
        return NULL;
    unsigned char bytes[16];
    memcpy(bytes, k, 16);
    Py_UCS1 *s = PyUnicode_1BYTE_DATA(out);
    int i = 0;
    for (int j = 0; j < 16; j++) {
        if (i == 8 || i == 13 || i == 18 || i == 23)
            s[i++] = '-';
        s[i++] = (Py_UCS1)digits[bytes[j] >> 4];
        s[i++] = (Py_UCS1)digits[bytes[j] & 15];
    }
    return out;
}

static inline int
key_empty(const Key *k)
{
    return (k->a | k->b) == 0;
}

/* ----------------------------------------------------------------- table */

/* The slot holding `k`, or the empty slot where it would go. */
static inline Key *
slot_of(Key *table, Py_ssize_t capacity, const Key *k)
{
    size_t mask = (size_t)capacity - 1, i = (size_t)key_hash(k) & mask;
    for (;;) {
        Key *slot = &table[i];
        if ((slot->a == k->a && slot->b == k->b) || key_empty(slot))
            return slot;
        i = (i + 1) & mask;
    }
}

static int
table_has(UuidSetObject *self, const Key *k)
{
    if (key_empty(k))
        return self->has_nil;
    if (self->capacity == 0)
        return 0;
    return !key_empty(slot_of(self->table, self->capacity, k));
}

static int
table_resize(UuidSetObject *self, Py_ssize_t capacity)
{
    if ((size_t)capacity > PY_SSIZE_T_MAX / sizeof(Key)) {
        PyErr_NoMemory();
        return -1;
    }
    Key *table = PyMem_RawCalloc((size_t)capacity, sizeof(Key));
    if (table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->capacity; i++) {
        if (!key_empty(&self->table[i]))
            *slot_of(table, capacity, &self->table[i]) = self->table[i];
    }
    PyMem_RawFree(self->table);
    self->table = table;
    self->capacity = capacity;
    return 0;
}

/* 1 when `k` was added, 0 when it was there, -1 on error. */
static int
table_add(UuidSetObject *self, const Key *k)
{
    if (key_empty(k)) {
        int had = self->has_nil;
        self->has_nil = 1;
        return !had;
    }
    if (self->capacity) {
        Key *slot = slot_of(self->table, self->capacity, k);
        if (!key_empty(slot))
            return 0;
        if (4 * (self->used + 1) <= 3 * self->capacity) {
            *slot = *k;
            self->used++;
            return 1;
        }
    }
    if (table_resize(self, self->capacity ? 2 * self->capacity : MIN_CAPACITY) < 0)
        return -1;
    *slot_of(self->table, self->capacity, k) = *k;
    self->used++;
    return 1;
}

/* ------------------------------------------------------------ operations */

static int
contains(UuidSetObject *self, PyObject *u)
{
    Key k;
    int r = parse(u, &k);
    if (r < 0)
        return -1;
    if (r)
        return table_has(self, &k);
    if (self->other == NULL) {
        if (PyUnicode_Check(u))
            return 0;
        /* anything else is asked of a set, as a plain set answers it (an unhashable one raises) */
        if ((self->other = PySet_New(NULL)) == NULL)
            return -1;
    }
    return PySequence_Contains(self->other, u);
}

static int
add_one(UuidSetObject *self, PyObject *u)
{
    Key k;
    int r = parse(u, &k);
    if (r < 0)
        return -1;
    if (r)
        return table_add(self, &k) < 0 ? -1 : 0;
    if (self->other == NULL && (self->other = PySet_New(NULL)) == NULL)
        return -1;
    return PySet_Add(self->other, u);
}

static int
add_all(UuidSetObject *self, PyObject *items)
{
    PyObject *it = PyObject_GetIter(items);
    if (it == NULL)
        return -1;
    PyObject *u;
    while ((u = PyIter_Next(it)) != NULL) {
        int r = add_one(self, u);
        Py_DECREF(u);
        if (r < 0) {
            Py_DECREF(it);
            return -1;
        }
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

static void
clear_all(UuidSetObject *self)
{
    PyMem_RawFree(self->table);
    self->table = NULL;
    self->capacity = self->used = 0;
    self->has_nil = 0;
    Py_CLEAR(self->other);
}

/* ---------------------------------------------------------------- methods */

static PyObject *
UuidSet_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    UuidSetObject *self = (UuidSetObject *)type->tp_alloc(type, 0);
    return (PyObject *)self; /* every field zero: an empty set */
}

static int
UuidSet_init(UuidSetObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"items", NULL};
    PyObject *items = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:UuidSet", kwlist, &items))
        return -1;
    clear_all(self);
    if (items == NULL)
        return 0;
    /* a scan's set of uuids: the table sized for it at once, not doubled on the way */
    Py_ssize_t n = PyObject_LengthHint(items, 0);
    if (n < 0)
        return -1;
    if (n > 0) {
        Py_ssize_t capacity = MIN_CAPACITY;
        while (4 * n > 3 * capacity && capacity <= PY_SSIZE_T_MAX / 2)
            capacity *= 2;
        if (table_resize(self, capacity) < 0)
            return -1;
    }
    return add_all(self, items);
}

static int
UuidSet_traverse(UuidSetObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->other);
    return 0;
}

static int
UuidSet_tp_clear(UuidSetObject *self)
{
    Py_CLEAR(self->other);
    return 0;
}

static void
UuidSet_dealloc(UuidSetObject *self)
{
    PyObject_GC_UnTrack(self);
    clear_all(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
UuidSet_len(UuidSetObject *self)
{
    return self->used + self->has_nil + (self->other ? PySet_GET_SIZE(self->other) : 0);
}

static int
UuidSet_contains(UuidSetObject *self, PyObject *u)
{
    return contains(self, u);
}

static PyObject *
UuidSet_add(UuidSetObject *self, PyObject *u)
{
    if (add_one(self, u) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
UuidSet_update(UuidSetObject *self, PyObject *items)
{
    if (add_all(self, items) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
UuidSet_ior(PyObject *self, PyObject *items)
{
    if (!PyObject_TypeCheck(self, &UuidSetType))
        Py_RETURN_NOTIMPLEMENTED;
    if (add_all((UuidSetObject *)self, items) < 0)
        return NULL;
    Py_INCREF(self);
    return self;
}

static PyObject *
UuidSet_isdisjoint(UuidSetObject *self, PyObject *items)
{
    PyObject *it = PyObject_GetIter(items);
    if (it == NULL)
        return NULL;
    PyObject *u;
    while ((u = PyIter_Next(it)) != NULL) {
        int r = contains(self, u);
        Py_DECREF(u);
        if (r != 0) {
            Py_DECREF(it);
            return r < 0 ? NULL : Py_NewRef(Py_False);
        }
    }
    Py_DECREF(it);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_TRUE;
}

static PyObject *
UuidSet_clear(UuidSetObject *self, PyObject *unused)
{
    clear_all(self);
    Py_RETURN_NONE;
}

static PyObject *
UuidSet_unpacked(PyObject *cls, PyObject *items)
{
    return PyObject_CallOneArg(cls, items);
}

static PyObject *
UuidSet_sizeof(UuidSetObject *self, PyObject *unused)
{
    return PyLong_FromSsize_t(Py_TYPE(self)->tp_basicsize + self->capacity * (Py_ssize_t)sizeof(Key));
}

static PyObject *
UuidSet_reduce(UuidSetObject *self, PyObject *unused)
{
    PyObject *items = PySequence_List((PyObject *)self);
    if (items == NULL)
        return NULL;
    return Py_BuildValue("(O(N))", (PyObject *)Py_TYPE(self), items);
}

static PyObject *
UuidSet_repr(UuidSetObject *self)
{
    return PyUnicode_FromFormat("UuidSet(%zd uuids, %zd in the table)", UuidSet_len(self),
                                self->used + self->has_nil);
}

static PyObject *
UuidSet_get_nbytes(UuidSetObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->capacity * (Py_ssize_t)sizeof(Key));
}

static PyObject *
UuidSet_get_packed(UuidSetObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->used + self->has_nil);
}

static PyObject *
UuidSet_get_other(UuidSetObject *self, void *closure)
{
    if (self->other == NULL && (self->other = PySet_New(NULL)) == NULL)
        return NULL;
    return Py_NewRef(self->other);
}

/* --------------------------------------------------------------- iterator */

typedef struct {
    PyObject_HEAD
    UuidSetObject *set; /* NULL once exhausted */
    PyObject *other;    /* an iterator over the set's `other`, NULL when done with it */
    Py_ssize_t pos;     /* the next table slot to look at */
    Py_ssize_t used;    /* the table's count when the iteration began */
    int nil_done;
} UuidSetIterObject;

static PyObject *
UuidSet_iter(UuidSetObject *self)
{
    UuidSetIterObject *it = PyObject_GC_New(UuidSetIterObject, &UuidSetIterType);
    if (it == NULL)
        return NULL;
    it->set = (UuidSetObject *)Py_NewRef(self);
    it->other = NULL;
    it->pos = 0;
    it->used = self->used;
    it->nil_done = 0;
    if (self->other != NULL && (it->other = PyObject_GetIter(self->other)) == NULL) {
        Py_DECREF(it);
        return NULL;
    }
    PyObject_GC_Track(it);
    return (PyObject *)it;
}

static PyObject *
UuidSetIter_next(UuidSetIterObject *it)
{
    UuidSetObject *s = it->set;
    if (s == NULL)
        return NULL;
    if (it->other != NULL) {
        PyObject *u = PyIter_Next(it->other);
        if (u != NULL || PyErr_Occurred())
            return u;
        Py_CLEAR(it->other);
    }
    if (s->used != it->used) {
        PyErr_SetString(PyExc_RuntimeError, "UuidSet changed size during iteration");
        return NULL;
    }
    for (; it->pos < s->capacity; it->pos++) {
        if (!key_empty(&s->table[it->pos]))
            return key_text(&s->table[it->pos++]);
    }
    if (!it->nil_done) {
        it->nil_done = 1;
        if (s->has_nil) {
            Key nil = {0, 0};
            return key_text(&nil);
        }
    }
    it->set = NULL;
    Py_DECREF(s);
    return NULL;
}

static int
UuidSetIter_traverse(UuidSetIterObject *it, visitproc visit, void *arg)
{
    Py_VISIT(it->set);
    Py_VISIT(it->other);
    return 0;
}

static void
UuidSetIter_dealloc(UuidSetIterObject *it)
{
    PyObject_GC_UnTrack(it);
    Py_XDECREF(it->set);
    Py_XDECREF(it->other);
    PyObject_GC_Del(it);
}

static PyTypeObject UuidSetIterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sessiond.daemon._uuidset.UuidSetIterator",
    .tp_basicsize = sizeof(UuidSetIterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)UuidSetIter_dealloc,
    .tp_traverse = (traverseproc)UuidSetIter_traverse,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)UuidSetIter_next,
};

/* ------------------------------------------------------------------- type */

static PyMethodDef UuidSet_methods[] = {
    {"add", (PyCFunction)UuidSet_add, METH_O, "Add one string."},
    {"update", (PyCFunction)UuidSet_update, METH_O, "Add every string of an iterable."},
    {"add_new", (PyCFunction)UuidSet_update, METH_O,
     "Add strings known to be new (``update``: a new key is found absent on its way in)."},
    {"isdisjoint", (PyCFunction)UuidSet_isdisjoint, METH_O, "True when no string of the iterable is held."},
    {"clear", (PyCFunction)UuidSet_clear, METH_NOARGS, "Drop everything (the table's memory too)."},
    {"unpacked", (PyCFunction)UuidSet_unpacked, METH_O | METH_CLASS,
     "A set holding the strings of ``items`` (the Python class's name for a scan's result; nothing is packed later)."},
    {"__sizeof__", (PyCFunction)UuidSet_sizeof, METH_NOARGS, "The object and its table, as allocated."},
    {"__reduce__", (PyCFunction)UuidSet_reduce, METH_NOARGS, "Copied and pickled as its strings."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef UuidSet_getset[] = {
    {"nbytes", (getter)UuidSet_get_nbytes, NULL, "Bytes the table takes as allocated.", NULL},
    {"packed", (getter)UuidSet_get_packed, NULL, "Canonical uuids held (in the table).", NULL},
    {"other", (getter)UuidSet_get_other, NULL, "The strings held that are not canonical uuids.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods UuidSet_as_sequence = {
    .sq_length = (lenfunc)UuidSet_len,
    .sq_contains = (objobjproc)UuidSet_contains,
};

static PyNumberMethods UuidSet_as_number = {
    .nb_inplace_or = (binaryfunc)UuidSet_ior,
};

static PyTypeObject UuidSetType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sessiond.daemon._uuidset.UuidSet",
    .tp_doc = PyDoc_STR("The dedup set of one transcript file: a set of strings, canonical uuids held as 16-byte keys."),
    .tp_basicsize = sizeof(UuidSetObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = UuidSet_new,
    .tp_init = (initproc)UuidSet_init,
    .tp_dealloc = (destructor)UuidSet_dealloc,
    .tp_traverse = (traverseproc)UuidSet_traverse,
    .tp_clear = (inquiry)UuidSet_tp_clear,
    .tp_repr = (reprfunc)UuidSet_repr,
    .tp_iter = (getiterfunc)UuidSet_iter,
    .tp_as_sequence = &UuidSet_as_sequence,
    .tp_as_number = &UuidSet_as_number,
    .tp_methods = UuidSet_methods,
    .tp_getset = UuidSet_getset,
    .tp_hash = PyObject_HashNotImplemented,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sessiond.daemon._uuidset",
    .m_doc = "The compiled dedup set (see sessiond/daemon/uuidset.py).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__uuidset(void)
{
    memset(hexval, -1, sizeof hexval);
    for (int c = 0; c < 10; c++)
        hexval['0' + c] = (int8_t)c;
    for (int c = 0; c < 6; c++)
        hexval['a' + c] = (int8_t)(10 + c);

    PyObject *os = PyImport_ImportModule("os");
    if (os == NULL)
        return NULL;
    PyObject *seed = PyObject_CallMethod(os, "urandom", "n", (Py_ssize_t)16);
    Py_DECREF(os);
    if (seed == NULL)
        return NULL;
    memcpy(&sip_k0, PyBytes_AS_STRING(seed), 8);
    memcpy(&sip_k1, PyBytes_AS_STRING(seed) + 8, 8);
    Py_DECREF(seed);

    if (PyType_Ready(&UuidSetType) < 0 || PyType_Ready(&UuidSetIterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "UuidSet", (PyObject *)&UuidSetType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
