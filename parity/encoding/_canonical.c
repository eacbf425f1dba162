/* parity._canonical: canonical encoding v1 and its XXH3 fingerprints in C.
 *
 * The same bytes as the pure Python reference, parity/canonical.py (spec: docs/canonical-encoding.md; golden
 * vectors: fixtures/canonical/vectors.json). Exact built-in types (None, bool, int, float, str,
 * bytes, bytearray, list, tuple, dict) are encoded here; so are the numpy scalar types canonical.py registers
 * with configure(). Every other value (subclasses, sets, datetimes, Decimals, numpy arrays, unsupported
 * types) is handed to the Python encoder, so the bytes and the errors are its own.
 *
 * Values are encoded into one growing buffer per call (on the stack until it outgrows it) and hashed there:
 * the batch functions create no intermediate bytes objects.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#if defined(__GNUC__) && defined(__x86_64__)
/* xxHash's AVX2 loop for inputs over 240 bytes, compiled alongside the baseline (SSE2) one and chosen when
 * the CPU has AVX2 (as xxHash's own xxh_x86dispatch.c does): the same hashes, fewer instructions. */
#include <immintrin.h>
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#endif
#include "xxhash.h"

#define ENCODING_VERSION "parity.canonical/1"
#define API_VERSION 8

/* numpy scalar kinds (configure() maps their types to these) */
enum { K_BOOL = 1, K_INT = 2, K_F64 = 3, K_F32 = 4, K_STR = 5, K_BYTES = 6 };

static PyObject *kinds = NULL;    /* dict: type -> kind */
static PyObject *fallback = NULL; /* the Python encoder: value -> bytes */
static PyObject *feature_fallback = NULL; /* the Python feature_fingerprints, for what the C one leaves */

/* ------------------------------------------------------------------------------------------------ hashing */

#ifdef XXH_DISPATCH_AVX2
static int have_avx2 = 0; /* set when the module loads */

XXH_NO_INLINE XXH_TARGET_AVX2 XXH64_hash_t hash_long_avx2(const void *input, size_t len) {
    return XXH3_hashLong_64b_internal(input, len, XXH3_kSecret, sizeof(XXH3_kSecret), XXH3_accumulate_avx2,
                                      XXH3_scrambleAcc_avx2);
}
#endif

/* xxh3_64 of data[0:len] */
static inline uint64_t xxh3_64(const void *data, size_t len) {
#ifdef XXH_DISPATCH_AVX2
    if (len > XXH3_MIDSIZE_MAX && have_avx2) return hash_long_avx2(data, len);
#endif
    return XXH3_64bits(data, len);
}

/* ------------------------------------------------------------------------------------------------ buffer */

#define STACK_BYTES 2048

typedef struct {
    char *data;
    Py_ssize_t len, cap;
    char *heap; /* data when it outgrew the stack */
} Buf;

#define BUF_INIT(b, stack) do { (b).data = (stack); (b).len = 0; (b).cap = STACK_BYTES; (b).heap = NULL; } while (0)

static void buf_free(Buf *b) { PyMem_Free(b->heap); b->heap = NULL; }

static int buf_grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap;
    while (cap < b->len + need) cap *= 2;
    char *mem;
    if (b->heap) {
        mem = PyMem_Realloc(b->heap, cap);
    } else {
        mem = PyMem_Malloc(cap);
        if (mem) memcpy(mem, b->data, b->len);
    }
    if (!mem) { PyErr_NoMemory(); return -1; }
    b->heap = b->data = mem;
    b->cap = cap;
    return 0;
}

static inline int buf_reserve(Buf *b, Py_ssize_t need) {
    return (b->len + need <= b->cap) ? 0 : buf_grow(b, need);
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

static inline int buf_byte(Buf *b, char c) {
    if (buf_reserve(b, 1) < 0) return -1;
    b->data[b->len++] = c;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ bytes */

/* Writers of the fixed forms at a raw pointer with room for them; they return the end. The Buf writers below
 * reserve the room and call them; the column encoder (encode_batch) calls them directly. */

static inline int uleb_len(uint64_t n) {
    int k = 1;
    while (n >= 0x80) { n >>= 7; k++; }
    return k;
}

static inline unsigned char *put_head(unsigned char *p, char tag, uint64_t n) {
    *p++ = (unsigned char)tag;
    while (n >= 0x80) { *p++ = (unsigned char)((n & 0x7F) | 0x80); n >>= 7; }
    *p++ = (unsigned char)n;
    return p;
}

/* bytes of the minimal two's complement of x (1..8) */
static inline int int_width(long long x) {
    unsigned long long m = (unsigned long long)x ^ (unsigned long long)(x >> 63); /* ~x when x < 0 */
    return (int)((unsigned)(64 - __builtin_clzll(m | 1)) >> 3) + 1;
}

/* 'i', the length, then the minimal two's complement, big-endian */
static inline unsigned char *put_i64(unsigned char *p, long long x) {
    int n = int_width(x);
    p[0] = 0x69;
    p[1] = (unsigned char)n;
    unsigned long long u = (unsigned long long)x;
    for (int i = n + 1; i >= 2; i--) { p[i] = (unsigned char)u; u >>= 8; }
    return p + 2 + n;
}

/* an unsigned 64-bit value (fingerprints): 1..9 bytes, a leading 00 when the top bit is set */
static inline unsigned char *put_u64(unsigned char *p, unsigned long long u) {
    if (u < (1ULL << 63)) return put_i64(p, (long long)u);
    p[0] = 0x69;
    p[1] = 9;
    p[2] = 0;
    for (int i = 10; i >= 3; i--) { p[i] = (unsigned char)u; u >>= 8; }
    return p + 11;
}

/* 'f' and the IEEE bits, big-endian; every NaN is the one quiet NaN */
static inline unsigned char *put_f64(unsigned char *p, double d) {
    uint64_t u;
    if (d != d) u = 0x7ff8000000000000ULL;
    else memcpy(&u, &d, 8);
    u = __builtin_bswap64(u);
    p[0] = 0x66;
    memcpy(p + 1, &u, 8);
    return p + 9;
}

/* 'g' and the float32 bits, big-endian; every NaN is the one quiet NaN */
static inline unsigned char *put_f32(unsigned char *p, float f) {
    uint32_t u;
    if (f != f) u = 0x7fc00000U;
    else memcpy(&u, &f, 4);
    u = __builtin_bswap32(u);
    p[0] = 0x67;
    memcpy(p + 1, &u, 4);
    return p + 5;
}

/* put_i64 writing 8 value bytes whatever the width, so that they are one store: only where the row has
 * room for them (10 bytes from p); the cells after it overwrite the excess */
static inline unsigned char *put_i64_over(unsigned char *p, long long x) {
    int n = int_width(x);
    uint64_t u = __builtin_bswap64((uint64_t)x << (64 - 8 * n));
    p[0] = 0x69;
    p[1] = (unsigned char)n;
    memcpy(p + 2, &u, 8);
    return p + 2 + n;
}

/* tag + uleb128(n) */
static inline int buf_head(Buf *b, char tag, size_t n) {
    if (buf_reserve(b, 11) < 0) return -1;
    b->len = (char *)put_head((unsigned char *)b->data + b->len, tag, n) - b->data;
    return 0;
}

/* ------------------------------------------------------------------------------------------------ values */

static int enc(Buf *b, PyObject *v);

static int enc_fallback(Buf *b, PyObject *v) {
    if (!fallback) {
        PyErr_SetString(PyExc_RuntimeError, "parity._canonical is not configured (parity.canonical does it)");
        return -1;
    }
    PyObject *r = PyObject_CallOneArg(fallback, v);
    if (!r) return -1;
    if (!PyBytes_Check(r)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "the Python canonical encoder returned a non-bytes value");
        return -1;
    }
    int rc = buf_put(b, PyBytes_AS_STRING(r), PyBytes_GET_SIZE(r));
    Py_DECREF(r);
    return rc;
}

static inline int enc_f64(Buf *b, double d) {
    if (buf_reserve(b, 9) < 0) return -1;
    b->len = (char *)put_f64((unsigned char *)b->data + b->len, d) - b->data;
    return 0;
}

/* a float32 or float16 value, widened to double: exact back to float */
static inline int enc_f32(Buf *b, double d) {
    if (buf_reserve(b, 5) < 0) return -1;
    b->len = (char *)put_f32((unsigned char *)b->data + b->len, (float)d) - b->data;
    return 0;
}

static inline int enc_i64(Buf *b, long long x) {
    if (buf_reserve(b, 10) < 0) return -1;
    b->len = (char *)put_i64((unsigned char *)b->data + b->len, x) - b->data;
    return 0;
}

static inline int enc_u64(Buf *b, unsigned long long u) {
    if (buf_reserve(b, 11) < 0) return -1;
    b->len = (char *)put_u64((unsigned char *)b->data + b->len, u) - b->data;
    return 0;
}

static int enc_int(Buf *b, PyObject *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (!overflow) {
        if (x == -1 && PyErr_Occurred()) return -1;
        return enc_i64(b, x);
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred())) return enc_u64(b, u);
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
    }
#if PY_VERSION_HEX < 0x030D0000
    {
        /* beyond 64 bits: (bit length of v or ~v) / 8 + 1 bytes, as int.to_bytes(n, "big", signed=True) */
        PyObject *mag = overflow > 0 ? (Py_INCREF(v), v) : PyNumber_Invert(v);
        if (!mag) return -1;
        size_t bits = _PyLong_NumBits(mag);
        Py_DECREF(mag);
        if (bits == (size_t)-1 && PyErr_Occurred()) return -1;
        size_t n = bits / 8 + 1;
        if (buf_head(b, 0x69, n) < 0 || buf_reserve(b, (Py_ssize_t)n) < 0) return -1;
        if (_PyLong_AsByteArray((PyLongObject *)v, (unsigned char *)b->data + b->len, n, 0, 1) < 0) return -1;
        b->len += (Py_ssize_t)n;
        return 0;
    }
#else
    return enc_fallback(b, v);
#endif
}

static int enc_str(Buf *b, PyObject *v) {
    if (PyUnicode_IS_COMPACT_ASCII(v)) {
        Py_ssize_t n = PyUnicode_GET_LENGTH(v);
        if (buf_head(b, 0x73, (size_t)n) < 0) return -1;
        return buf_put(b, PyUnicode_DATA(v), n);
    }
    PyObject *raw = PyUnicode_AsUTF8String(v);
    if (!raw) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear(); /* lone surrogates: kept, as their 3-byte forms, so every str encodes */
        raw = PyUnicode_AsEncodedString(v, "utf-8", "surrogatepass");
        if (!raw) return -1;
    }
    int rc = buf_head(b, 0x73, (size_t)PyBytes_GET_SIZE(raw));
    if (rc == 0) rc = buf_put(b, PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw));
    Py_DECREF(raw);
    return rc;
}

static inline int enc_raw_bytes(Buf *b, const char *s, Py_ssize_t n) {
    if (buf_head(b, 0x62, (size_t)n) < 0) return -1;
    return buf_put(b, s, n);
}

static int enc_list(Buf *b, PyObject *v) {
    /* the length is read once, as in Python; items are read with bounds checks (a callback may mutate) */
    int is_list = PyList_Check(v);
    Py_ssize_t n = is_list ? PyList_GET_SIZE(v) : PyTuple_GET_SIZE(v);
    if (buf_head(b, 0x6C, (size_t)n) < 0) return -1;
    if (Py_EnterRecursiveCall(" while canonically encoding a list")) return -1;
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        PyObject *x;
        if (is_list) {
            if (i >= PyList_GET_SIZE(v)) {
                PyErr_SetString(PyExc_RuntimeError, "list changed size during canonical encoding");
                rc = -1;
                break;
            }
            x = PyList_GET_ITEM(v, i);
        } else {
            x = PyTuple_GET_ITEM(v, i);
        }
        Py_INCREF(x);
        rc = enc(b, x);
        Py_DECREF(x);
    }
    Py_LeaveRecursiveCall();
    return rc;
}

/* -------------------------------------------------------------------------------------------------- dicts */

/* Byte order of canonical encodings, as Python compares bytes. */
static inline int cmp_bytes(const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb) {
    int c = memcmp(a, b, (size_t)(na < nb ? na : nb));
    if (c) return c;
    return (na > nb) - (na < nb);
}

/* Sorted key order of dicts whose keys are all exact str, cached by key layout (the keys in insertion
 * order): records of one capture share their keys. A layout is a bytes object (kept alive by a reference
 * while it is used, so another thread replacing the slot during a callback cannot free it) holding
 * perm[n] (sorted position -> insertion index), off[n + 1] (into the sorted keys' bytes), names[n] (the
 * sorted positions in Python's str order, for feature_fingerprints) and the sorted keys' bytes. */
#define LAYOUT_HEAD(n) ((Py_ssize_t)sizeof(Py_ssize_t) * (3 * (n) + 1))
#define LAYOUT_SLOTS 512
typedef struct {
    Py_hash_t hash;
    PyObject *keys;   /* tuple, insertion order */
    PyObject *layout; /* bytes */
} LayoutSlot;
static LayoutSlot layouts[LAYOUT_SLOTS];

static inline int str_eq(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(a);
    if (n != PyUnicode_GET_LENGTH(b) || PyUnicode_KIND(a) != PyUnicode_KIND(b)) return 0;
    return memcmp(PyUnicode_DATA(a), PyUnicode_DATA(b), (size_t)n * PyUnicode_KIND(a)) == 0;
}

typedef struct {
    const char *data; /* of the key's bytes */
    Py_ssize_t len;
    Py_ssize_t index; /* insertion index */
} KeyRef;

static int keyref_cmp(const void *pa, const void *pb) {
    const KeyRef *a = pa, *b = pb;
    return cmp_bytes(a->data, a->len, b->data, b->len);
}

/* Encodes the n keys into kb, sorts them; refs[i] points into kb (valid until kb grows: offsets kept). */
static int sort_keys(PyObject **keys, Py_ssize_t n, Buf *kb, KeyRef *refs, Py_ssize_t *offs) {
    for (Py_ssize_t i = 0; i < n; i++) {
        offs[i] = kb->len;
        if (enc(kb, keys[i]) < 0) return -1;
    }
    offs[n] = kb->len;
    for (Py_ssize_t i = 0; i < n; i++) {
        refs[i].data = kb->data + offs[i];
        refs[i].len = offs[i + 1] - offs[i];
        refs[i].index = i;
    }
    qsort(refs, (size_t)n, sizeof(KeyRef), keyref_cmp);
    return 0;
}

static PyObject *make_layout(PyObject **keys, Py_ssize_t n) {
    char stack[STACK_BYTES];
    Buf kb;
    BUF_INIT(kb, stack);
    KeyRef *refs = PyMem_Malloc(sizeof(KeyRef) * n);
    KeyRef *names = PyMem_Malloc(sizeof(KeyRef) * n);
    Py_ssize_t *offs = PyMem_Malloc(sizeof(Py_ssize_t) * (n + 1));
    PyObject *layout = NULL;
    if (!refs || !names || !offs) { PyErr_NoMemory(); goto done; }
    if (sort_keys(keys, n, &kb, refs, offs) < 0) goto done;
    layout = PyBytes_FromStringAndSize(NULL, LAYOUT_HEAD(n) + kb.len);
    if (!layout) goto done;
    Py_ssize_t *perm = (Py_ssize_t *)PyBytes_AS_STRING(layout);
    Py_ssize_t *off = perm + n;
    Py_ssize_t *name_order = off + n + 1;
    char *bytes = PyBytes_AS_STRING(layout) + LAYOUT_HEAD(n);
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        perm[i] = refs[i].index;
        off[i] = pos;
        memcpy(bytes + pos, refs[i].data, refs[i].len);
        pos += refs[i].len;
        /* Python's str order is code point order, which is the byte order of the UTF-8 (surrogatepass
         * too) after the tag and length */
        Py_ssize_t skip = 2;
        while ((unsigned char)refs[i].data[skip - 1] & 0x80) skip++;
        names[i].data = refs[i].data + skip;
        names[i].len = refs[i].len - skip;
        names[i].index = i;
    }
    off[n] = pos;
    qsort(names, (size_t)n, sizeof(KeyRef), keyref_cmp);
    for (Py_ssize_t i = 0; i < n; i++) name_order[i] = names[i].index;
done:
    PyMem_Free(refs);
    PyMem_Free(names);
    PyMem_Free(offs);
    buf_free(&kb);
    return layout;
}

/* The layout of a dict whose keys are all exact str (new reference), from the cache or made and cached. */
static PyObject *str_layout(PyObject **keys, Py_ssize_t n) {
    Py_uhash_t h = 0x345678UL + (Py_uhash_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_hash_t kh = PyObject_Hash(keys[i]);
        if (kh == -1) return NULL;
        h = (h ^ (Py_uhash_t)kh) * 1000003UL;
    }
    Py_hash_t hash = (Py_hash_t)h;
    LayoutSlot *slot = &layouts[(h ^ (h >> 17)) % LAYOUT_SLOTS];
    if (slot->keys && slot->hash == hash && PyTuple_GET_SIZE(slot->keys) == n) {
        int same = 1;
        for (Py_ssize_t i = 0; i < n && same; i++) same = str_eq(PyTuple_GET_ITEM(slot->keys, i), keys[i]);
        if (same) {
            Py_INCREF(slot->layout);
            return slot->layout;
        }
    }
    PyObject *layout = make_layout(keys, n);
    if (!layout) return NULL;
    PyObject *tup = PyTuple_New(n);
    if (!tup) { Py_DECREF(layout); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) { Py_INCREF(keys[i]); PyTuple_SET_ITEM(tup, i, keys[i]); }
    PyObject *old_keys = slot->keys, *old_layout = slot->layout;
    slot->hash = hash;
    slot->keys = tup;
    Py_INCREF(layout);
    slot->layout = layout;
    Py_XDECREF(old_keys);
    Py_XDECREF(old_layout);
    return layout;
}

static int enc_dict_items(Buf *b, PyObject *d, PyObject **keys, PyObject **vals, Py_ssize_t n) {
    int all_str = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(keys[i])) { all_str = 0; break; }
    }
    if (all_str) {
        PyObject *layout = str_layout(keys, n);
        if (!layout) return -1;
        const Py_ssize_t *perm = (const Py_ssize_t *)PyBytes_AS_STRING(layout);
        const Py_ssize_t *off = perm + n;
        const char *bytes = PyBytes_AS_STRING(layout) + LAYOUT_HEAD(n);
        int rc = buf_head(b, 0x64, (size_t)n);
        for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
            rc = buf_put(b, bytes + off[i], off[i + 1] - off[i]);
            if (rc == 0) rc = enc(b, vals[perm[i]]);
        }
        Py_DECREF(layout);
        return rc;
    }
    char stack[STACK_BYTES];
    Buf kb;
    BUF_INIT(kb, stack);
    KeyRef *refs = PyMem_Malloc(sizeof(KeyRef) * n);
    Py_ssize_t *offs = PyMem_Malloc(sizeof(Py_ssize_t) * (n + 1));
    int rc = -1;
    if (!refs || !offs) { PyErr_NoMemory(); goto done; }
    if (sort_keys(keys, n, &kb, refs, offs) < 0) goto done;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (cmp_bytes(refs[i - 1].data, refs[i - 1].len, refs[i].data, refs[i].len) == 0) {
            /* two keys share their bytes (distinct NaN objects): the Python encoder's tie rule */
            rc = enc_fallback(b, d);
            goto done;
        }
    }
    rc = buf_head(b, 0x64, (size_t)n);
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        rc = buf_put(b, refs[i].data, refs[i].len);
        if (rc == 0) rc = enc(b, vals[refs[i].index]);
    }
done:
    PyMem_Free(refs);
    PyMem_Free(offs);
    buf_free(&kb);
    return rc;
}

#define SMALL_DICT 32

static int enc_dict(Buf *b, PyObject *d) {
    Py_ssize_t n = PyDict_GET_SIZE(d);
    if (n == 0) return buf_head(b, 0x64, 0);
    PyObject *small[2 * SMALL_DICT];
    PyObject **keys = small;
    if (n > SMALL_DICT) {
        keys = PyMem_Malloc(sizeof(PyObject *) * 2 * n);
        if (!keys) { PyErr_NoMemory(); return -1; }
    }
    PyObject **vals = keys + n;
    Py_ssize_t pos = 0, i = 0;
    PyObject *k, *x;
    while (i < n && PyDict_Next(d, &pos, &k, &x)) {
        Py_INCREF(k);
        Py_INCREF(x);
        keys[i] = k;
        vals[i] = x;
        i++;
    }
    int rc;
    if (i != n) {
        PyErr_SetString(PyExc_RuntimeError, "dict changed size during canonical encoding");
        rc = -1;
    } else if (Py_EnterRecursiveCall(" while canonically encoding a dict")) {
        rc = -1;
    } else {
        rc = enc_dict_items(b, d, keys, vals, n);
        Py_LeaveRecursiveCall();
    }
    for (Py_ssize_t j = 0; j < i; j++) { Py_DECREF(keys[j]); Py_DECREF(vals[j]); }
    if (keys != small) PyMem_Free(keys);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- dispatch */

static int enc_kind(Buf *b, PyObject *v, long kind) {
    switch (kind) {
    case K_BOOL: {
        int t = PyObject_IsTrue(v);
        if (t < 0) return -1;
        return buf_byte(b, t ? 0x54 : 0x46);
    }
    case K_INT: {
        PyObject *i = PyNumber_Index(v);
        if (!i) return -1;
        int rc = enc_int(b, i);
        Py_DECREF(i);
        return rc;
    }
    case K_F64:
    case K_F32: {
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        return kind == K_F64 ? enc_f64(b, d) : enc_f32(b, d);
    }
    case K_STR:
        if (PyUnicode_Check(v)) return enc_str(b, v);
        break;
    case K_BYTES:
        if (PyBytes_Check(v)) return enc_raw_bytes(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
        break;
    }
    return enc_fallback(b, v);
}

static int enc(Buf *b, PyObject *v) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyUnicode_Type) return enc_str(b, v);
    if (t == &PyLong_Type) return enc_int(b, v);
    if (t == &PyFloat_Type) return enc_f64(b, PyFloat_AS_DOUBLE(v));
    if (t == &PyDict_Type) return enc_dict(b, v);
    if (t == &PyList_Type || t == &PyTuple_Type) return enc_list(b, v);
    if (v == Py_None) return buf_byte(b, 0x4E);
    if (t == &PyBool_Type) return buf_byte(b, v == Py_True ? 0x54 : 0x46);
    if (t == &PyBytes_Type) return enc_raw_bytes(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if (t == &PyByteArray_Type) return enc_raw_bytes(b, PyByteArray_AS_STRING(v), PyByteArray_GET_SIZE(v));
    if (kinds) {
        PyObject *k = PyDict_GetItemWithError(kinds, (PyObject *)t);
        if (k) return enc_kind(b, v, PyLong_AsLong(k));
        if (PyErr_Occurred()) return -1;
    }
    return enc_fallback(b, v);
}

/* ----------------------------------------------------------------------------------------- Python entry */

/* Encodes `v` into a stack-first buffer and hands the bytes to `finish` (bytes, xxh3_64 or xxh3_128 digest). */
static PyObject *encode_then(PyObject *v, PyObject *(*finish)(const char *, Py_ssize_t)) {
    char stack[STACK_BYTES];
    Buf b;
    BUF_INIT(b, stack);
    PyObject *r = enc(&b, v) < 0 ? NULL : finish(b.data, b.len);
    buf_free(&b);
    return r;
}

static PyObject *fp64(const char *data, Py_ssize_t len) {
    return PyLong_FromUnsignedLongLong(xxh3_64(data, (size_t)len));
}

static PyObject *digest128(const char *data, Py_ssize_t len) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(data, (size_t)len));
    return PyBytes_FromStringAndSize((const char *)c.digest, sizeof(c.digest));
}

static PyObject *py_encode(PyObject *self, PyObject *v) { return encode_then(v, PyBytes_FromStringAndSize); }

static PyObject *py_fingerprint(PyObject *self, PyObject *v) { return encode_then(v, fp64); }

static PyObject *py_key_fingerprint(PyObject *self, PyObject *v) { return encode_then(v, digest128); }

enum { OUT_BYTES = 1, OUT_FP = 2, OUT_COLUMNS = 4 };

/* The batch functions' one loop over `values`. OUT_BYTES and OUT_FP: a list of each value's bytes, of its
 * fingerprint, or both as a tuple. OUT_COLUMNS: (data, offsets, fps), every value's bytes one after the other in
 * `data`, value i's at data[offsets[i]:offsets[i + 1]] (n + 1 native-order int32), and their xxh3_64 (n
 * native-order uint64): the buffers of an Arrow binary and uint64 array, made without a Python object per value;
 * OverflowError when the bytes pass what int32 offsets reach. */
static PyObject *batch(PyObject *values, int what) {
    PyObject *seq = PySequence_Fast(values, "expected an iterable of values");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int columns = what == OUT_COLUMNS;
    PyObject *bytes_out = (what & OUT_BYTES) ? PyList_New(n) : NULL;
    PyObject *fp_out = (what & OUT_FP) ? PyList_New(n) : NULL;
    PyObject *offs = columns ? PyBytes_FromStringAndSize(NULL, 4 * (n + 1)) : NULL;
    PyObject *fps = columns ? PyBytes_FromStringAndSize(NULL, 8 * n) : NULL;
    PyObject *r = NULL;
    char stack[STACK_BYTES];
    Buf b;
    BUF_INIT(b, stack);
    if (((what & OUT_BYTES) && !bytes_out) || ((what & OUT_FP) && !fp_out) || (columns && (!offs || !fps)))
        goto fail;
    if (columns) memset(PyBytes_AS_STRING(offs), 0, 4); /* offsets[0] */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_Check(seq) && i >= PyList_GET_SIZE(seq)) { /* a callback shrank the input list */
            PyErr_SetString(PyExc_RuntimeError, "list changed size during canonical encoding");
            goto fail;
        }
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        Py_ssize_t start = columns ? b.len : 0; /* the columns keep every value's bytes, one after the other */
        b.len = start;
        Py_INCREF(v);
        int rc = enc(&b, v);
        Py_DECREF(v);
        if (rc < 0) goto fail;
        if (columns) {
            if (b.len > INT32_MAX) {
                PyErr_SetString(PyExc_OverflowError, "the values' canonical bytes pass 2 GiB (int32 offsets)");
                goto fail;
            }
            int32_t end = (int32_t)b.len;
            uint64_t fp = xxh3_64(b.data + start, (size_t)(b.len - start));
            memcpy(PyBytes_AS_STRING(offs) + 4 * (i + 1), &end, 4);
            memcpy(PyBytes_AS_STRING(fps) + 8 * i, &fp, 8);
            continue;
        }
        if (bytes_out) {
            PyObject *o = PyBytes_FromStringAndSize(b.data, b.len);
            if (!o) goto fail;
            PyList_SET_ITEM(bytes_out, i, o);
        }
        if (fp_out) {
            PyObject *o = PyLong_FromUnsignedLongLong(xxh3_64(b.data, (size_t)b.len));
            if (!o) goto fail;
            PyList_SET_ITEM(fp_out, i, o);
        }
    }
    if (columns) {
        PyObject *data = PyBytes_FromStringAndSize(b.data, b.len);
        if (data) r = PyTuple_Pack(3, data, offs, fps);
        Py_XDECREF(data);
    } else if (what == OUT_BYTES) {
        r = Py_NewRef(bytes_out);
    } else if (what == OUT_FP) {
        r = Py_NewRef(fp_out);
    } else {
        r = PyTuple_Pack(2, bytes_out, fp_out);
    }
fail: /* every exit: the result, or NULL with the error set */
    buf_free(&b);
    Py_DECREF(seq);
    Py_XDECREF(bytes_out);
    Py_XDECREF(fp_out);
    Py_XDECREF(offs);
    Py_XDECREF(fps);
    return r;
}

static PyObject *py_encode_many(PyObject *self, PyObject *values) { return batch(values, OUT_BYTES); }
static PyObject *py_fingerprints(PyObject *self, PyObject *values) { return batch(values, OUT_FP); }
static PyObject *py_encode_fingerprints(PyObject *self, PyObject *values) {
    return batch(values, OUT_BYTES | OUT_FP);
}
static PyObject *py_encode_columns(PyObject *self, PyObject *values) { return batch(values, OUT_COLUMNS); }

/* The features of one dict of exact str names, encoded: its canonical bytes, in `b`; the fingerprint of each
 * value's encoding (a slice of the dict's, so each value is encoded once), `fps[j]` for the j-th name in
 * canonical (sorted bytes) order; and the fingerprint of {name: fp}, i.e. combine(), in *combined. Returns the
 * dict's key layout (new reference: perm, offsets and the names' Python str order, see make_layout), Py_None
 * (new reference) for an empty dict, or NULL on error. keys/vals: the dict's n items in insertion order. */
static PyObject *encode_features(PyObject **keys, PyObject **vals, Py_ssize_t n, Buf *b, uint64_t *fps,
                                 uint64_t *combined) {
    char stack[STACK_BYTES];
    Buf c;
    BUF_INIT(c, stack);
    PyObject *layout = n ? str_layout(keys, n) : (Py_INCREF(Py_None), Py_None);
    if (!layout) return NULL;
    const Py_ssize_t *perm = n ? (const Py_ssize_t *)PyBytes_AS_STRING(layout) : NULL;
    const Py_ssize_t *off = n ? perm + n : NULL;
    const char *kbytes = n ? PyBytes_AS_STRING(layout) + LAYOUT_HEAD(n) : NULL;
    Py_ssize_t j;
    /* the dict's encoding, hashing each value's slice */
    if (buf_head(b, 0x64, (size_t)n) < 0) goto fail;
    for (j = 0; j < n; j++) {
        if (buf_put(b, kbytes + off[j], off[j + 1] - off[j]) < 0) goto fail;
        Py_ssize_t start = b->len;
        if (enc(b, vals[perm[j]]) < 0) goto fail;
        fps[j] = xxh3_64(b->data + start, (size_t)(b->len - start));
    }
    /* combine(): {name: fp} has the same key order */
    if (buf_head(&c, 0x64, (size_t)n) < 0) goto fail;
    for (j = 0; j < n; j++) {
        if (buf_put(&c, kbytes + off[j], off[j + 1] - off[j]) < 0) goto fail;
        if (enc_u64(&c, fps[j]) < 0) goto fail;
    }
    *combined = xxh3_64(c.data, (size_t)c.len);
    buf_free(&c);
    return layout;
fail:
    buf_free(&c);
    Py_DECREF(layout);
    return NULL;
}

/* A dict's items, when it is an exact dict of exact str names: 1 with them in keys[0:n] and vals (new references:
 * release_items), 0 when it is not such a dict, -1 on error. `small` holds 2 * SMALL_DICT pointers; a larger dict's
 * go to *heap (PyMem_Free it). */
static int dict_items(PyObject *d, PyObject **small, PyObject ***keys, PyObject ***vals, Py_ssize_t *count) {
    if (!PyDict_CheckExact(d)) return 0;
    Py_ssize_t pos = 0, i = 0, n = PyDict_GET_SIZE(d);
    PyObject *k, *x;
    while (PyDict_Next(d, &pos, &k, &x))
        if (!PyUnicode_CheckExact(k)) return 0;
    *keys = small;
    if (n > SMALL_DICT && !(*keys = PyMem_Malloc(sizeof(PyObject *) * 2 * n + 1))) {
        PyErr_NoMemory();
        return -1;
    }
    *vals = *keys + n;
    pos = 0;
    while (i < n && PyDict_Next(d, &pos, &k, &x)) {
        Py_INCREF(k);
        Py_INCREF(x);
        (*keys)[i] = k;
        (*vals)[i] = x;
        i++;
    }
    *count = i;
    if (i != n) {
        PyErr_SetString(PyExc_RuntimeError, "dict changed size during canonical encoding");
        return -1;
    }
    return 1;
}

static void release_items(PyObject **keys, PyObject **small, Py_ssize_t count) {
    for (Py_ssize_t j = 0; j < count; j++) { Py_DECREF(keys[j]); Py_DECREF(keys[count + j]); }
    if (keys != small) PyMem_Free(keys);
}

/* feature_fingerprints(features) -> (encoding, [(name, fp)] sorted by name, combined fp)
 *
 * For a dict of str names: its canonical bytes, the fingerprint of each value's encoding and the fingerprint of
 * {name: fp}, i.e. combine() (encode_features). */
static PyObject *py_feature_fingerprints(PyObject *self, PyObject *d) {
    PyObject *small[2 * SMALL_DICT], **keys = NULL, **vals = NULL;
    Py_ssize_t n = 0, j;
    int native = dict_items(d, small, &keys, &vals, &n);
    if (native < 0) { if (keys) release_items(keys, small, n); return NULL; }
    if (!native) { /* dict subclasses, other mappings, names that are not exact str */
        if (feature_fallback) return PyObject_CallOneArg(feature_fallback, d);
        PyErr_SetString(PyExc_TypeError, "feature_fingerprints expects a dict of str names");
        return NULL;
    }
    char stack[STACK_BYTES];
    Buf b;
    BUF_INIT(b, stack);
    uint64_t small_fps[SMALL_DICT], *fps = small_fps, combined = 0; /* by sorted (canonical) position */
    PyObject *result = NULL, *layout = NULL, *feats = NULL;
    if (n > SMALL_DICT && !(fps = PyMem_Malloc(sizeof(uint64_t) * n))) { PyErr_NoMemory(); goto done; }
    layout = encode_features(keys, vals, n, &b, fps, &combined);
    if (!layout) goto done;
    const Py_ssize_t *perm = n ? (const Py_ssize_t *)PyBytes_AS_STRING(layout) : NULL;
    const Py_ssize_t *name_order = n ? perm + 2 * n + 1 : NULL;
    feats = PyList_New(n);
    if (!feats) goto done;
    for (j = 0; j < n; j++) { /* in sorted() order of (name, fp): the names' order, as names are distinct */
        Py_ssize_t at = name_order[j];
        PyObject *fp = PyLong_FromUnsignedLongLong(fps[at]);
        PyObject *pair = fp ? PyTuple_Pack(2, keys[perm[at]], fp) : NULL;
        Py_XDECREF(fp);
        if (!pair) goto done;
        /* (str, int) can be part of no cycle: untracked, these pairs (one per feature per record) do not
         * feed the cyclic GC's generations (CPython's own _PyTuple_MaybeUntrack does the same, later) */
        PyObject_GC_UnTrack(pair);
        PyList_SET_ITEM(feats, j, pair);
    }
    PyObject *data = PyBytes_FromStringAndSize(b.data, b.len);
    PyObject *comb = data ? PyLong_FromUnsignedLongLong(combined) : NULL;
    if (comb) result = PyTuple_Pack(3, data, feats, comb);
    Py_XDECREF(data);
    Py_XDECREF(comb);
done:
    if (fps != small_fps) PyMem_Free(fps);
    Py_XDECREF(feats);
    Py_XDECREF(layout);
    buf_free(&b);
    release_items(keys, small, n);
    return result;
}

/* feature_fingerprints_many(values) -> (encodings, combined fps, offsets, name_offsets, names, fps) | None
 *
 * feature_fingerprints of each dict of `values` (a list), without a Python object per feature: each value's
 * canonical bytes and combined fingerprint as lists, and its (name, fp) pairs, in name order, as the four
 * buffers of an Arrow map<string, uint64> array: the records' int32 offsets into the entries, the names' int32
 * offsets into their UTF-8 bytes, those bytes, and the fingerprints as little-endian uint64. A None value is a record
 * left out: None, None and no features. None when a value is neither None nor an exact dict of exact str names,
 * or an offset passes int32: the caller takes them one by one. */
static PyObject *py_feature_fingerprints_many(PyObject *self, PyObject *values) {
    if (!PyList_CheckExact(values)) Py_RETURN_NONE;
    Py_ssize_t count = PyList_GET_SIZE(values), i, j;
    char stack[STACK_BYTES], nstack[STACK_BYTES], ostack[STACK_BYTES], fstack[STACK_BYTES], mstack[STACK_BYTES];
    Buf b, names, name_offs, feature_fps, offs;
    BUF_INIT(b, stack);
    BUF_INIT(names, nstack);
    BUF_INIT(name_offs, ostack);
    BUF_INIT(feature_fps, fstack);
    BUF_INIT(offs, mstack);
    PyObject *data_out = PyList_New(count), *fp_out = PyList_New(count), *result = NULL;
    uint64_t small_fps[SMALL_DICT], *fps = small_fps;
    Py_ssize_t fps_cap = SMALL_DICT;
    int32_t entries = 0, name_at = 0;
    if (!data_out || !fp_out) goto out;
    if (buf_put(&offs, &entries, 4) < 0 || buf_put(&name_offs, &name_at, 4) < 0) goto out;
    for (i = 0; i < count; i++) {
        PyObject *small[2 * SMALL_DICT], **keys = NULL, **vals = NULL;
        Py_ssize_t n = 0;
        if (PyList_GET_ITEM(values, i) == Py_None) { /* a record left out: no features, no bytes, no fingerprint */
            if (buf_put(&offs, &entries, 4) < 0) goto out;
            Py_INCREF(Py_None);
            PyList_SET_ITEM(data_out, i, Py_None);
            Py_INCREF(Py_None);
            PyList_SET_ITEM(fp_out, i, Py_None);
            continue;
        }
        int native = dict_items(PyList_GET_ITEM(values, i), small, &keys, &vals, &n);
        if (native <= 0) {
            if (keys) release_items(keys, small, n);
            if (native < 0) goto out;
            goto none;
        }
        if (n > fps_cap) {
            uint64_t *grown = fps == small_fps ? PyMem_Malloc(sizeof(uint64_t) * n)
                                               : PyMem_Realloc(fps, sizeof(uint64_t) * n);
            if (!grown) { release_items(keys, small, n); PyErr_NoMemory(); goto out; }
            fps = grown;
            fps_cap = n;
        }
        uint64_t combined = 0;
        b.len = 0;
        PyObject *layout = encode_features(keys, vals, n, &b, fps, &combined);
        int ok = layout != NULL;
        if (ok && n) {
            const Py_ssize_t *perm = (const Py_ssize_t *)PyBytes_AS_STRING(layout);
            const Py_ssize_t *name_order = perm + 2 * n + 1;
            for (j = 0; ok && j < n; j++) {
                Py_ssize_t at = name_order[j], size;
                const char *name = PyUnicode_AsUTF8AndSize(keys[perm[at]], &size);
                ok = name && (int64_t)name_at + size <= INT32_MAX && buf_put(&names, name, size) == 0 &&
                     buf_put(&feature_fps, &fps[at], 8) == 0;
                if (ok) {
                    name_at += (int32_t)size;
                    ok = buf_put(&name_offs, &name_at, 4) == 0;
                }
            }
            if (ok && (int64_t)entries + n > INT32_MAX) ok = 0;
            entries += (int32_t)n;
        }
        Py_XDECREF(layout);
        release_items(keys, small, n);
        if (!ok) {
            if (PyErr_Occurred()) goto out;
            goto none; /* past int32: pyarrow's conversion takes these */
        }
        if (buf_put(&offs, &entries, 4) < 0) goto out;
        PyObject *data = PyBytes_FromStringAndSize(b.data, b.len);
        PyObject *fp = data ? PyLong_FromUnsignedLongLong(combined) : NULL;
        if (!fp) { Py_XDECREF(data); goto out; }
        PyList_SET_ITEM(data_out, i, data);
        PyList_SET_ITEM(fp_out, i, fp);
    }
    result = Py_BuildValue("(NNy#y#y#y#)", data_out, fp_out, offs.data, offs.len, name_offs.data, name_offs.len,
                           names.data, names.len, feature_fps.data, feature_fps.len);
    data_out = fp_out = NULL;
    goto out;
none: /* a value the caller takes one by one */
    result = Py_None;
    Py_INCREF(result);
out: /* every exit: the result, or None, or NULL with the error set */
    Py_XDECREF(data_out);
    Py_XDECREF(fp_out);
    if (fps != small_fps) PyMem_Free(fps);
    buf_free(&b);
    buf_free(&names);
    buf_free(&name_offs);
    buf_free(&feature_fps);
    buf_free(&offs);
    return result;
}

/* ------------------------------------------------------------------------------------------------ columns */

/* Column kinds of encode_batch, from the Arrow format strings (arrow_kind). */
enum {
    C_NULL = 0, C_BOOL = 1, C_I8 = 2, C_I16 = 3, C_I32 = 4, C_I64 = 5, C_U8 = 6, C_U16 = 7, C_U32 = 8, C_U64 = 9,
    C_F64 = 10, C_F32_AS_F64 = 11, C_F32 = 12, C_STR = 13, C_LSTR = 14, C_BIN = 15, C_LBIN = 16, C_LIST = 17,
    C_LLIST = 18, C_KINDS = 19
};

#define MAX_COLUMN_DEPTH 32

typedef struct Column {
    int kind;
    const unsigned char *valid;              /* validity bitmap, NULL: no nulls */
    const unsigned char *values;
    const unsigned char *offsets;            /* int32 or int64 offsets of the string, binary and list kinds */
    Py_ssize_t offset;                       /* cell i is at offset + i in the buffers */
    Py_ssize_t values_len;                   /* the last offset (strings), items in the child (lists) */
    struct Column *child;                    /* the items of a list kind */
} Column;

static inline int bit_at(const unsigned char *bits, Py_ssize_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }

static void column_release(Column *c) {
    if (c->child) {
        column_release(c->child);
        PyMem_Free(c->child);
        c->child = NULL;
    }
}

static inline int64_t offset_at(const Column *c, Py_ssize_t at) {
    if (c->kind == C_LSTR || c->kind == C_LBIN || c->kind == C_LLIST) {
        int64_t x;
        memcpy(&x, c->offsets + 8 * at, 8);
        return x;
    }
    int32_t x;
    memcpy(&x, c->offsets + 4 * at, 4);
    return x;
}

/* The Arrow C data interface (https://arrow.apache.org/docs/format/CDataInterface.html) */
struct ArrowSchema {
    const char *format, *name, *metadata;
    int64_t flags, n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* the kind of an Arrow format string; -1: not covered */
static int arrow_kind(const char *f, int float32_as_float64) {
    if (!f[0]) return -1;
    if (f[1] == 0) {
        switch (f[0]) {
        case 'n': return C_NULL; case 'b': return C_BOOL;
        case 'c': return C_I8; case 's': return C_I16; case 'i': return C_I32; case 'l': return C_I64;
        case 'C': return C_U8; case 'S': return C_U16; case 'I': return C_U32; case 'L': return C_U64;
        case 'g': return C_F64; case 'f': return float32_as_float64 ? C_F32_AS_F64 : C_F32;
        case 'u': return C_STR; case 'U': return C_LSTR; case 'z': return C_BIN; case 'Z': return C_LBIN;
        default: return -1;
        }
    }
    if (f[0] == '+' && f[2] == 0) return f[1] == 'l' ? C_LIST : f[1] == 'L' ? C_LLIST : -1;
    return -1;
}

/* An exported array (cell i at logical index base + i) -> c. 0: done; 1: a type not covered (c partly set;
 * column_release frees it); -1: an exception. */
static int column_from_arrow(const struct ArrowArray *a, const struct ArrowSchema *s, Py_ssize_t base,
                             int float32_as_float64, int depth, Column *c) {
    c->kind = s->dictionary || a->dictionary || depth > MAX_COLUMN_DEPTH ? -1
                                                                         : arrow_kind(s->format, float32_as_float64);
    if (c->kind < 0) return 1;
    int var = c->kind >= C_STR, list = c->kind >= C_LIST;
    int64_t want_buffers = c->kind == C_NULL ? 0 : var && !list ? 3 : 2;
    if (a->n_buffers != want_buffers || a->n_children != (list ? 1 : 0) || s->n_children != a->n_children) {
        PyErr_Format(PyExc_ValueError, "Arrow array of format '%s' with %lld buffers and %lld children",
                     s->format, (long long)a->n_buffers, (long long)a->n_children);
        return -1;
    }
    c->offset = (Py_ssize_t)(a->offset + base);
    if (c->kind == C_NULL) return 0;
    c->valid = a->null_count != 0 ? a->buffers[0] : NULL; /* -1: unknown */
    if (!var) {
        c->values = a->buffers[1];
        return c->values || a->length == 0 ? 0 : (PyErr_SetString(PyExc_ValueError, "Arrow array without values"), -1);
    }
    c->offsets = a->buffers[1];
    if (!list) c->values = a->buffers[2];
    if (!c->offsets) {
        if (a->length) { PyErr_SetString(PyExc_ValueError, "Arrow array without offsets"); return -1; }
        c->values_len = 0;
    } else {
        int64_t first = offset_at(c, (Py_ssize_t)a->offset), last = offset_at(c, (Py_ssize_t)(a->offset + a->length));
        if (first < 0 || last < first || (list && last > a->children[0]->length)) {
            PyErr_SetString(PyExc_ValueError, "malformed Arrow array: offsets outside its values");
            return -1;
        }
        c->values_len = (Py_ssize_t)last;
    }
    if (!list) return 0;
    c->child = PyMem_Calloc(1, sizeof(Column));
    if (!c->child) { PyErr_NoMemory(); return -1; }
    return column_from_arrow(a->children[0], s->children[0], 0, float32_as_float64, depth + 1, c->child);
}

#define LOAD(T, v, at) ({ T x_; memcpy(&x_, (v) + sizeof(T) * (at), sizeof(T)); x_; })

static inline int is_null(const Column *c, Py_ssize_t at) {
    return c->kind == C_NULL || (c->valid && !bit_at(c->valid, at));
}

static int malformed(void) {
    PyErr_SetString(PyExc_ValueError, "malformed column: offsets outside its values");
    return -1;
}

/* whether offsets[0..n] (32- or 64-bit) never decrease, from >= 0 to <= limit */
static int offsets_ok(const unsigned char *offsets, int wide, Py_ssize_t n, int64_t limit) {
    int bad = 0;
    if (wide) {
        for (Py_ssize_t k = 0; k < n; k++) bad |= LOAD(int64_t, offsets, k + 1) < LOAD(int64_t, offsets, k);
        return !bad && LOAD(int64_t, offsets, 0) >= 0 && LOAD(int64_t, offsets, n) <= limit;
    }
    for (Py_ssize_t k = 0; k < n; k++) bad |= LOAD(int32_t, offsets, k + 1) < LOAD(int32_t, offsets, k);
    return !bad && LOAD(int32_t, offsets, 0) >= 0 && LOAD(int32_t, offsets, n) <= limit;
}

/* An upper bound of the encoded bytes of cells i0..i0+n-1 of c, after checking their offsets (and their
 * items', for lists): they never decrease and stay inside the values, so write_rows reads them unchecked.
 * -1 and an exception for offsets outside the values. */
static Py_ssize_t column_bound(const Column *c, Py_ssize_t i0, Py_ssize_t n) {
    if (c->kind == C_NULL || c->kind == C_BOOL) return n;
    if (c->kind < C_STR) return 11 * n; /* tag, width and 9 bytes at most */
    if (n == 0) return 0;
    int wide = c->kind == C_LSTR || c->kind == C_LBIN || c->kind == C_LLIST;
    if (!offsets_ok(c->offsets + (wide ? 8 : 4) * (c->offset + i0), wide, n, c->values_len)) return malformed();
    int64_t s = offset_at(c, c->offset + i0), e = offset_at(c, c->offset + i0 + n);
    if (c->kind != C_LIST && c->kind != C_LLIST) return 11 * n + (Py_ssize_t)(e - s);
    Py_ssize_t items = column_bound(c->child, (Py_ssize_t)s, (Py_ssize_t)(e - s));
    return items < 0 ? -1 : 11 * n + items;
}

/* Writes cell i at p; returns the end. Its offsets (and its items') were checked by column_bound. */
static unsigned char *put_cell(unsigned char *p, const Column *c, Py_ssize_t i) {
    Py_ssize_t at = c->offset + i;
    if (is_null(c, at)) { *p = 0x4e; return p + 1; }
    const unsigned char *v = c->values;
    switch (c->kind) {
    case C_BOOL: *p = bit_at(v, at) ? 0x54 : 0x46; return p + 1;
    case C_I8: return put_i64(p, ((const int8_t *)v)[at]);
    case C_U8: return put_i64(p, v[at]);
    case C_I16: return put_i64(p, LOAD(int16_t, v, at));
    case C_U16: return put_i64(p, LOAD(uint16_t, v, at));
    case C_I32: return put_i64(p, LOAD(int32_t, v, at));
    case C_U32: return put_i64(p, LOAD(uint32_t, v, at));
    case C_I64: return put_i64(p, LOAD(int64_t, v, at));
    case C_U64: return put_u64(p, LOAD(uint64_t, v, at));
    case C_F64: return put_f64(p, LOAD(double, v, at));
    case C_F32_AS_F64: return put_f64(p, (double)LOAD(float, v, at));
    case C_F32: return put_f32(p, LOAD(float, v, at));
    default: break;
    }
    int64_t s = offset_at(c, at), e = offset_at(c, at + 1);
    if (c->kind == C_LIST || c->kind == C_LLIST) {
        p = put_head(p, 0x6c, (uint64_t)(e - s));
        for (int64_t k = s; k < e; k++) p = put_cell(p, c->child, (Py_ssize_t)k);
        return p;
    }
    p = put_head(p, (c->kind == C_STR || c->kind == C_LSTR) ? 0x73 : 0x62, (uint64_t)(e - s));
    memcpy(p, v + s, (size_t)(e - s));
    return p + (e - s);
}

/* a string or bytes cell: tag, length and the bytes v[s:e] (offsets checked by the caller); up to 64 bytes
 * are copied with a fixed-size move (16 or 64 bytes) when the values go on that far: the excess is
 * overwritten by what follows */
static inline unsigned char *put_str(unsigned char *p, unsigned char tag, const unsigned char *v, int64_t s, int64_t e,
                                     Py_ssize_t values_len) {
    size_t len = (size_t)(e - s);
    p = put_head(p, (char)tag, len);
    if (len <= 16 && s + 16 <= values_len) memcpy(p, v + s, 16);
    else if (len <= 64 && s + 64 <= values_len) memcpy(p, v + s, 64);
    else memcpy(p, v + s, len);
    return p + len;
}

/* How write_rows writes a column's cells (the column's kind, with the common forms of lists apart). */
enum {
    W_F64, W_F32_AS_F64, W_F32, W_I64, W_I32, W_U32, W_I16, W_U16, W_I8, W_U8, W_STR, W_BIN, W_LIST_STR, W_CELL
};

static int write_op(const Column *c) {
    switch (c->kind) {
    case C_F64: return W_F64;
    case C_F32_AS_F64: return W_F32_AS_F64;
    case C_F32: return W_F32;
    case C_I64: return W_I64;
    case C_I32: return W_I32;
    case C_U32: return W_U32;
    case C_I16: return W_I16;
    case C_U16: return W_U16;
    case C_I8: return W_I8;
    case C_U8: return W_U8;
    case C_STR: return W_STR;
    case C_BIN: return W_BIN;
    case C_LIST: return c->child->kind == C_STR && !c->child->valid ? W_LIST_STR : W_CELL;
    default: return W_CELL; /* null, bool and uint64 columns, large strings and lists, other lists */
    }
}

/* bytes per value of the fixed-width writers (those before W_STR) */
static const int write_width[] = {
    [W_F64] = 8, [W_F32_AS_F64] = 4, [W_F32] = 4, [W_I64] = 8, [W_I32] = 4, [W_U32] = 4, [W_I16] = 2,
    [W_U16] = 2, [W_I8] = 1, [W_U8] = 1,
};

/* A column of the rows: how it is written, where its cell 0 is (its value, or for the string and list
 * writers its offset), its validity bitmap and Column, and its name's canonical bytes, also padded to
 * KEY_PAD bytes so that a short name is copied with one fixed-size move. */
#define KEY_PAD 32
typedef struct {
    int op;
    const void *write, *value; /* labels in write_rows (set there): the cell's writer, and its value's */
    const unsigned char *cell0, *valid;
    Py_ssize_t offset;
    const Column *col;
    const unsigned char *key;
    Py_ssize_t klen;
    unsigned char pad[KEY_PAD];
} Slot;

/* fills in the slot of column c named key[0:klen] */
static void slot_init(Slot *sl, const Column *c, const unsigned char *key, Py_ssize_t klen) {
    sl->op = write_op(c);
    sl->col = c;
    sl->valid = c->valid;
    sl->offset = c->offset;
    sl->cell0 = sl->op == W_CELL ? NULL
                : sl->op >= W_STR ? c->offsets + 4 * c->offset /* 32-bit offsets */
                                  : c->values + write_width[sl->op] * c->offset;
    sl->key = key;
    sl->klen = klen;
    memcpy(sl->pad, key, (size_t)(klen < KEY_PAD ? klen : KEY_PAD));
}

/* Bytes past the bound that the fixed-size moves of write_rows may touch (a padded name, a string's first
 * 64 bytes, an integer's 8): they write beyond the cell, and what follows overwrites the excess. */
#define SLACK 128

/* Writes rows i0..i1-1, each the dict of its cells in the slots' order, one after the other from out (which
 * has room for the rows' bound + SLACK): row i is out[offs[i]:offs[i + 1]] (offs[i0] is 0 when i0 is 0, and
 * the caller's to set otherwise) and fps[i] its xxh3_64, hashed while it is in L1. slots[m] is a sentinel
 * (zeroed) that ends each row. Returns the end. It cannot fail (column_bound checked every offset it
 * reads) and touches no Python object, so it runs without the GIL.
 *
 * Each writer jumps straight to the next cell's (computed goto): no switch per cell, and a column with no
 * nulls skips the validity test. */
static unsigned char *write_rows(Slot *slots, Py_ssize_t m, Py_ssize_t i0, Py_ssize_t i1, unsigned char *out,
                                 unsigned char *offs, unsigned char *fps) {
    static const void *const writers[] = {
        [W_F64] = &&w_f64, [W_F32_AS_F64] = &&w_f32_as_f64, [W_F32] = &&w_f32, [W_I64] = &&w_i64,
        [W_I32] = &&w_i32, [W_U32] = &&w_u32, [W_I16] = &&w_i16, [W_U16] = &&w_u16, [W_I8] = &&w_i8,
        [W_U8] = &&w_u8, [W_STR] = &&w_str, [W_BIN] = &&w_bin, [W_LIST_STR] = &&w_list_str, [W_CELL] = &&w_cell,
    };
    for (Slot *w = slots; w < slots + m; w++) {
        w->value = w->valid ? &&w_nullable : writers[w->op];
        w->write = w->klen > KEY_PAD ? &&w_long_name : w->value;
    }
    slots[m].write = &&row_end;
    const Slot *sl;
    unsigned char head[16] = {0};
    Py_ssize_t head_len = put_head(head, 0x64, (uint64_t)m) - head, i;
    unsigned char *p = out, *row;
    int64_t off = 0, s, e;
    if (i0 == 0) memcpy(offs, &off, 8);
/* the name of the cell at sl (its first KEY_PAD bytes; w_long_name writes the rest), then a jump to its
 * value's writer (the sentinel's: row_end) */
#define CELL do { memcpy(p, sl->pad, KEY_PAD); p += sl->klen; goto *sl->write; } while (0)
#define NEXT do { sl++; CELL; } while (0)
/* the offsets of cell k of 32-bit offsets -> s, e (checked by column_bound) */
#define SPAN(offsets, k) do { s = LOAD(int32_t, offsets, k); e = LOAD(int32_t, offsets, (k) + 1); } while (0)
    for (i = i0; i < i1; i++) {
        row = p;
        memcpy(p, head, 16);
        p += head_len;
        sl = slots;
        CELL;
    w_long_name:
        memcpy(p - sl->klen + KEY_PAD, sl->key + KEY_PAD, (size_t)(sl->klen - KEY_PAD));
        goto *sl->value;
    w_nullable:
        if (!bit_at(sl->valid, sl->offset + i)) { *p++ = 0x4e; NEXT; }
        goto *writers[sl->op];
    w_f64: p = put_f64(p, LOAD(double, sl->cell0, i)); NEXT;
    w_f32_as_f64: p = put_f64(p, (double)LOAD(float, sl->cell0, i)); NEXT;
    w_f32: p = put_f32(p, LOAD(float, sl->cell0, i)); NEXT;
    w_i64: p = put_i64_over(p, LOAD(int64_t, sl->cell0, i)); NEXT;
    w_i32: p = put_i64_over(p, LOAD(int32_t, sl->cell0, i)); NEXT;
    w_u32: p = put_i64_over(p, LOAD(uint32_t, sl->cell0, i)); NEXT;
    w_i16: p = put_i64_over(p, LOAD(int16_t, sl->cell0, i)); NEXT;
    w_u16: p = put_i64_over(p, LOAD(uint16_t, sl->cell0, i)); NEXT;
    w_i8: p = put_i64_over(p, ((const int8_t *)sl->cell0)[i]); NEXT;
    w_u8: p = put_i64_over(p, sl->cell0[i]); NEXT;
    w_str:
        SPAN(sl->cell0, i);
        p = put_str(p, 0x73, sl->col->values, s, e, sl->col->values_len);
        NEXT;
    w_bin:
        SPAN(sl->cell0, i);
        p = put_str(p, 0x62, sl->col->values, s, e, sl->col->values_len);
        NEXT;
    w_list_str: /* a list of strings without nulls */
        SPAN(sl->cell0, i);
        p = put_head(p, 0x6c, (uint64_t)(e - s));
        if (e > s) {
            const Column *items = sl->col->child;
            const unsigned char *io = items->offsets + 4 * items->offset;
            int64_t end = e;
            for (int64_t k = s; k < end; k++) {
                SPAN(io, k);
                p = put_str(p, 0x73, items->values, s, e, items->values_len);
            }
        }
        NEXT;
    w_cell:
        p = put_cell(p, sl->col, i);
        NEXT;
    row_end:
        off = p - out;
        memcpy(offs + 8 * (i + 1), &off, 8);
        uint64_t fp = xxh3_64(row, (size_t)(p - row));
        memcpy(fps + 8 * i, &fp, 8);
    }
#undef SPAN
#undef NEXT
#undef CELL
    return p;
}

/* The bound of rows i0..i0+n-1 (names and heads: per_row bytes a row); -1 and an exception for offsets
 * outside the values. */
static Py_ssize_t rows_bound(const Column *cols, Py_ssize_t m, Py_ssize_t per_row, Py_ssize_t i0, Py_ssize_t n) {
    Py_ssize_t bound = per_row * n;
    for (Py_ssize_t j = 0; j < m; j++) {
        Py_ssize_t b = column_bound(&cols[j], i0, n);
        if (b < 0) return -1;
        bound += b;
    }
    return bound;
}

/* Writes rows 0..n-1 into out (room for their bound + SLACK), the GIL released; returns the end. */
static unsigned char *write_all_rows(Slot *slots, Py_ssize_t m, Py_ssize_t n, unsigned char *out,
                                     unsigned char *offs, unsigned char *fps) {
    unsigned char *end;
    Py_BEGIN_ALLOW_THREADS
    end = write_rows(slots, m, 0, n, out, offs, fps);
    Py_END_ALLOW_THREADS
    return end;
}

typedef struct { const unsigned char *key; Py_ssize_t len; Py_ssize_t column; } Name;

static int name_cmp(const void *pa, const void *pb) {
    const Name *x = pa, *y = pb;
    return cmp_bytes((const char *)x->key, x->len, (const char *)y->key, y->len);
}

/* encode_batch(batch, names, null_names, float32_as_float64) -> (list[bytes], list[int]), or None
 *
 * The canonical bytes and xxh3_64 of each row of an Arrow record batch (anything with
 * __arrow_c_array__ whose array is a struct), a row being the dict {name: value} of its cells (names: the
 * columns' names, as str, since a C name ends at a NUL) plus None for each name of null_names: the same
 * bytes as encode() of that dict. None when a column's type is not covered or two names are equal
 * (parity/encoding/columnar.py says which types are).
 *
 * The rows are written one after the other into one buffer sized from each column's end offsets, and each
 * is hashed as soon as it is written, the GIL released. */
static PyObject *py_encode_batch(PyObject *self, PyObject *args) {
    PyObject *batch, *column_names, *nulls;
    int f32_as_f64;
    if (!PyArg_ParseTuple(args, "OO!O!p:encode_batch", &batch, &PyTuple_Type, &column_names, &PyTuple_Type,
                          &nulls, &f32_as_f64)) return NULL;
    PyObject *capsules = PyObject_CallMethod(batch, "__arrow_c_array__", NULL);
    if (!capsules) return NULL;
    PyObject *result = NULL, *name_bytes = NULL, *data = NULL, *offs = NULL, *fps = NULL;
    Column *cols = NULL;
    Name *names = NULL;
    Slot *slots = NULL;
    Py_ssize_t m = 0, i, j;
    if (!PyTuple_Check(capsules) || PyTuple_GET_SIZE(capsules) != 2) {
        PyErr_SetString(PyExc_TypeError, "__arrow_c_array__ did not return (schema, array) capsules");
        goto done;
    }
    struct ArrowSchema *schema = PyCapsule_GetPointer(PyTuple_GET_ITEM(capsules, 0), "arrow_schema");
    struct ArrowArray *array = schema ? PyCapsule_GetPointer(PyTuple_GET_ITEM(capsules, 1), "arrow_array") : NULL;
    if (!array) goto done;
    if (strcmp(schema->format, "+s") != 0 || array->n_children != schema->n_children ||
        array->n_children != PyTuple_GET_SIZE(column_names)) {
        PyErr_Format(PyExc_TypeError, "expected a record batch (a struct array), got Arrow format '%s'",
                     schema->format);
        goto done;
    }
    if (array->null_count != 0 && array->buffers[0]) { result = Py_NewRef(Py_None); goto done; } /* null rows */
    Py_ssize_t n = (Py_ssize_t)array->length, nn = PyTuple_GET_SIZE(nulls);
    m = (Py_ssize_t)array->n_children + nn;
    cols = PyMem_Calloc(m ? m : 1, sizeof(Column));
    names = PyMem_Calloc(m ? m : 1, sizeof(Name));
    slots = PyMem_Calloc(m + 1, sizeof(Slot)); /* and a sentinel */
    name_bytes = PyList_New(m);
    if (!cols || !names || !slots || !name_bytes) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    for (j = 0; j < m; j++) {
        PyObject *name;
        if (j < array->n_children) {
            int rc = column_from_arrow(array->children[j], schema->children[j], (Py_ssize_t)array->offset, f32_as_f64,
                                       0, &cols[j]);
            if (rc < 0) goto done;
            if (rc > 0) { result = Py_NewRef(Py_None); goto done; }
            name = Py_NewRef(PyTuple_GET_ITEM(column_names, j)); /* not the C name, which ends at a NUL */
        } else {
            cols[j].kind = C_NULL;
            name = Py_NewRef(PyTuple_GET_ITEM(nulls, j - array->n_children));
        }
        PyObject *key = name ? encode_then(name, PyBytes_FromStringAndSize) : NULL;
        Py_XDECREF(name);
        if (!key) goto done;
        PyList_SET_ITEM(name_bytes, j, key);
        names[j].key = (const unsigned char *)PyBytes_AS_STRING(key);
        names[j].len = PyBytes_GET_SIZE(key);
        names[j].column = j;
    }
    qsort(names, (size_t)m, sizeof(Name), name_cmp); /* the canonical order of a dict's entries */
    for (j = 1; j < m; j++)
        if (name_cmp(&names[j - 1], &names[j]) == 0) { result = Py_NewRef(Py_None); goto done; }
    Py_ssize_t per_row = 1 + uleb_len((uint64_t)m);
    for (j = 0; j < m; j++) {
        slot_init(&slots[j], &cols[names[j].column], names[j].key, names[j].len);
        per_row += names[j].len;
    }
    Py_ssize_t bound = rows_bound(cols, m, per_row, 0, n);
    if (bound < 0) goto done;
    data = PyBytes_FromStringAndSize(NULL, bound + SLACK);
    offs = PyBytes_FromStringAndSize(NULL, 8 * (n + 1));
    fps = PyBytes_FromStringAndSize(NULL, 8 * n);
    if (!data || !offs || !fps) goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    write_all_rows(slots, m, n, out, (unsigned char *)PyBytes_AS_STRING(offs), (unsigned char *)PyBytes_AS_STRING(fps));
    PyObject *rows = PyList_New(n), *fp_list = PyList_New(n);
    if (rows && fp_list) {
        const unsigned char *o = (const unsigned char *)PyBytes_AS_STRING(offs);
        const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(fps);
        for (i = 0; i < n; i++) {
            int64_t s, e;
            uint64_t fp;
            memcpy(&s, o + 8 * i, 8);
            memcpy(&e, o + 8 * (i + 1), 8);
            memcpy(&fp, f + 8 * i, 8);
            PyObject *row = PyBytes_FromStringAndSize((const char *)out + s, (Py_ssize_t)(e - s));
            PyObject *fpo = row ? PyLong_FromUnsignedLongLong(fp) : NULL;
            if (!fpo) { Py_XDECREF(row); break; }
            PyList_SET_ITEM(rows, i, row);
            PyList_SET_ITEM(fp_list, i, fpo);
        }
        if (i == n) result = PyTuple_Pack(2, rows, fp_list);
    }
    Py_XDECREF(rows);
    Py_XDECREF(fp_list);
done:
    if (cols) /* zeroed where not parsed yet: releasing those does nothing */
        for (j = 0; j < m; j++) column_release(&cols[j]);
    PyMem_Free(cols);
    PyMem_Free(names);
    PyMem_Free(slots);
    Py_XDECREF(name_bytes);
    Py_XDECREF(data);
    Py_XDECREF(offs);
    Py_XDECREF(fps);
    Py_DECREF(capsules); /* the capsules release the exported batch */
    return result;
}

/* plain(values) -> bool: whether every item of `values` (a list or tuple) is built only of exact dicts, lists
 * and tuples of None, bool, int, float, str and bytes, at most MAX_PLAIN_DEPTH deep: data that pickle's round
 * trip gives back equal and of the same types (stages/coder.py's PickleRecordCoder relies on it). Exact types
 * only, so no Python code runs while the walk holds borrowed references. */
#define MAX_PLAIN_DEPTH 128

static int is_plain(PyObject *v, int depth) {
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None || t == &PyBool_Type || t == &PyLong_Type || t == &PyFloat_Type || t == &PyUnicode_Type ||
        t == &PyBytes_Type)
        return 1;
    if (depth >= MAX_PLAIN_DEPTH) return 0;
    if (t == &PyDict_Type) {
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x))
            if (!is_plain(k, depth + 1) || !is_plain(x, depth + 1)) return 0;
        return 1;
    }
    if (t == &PyList_Type || t == &PyTuple_Type) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        for (Py_ssize_t i = 0; i < n; i++)
            if (!is_plain(PySequence_Fast_GET_ITEM(v, i), depth + 1)) return 0;
        return 1;
    }
    return 0;
}

static PyObject *py_plain(PyObject *self, PyObject *values) {
    if (!PyList_CheckExact(values) && !PyTuple_CheckExact(values)) {
        PyErr_SetString(PyExc_TypeError, "plain() expects a list or tuple of values");
        return NULL;
    }
    return PyBool_FromLong(is_plain(values, -1));
}

/* wide_float(value) -> bool: whether a float that is not strictly between -2**63 and 2**63 (a NaN, too) is
 * among the values of `value`'s exact dicts and lists, at any depth (keys are not looked at). jsonl's check for
 * an integer literal that orjson read as a float (capture/jsonl.py); the reference is canonical._wide_float_py.
 * A walk deeper than MAX_WIDE_DEPTH answers 1: the caller then takes its exact (slower) path. */
#define MAX_WIDE_DEPTH 4096

static int has_wide_float(PyObject *v, int depth) {
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyFloat_Type) {
        double d = PyFloat_AS_DOUBLE(v);
        return !(-9223372036854775808.0 < d && d < 9223372036854775808.0);
    }
    if (t != &PyDict_Type && t != &PyList_Type) return 0;
    if (depth >= MAX_WIDE_DEPTH) return 1;
    if (t == &PyDict_Type) {
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        while (PyDict_Next(v, &pos, &k, &x))
            if (has_wide_float(x, depth + 1)) return 1;
        return 0;
    }
    Py_ssize_t n = PyList_GET_SIZE(v);
    for (Py_ssize_t i = 0; i < n; i++)
        if (has_wide_float(PyList_GET_ITEM(v, i), depth + 1)) return 1;
    return 0;
}

static PyObject *py_wide_float(PyObject *self, PyObject *value) {
    return PyBool_FromLong(has_wide_float(value, 0));
}

/* ---------------------------------------------------------------------------------------------- decoding */

/* decode(data) and dict_fields(data): the fast paths of canonical.decode and canonical.dict_fields for bytes
 * objects. The Python functions in canonical.py are the reference: whatever C does not accept (an error of
 * any kind, input nested deeper than DECODE_DEPTH, a type other than bytes), canonical.py hands to them, so
 * every error and its message is theirs. decode accepts only what the reference accepts: it checks its result
 * by encoding it again, as the reference does. Datetimes, dates and Decimals are built by the reference's
 * _dec, called from here (configure_decoder). */

#define DECODE_DEPTH 100

static PyObject *float32_type = NULL; /* numpy.float32 */
static PyObject *leaf_decoder = NULL; /* canonical._dec: (data, pos, hashable) -> (value, pos) */
static PyObject *reference_decoder = NULL; /* canonical._decode_py: data -> value */

typedef struct {
    PyObject *src;
    const unsigned char *p;
    Py_ssize_t n, pos;
} Reader;

static int not_decoded(void) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "not decoded in C: the reference names why");
    return -1;
}

/* uleb128 at r->pos; anything longer than 9 bytes (63 bits) is left to the reference */
static int read_uleb(Reader *r, uint64_t *out) {
    uint64_t n = 0;
    for (int shift = 0; shift < 63; shift += 7) {
        if (r->pos >= r->n) return not_decoded();
        unsigned char b = r->p[r->pos++];
        n |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) { *out = n; return 0; }
    }
    return not_decoded();
}

/* a length followed by that many bytes: their offset in *at */
static int read_sized(Reader *r, Py_ssize_t *at, Py_ssize_t *len) {
    uint64_t n;
    if (read_uleb(r, &n) < 0) return -1;
    if (n > (uint64_t)(r->n - r->pos)) return not_decoded();
    *at = r->pos;
    *len = (Py_ssize_t)n;
    r->pos += (Py_ssize_t)n;
    return 0;
}

static PyObject *dec(Reader *r, int hashable, int depth);

static PyObject *dec_int(Reader *r) {
    Py_ssize_t at, n;
    if (read_sized(r, &at, &n) < 0) return NULL;
    const unsigned char *s = r->p + at;
    if (n == 0 || n > 8) {
        if (n == 0) { not_decoded(); return NULL; } /* not canonical ("0" is 00) */
        return _PyLong_FromByteArray(s, (size_t)n, 0, 1);
    }
    uint64_t u = (s[0] & 0x80) ? UINT64_MAX : 0; /* sign extension */
    for (Py_ssize_t i = 0; i < n; i++) u = (u << 8) | s[i];
    return PyLong_FromLongLong((long long)u);
}

static PyObject *dec_items(Reader *r, unsigned char tag, int hashable, int depth) {
    uint64_t count;
    if (read_uleb(r, &count) < 0) return NULL;
    if (count > (uint64_t)(r->n - r->pos)) { not_decoded(); return NULL; } /* each item is a byte or more */
    PyObject *list = PyList_New((Py_ssize_t)count);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        PyObject *x = dec(r, hashable || tag == 0x65, depth + 1);
        if (!x) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, i, x);
    }
    PyObject *out = list;
    if (tag == 0x65) out = PyFrozenSet_New(list);
    else if (hashable) out = PyList_AsTuple(list);
    if (out != list) Py_DECREF(list);
    return out;
}

/* Decoded dict keys, by their UTF-8: the records of one set share their field names, and a key from here is the
 * same str object each time, its hash computed once (a dict insert of a new str hashes it again). Direct-mapped;
 * a slot holds the key's bytes and its str. */
#define KEY_SLOTS 1024
#define KEY_BYTES 40
typedef struct {
    Py_ssize_t len;
    char data[KEY_BYTES];
    PyObject *str;
} KeySlot;
static KeySlot key_cache[KEY_SLOTS];

static PyObject *dec_key_str(const char *data, Py_ssize_t n) {
    if (n > KEY_BYTES) return PyUnicode_DecodeUTF8(data, n, "surrogatepass");
    KeySlot *slot = &key_cache[XXH3_64bits(data, (size_t)n) % KEY_SLOTS];
    if (slot->str && slot->len == n && memcmp(slot->data, data, (size_t)n) == 0) {
        Py_INCREF(slot->str);
        return slot->str;
    }
    PyObject *str = PyUnicode_DecodeUTF8(data, n, "surrogatepass");
    if (!str || PyObject_Hash(str) == -1) { Py_XDECREF(str); return NULL; } /* hashed once, here */
    Py_XSETREF(slot->str, str);
    Py_INCREF(str);
    slot->len = n;
    memcpy(slot->data, data, (size_t)n);
    return str;
}

static PyObject *dec_dict(Reader *r, int depth) {
    uint64_t count;
    if (read_uleb(r, &count) < 0) return NULL;
    if (count > (uint64_t)(r->n - r->pos) / 2) { not_decoded(); return NULL; } /* two bytes or more an entry */
    PyObject *d = _PyDict_NewPresized((Py_ssize_t)count); /* no resizing while the entries go in */
    if (!d) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        PyObject *k;
        Py_ssize_t at, n;
        if (depth + 1 <= DECODE_DEPTH && r->pos < r->n && r->p[r->pos] == 0x73) { /* a str key: the common one */
            r->pos++;
            k = read_sized(r, &at, &n) < 0 ? NULL : dec_key_str((const char *)r->p + at, n);
        } else {
            k = dec(r, 1, depth + 1);
        }
        PyObject *v = k ? dec(r, 0, depth + 1) : NULL;
        int bad = !v || PyDict_SetItem(d, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) { Py_DECREF(d); return NULL; }
    }
    return d;
}

/* a datetime, date or Decimal, by the reference */
static PyObject *dec_leaf(Reader *r, int hashable) {
    if (!leaf_decoder) { not_decoded(); return NULL; }
    PyObject *res = PyObject_CallFunction(leaf_decoder, "Oni", r->src, r->pos - 1, hashable);
    if (!res) return NULL;
    PyObject *value = NULL;
    if (PyTuple_Check(res) && PyTuple_GET_SIZE(res) == 2) {
        Py_ssize_t end = PyLong_AsSsize_t(PyTuple_GET_ITEM(res, 1));
        if (end >= r->pos && end <= r->n) {
            r->pos = end;
            value = PyTuple_GET_ITEM(res, 0);
            Py_INCREF(value);
        }
    }
    Py_DECREF(res);
    if (!value) not_decoded();
    return value;
}

static PyObject *dec(Reader *r, int hashable, int depth) {
    if (depth > DECODE_DEPTH || r->pos >= r->n) { not_decoded(); return NULL; }
    unsigned char tag = r->p[r->pos++];
    const unsigned char *s;
    Py_ssize_t at, n;
    switch (tag) {
    case 0x4E: Py_RETURN_NONE;
    case 0x54: Py_RETURN_TRUE;
    case 0x46: Py_RETURN_FALSE;
    case 0x69: return dec_int(r);
    case 0x66:
    case 0x67: {
        Py_ssize_t size = tag == 0x66 ? 8 : 4;
        if (r->n - r->pos < size) { not_decoded(); return NULL; }
        s = r->p + r->pos;
        r->pos += size;
        uint64_t u = 0;
        for (Py_ssize_t i = 0; i < size; i++) u = (u << 8) | s[i];
        if (tag == 0x66) {
            double d;
            memcpy(&d, &u, 8);
            return PyFloat_FromDouble(d);
        }
        if (!float32_type) { not_decoded(); return NULL; }
        uint32_t u32 = (uint32_t)u;
        float f;
        memcpy(&f, &u32, 4);
        PyObject *wide = PyFloat_FromDouble((double)f);
        if (!wide) return NULL;
        PyObject *out = PyObject_CallOneArg(float32_type, wide);
        Py_DECREF(wide);
        return out;
    }
    case 0x73:
        if (read_sized(r, &at, &n) < 0) return NULL;
        return PyUnicode_DecodeUTF8((const char *)r->p + at, n, "surrogatepass");
    case 0x62:
        if (read_sized(r, &at, &n) < 0) return NULL;
        return PyBytes_FromStringAndSize((const char *)r->p + at, n);
    case 0x6C:
    case 0x65: return dec_items(r, tag, hashable, depth);
    case 0x64: return dec_dict(r, depth);
    case 0x74:
    case 0x44:
    case 0x6D: return dec_leaf(r, hashable);
    default: not_decoded(); return NULL;
    }
}

/* decode_c(data): C alone; raises on anything it does not take (the tests' view of it) */
static PyObject *py_decode_c(PyObject *self, PyObject *data) {
    if (!PyBytes_CheckExact(data)) { not_decoded(); return NULL; }
    Reader r = {data, (const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), 0};
    PyObject *value = dec(&r, 0, 0);
    if (!value) return NULL;
    if (r.pos != r.n) { Py_DECREF(value); not_decoded(); return NULL; }
    char stack[STACK_BYTES];
    Buf b;
    BUF_INIT(b, stack);
    int same = enc(&b, value) == 0 && b.len == r.n && memcmp(b.data, r.p, (size_t)r.n) == 0;
    buf_free(&b);
    if (!same) { Py_DECREF(value); not_decoded(); return NULL; }
    return value;
}

/* decode(data): decode_c, and what it does not take decoded by the reference (canonical._decode_py), so every
 * error and its message is the reference's own */
static PyObject *py_decode(PyObject *self, PyObject *data) {
    PyObject *value = py_decode_c(self, data);
    if (value || !reference_decoder || !PyErr_ExceptionMatches(PyExc_Exception)) return value;
    PyErr_Clear();
    return PyObject_CallOneArg(reference_decoder, data);
}

/* The offset after the value at pos, without decoding it (the reference's _skip); -1: the value overruns the
 * data or has an unknown tag (the reference gives None then); -2: nested too deep for C. */
static Py_ssize_t skip_value(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos, int depth) {
    if (depth > DECODE_DEPTH) return -2;
    if (pos >= n) return -1;
    unsigned char tag = p[pos++];
    Py_ssize_t size = -1;
    switch (tag) {
    case 0x4E: case 0x54: case 0x46: size = 0; break;
    case 0x67: size = 4; break;
    case 0x66: case 0x74: case 0x44: size = 8; break;
    }
    if (size >= 0) return size <= n - pos ? pos + size : -1;
    int sized = tag == 0x69 || tag == 0x73 || tag == 0x62 || tag == 0x6D;
    if (!sized && tag != 0x6C && tag != 0x65 && tag != 0x64) return -1;
    uint64_t count = 0;
    for (int shift = 0;; shift += 7) { /* lenient, as the reference: non-minimal forms are read */
        if (pos >= n) return -1;
        unsigned char b = p[pos++];
        uint64_t bits = b & 0x7F;
        if (bits && (shift >= 64 || (shift > 57 && (bits >> (64 - shift))))) count = UINT64_MAX;
        else if (bits) count |= bits << shift;
        if (b < 0x80) break;
        if (shift > 70) shift = 70;
    }
    if (sized) return count <= (uint64_t)(n - pos) ? pos + (Py_ssize_t)count : -1;
    if (tag == 0x64) count = count > UINT64_MAX / 2 ? UINT64_MAX : 2 * count;
    for (uint64_t i = 0; i < count; i++) {
        pos = skip_value(p, n, pos, depth + 1);
        if (pos < 0) return pos;
    }
    return pos;
}

/* dict_fields(data) -> {key bytes: value bytes} | None, or NotImplemented: left to the reference */
static PyObject *py_dict_fields(PyObject *self, PyObject *data) {
    if (data == Py_None) Py_RETURN_NONE;
    if (!PyBytes_CheckExact(data)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    Py_ssize_t n = PyBytes_GET_SIZE(data);
    if (n == 0 || p[0] != 0x64) Py_RETURN_NONE;
    Py_ssize_t pos = 1;
    uint64_t count = 0;
    for (int shift = 0;; shift += 7) {
        if (pos >= n) Py_RETURN_NONE;
        unsigned char b = p[pos++];
        uint64_t bits = b & 0x7F;
        if (bits && (shift >= 64 || (shift > 57 && (bits >> (64 - shift))))) count = UINT64_MAX;
        else if (bits) count |= bits << shift;
        if (b < 0x80) break;
        if (shift > 70) shift = 70;
    }
    PyObject *fields = PyDict_New();
    if (!fields) return NULL;
    for (uint64_t i = 0; i < count; i++) {
        Py_ssize_t middle = skip_value(p, n, pos, 1);
        Py_ssize_t end = middle < 0 ? middle : skip_value(p, n, middle, 1);
        if (end < 0) {
            Py_DECREF(fields);
            if (end == -2) Py_RETURN_NOTIMPLEMENTED;
            Py_RETURN_NONE;
        }
        PyObject *k = PyBytes_FromStringAndSize((const char *)p + pos, middle - pos);
        PyObject *v = k ? PyBytes_FromStringAndSize((const char *)p + middle, end - middle) : NULL;
        int bad = !v || PyDict_SetItem(fields, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (bad) { Py_DECREF(fields); return NULL; }
        pos = end;
    }
    if (pos != n || (uint64_t)PyDict_GET_SIZE(fields) != count) {
        Py_DECREF(fields);
        Py_RETURN_NONE;
    }
    return fields;
}

/* The end of the value at pos when it is plain for the tolerance tier (built only of None, bools, ints of at
 * most 127 bytes, floats, float32s, str, bytes, lists, datetimes, dates and dicts with str keys: two
 * values of the same bytes are within any tolerance), else -1 (not plain, or overruns); -2: nested deeper
 * than C goes. */
static Py_ssize_t plain_end(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos, int depth) {
    if (depth > DECODE_DEPTH) return -2;
    if (pos >= n) return -1;
    unsigned char tag = p[pos];
    if (tag == 0x69) { /* an int: one whose float() could overflow is not plain */
        Py_ssize_t end = skip_value(p, n, pos, depth);
        return (end < 0 || p[pos + 1] >= 0x80) ? -1 : end; /* a one-byte length: 127 bytes at most */
    }
    if (tag == 0x6C || tag == 0x64) {
        uint64_t count = 0;
        pos++;
        for (int shift = 0;; shift += 7) {
            if (pos >= n || shift > 56) return -1; /* no count that long fits in the bytes */
            unsigned char b = p[pos++];
            count |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) break;
        }
        for (uint64_t i = 0; i < count; i++) {
            if (tag == 0x64) {
                if (pos >= n || p[pos] != 0x73) return -1;
                pos = skip_value(p, n, pos, depth + 1);
                if (pos < 0) return pos;
            }
            pos = plain_end(p, n, pos, depth + 1);
            if (pos < 0) return pos;
        }
        return pos;
    }
    if (tag == 0x65 || tag == 0x6D) return -1; /* sets and Decimals: equal NaNs in them are not == */
    Py_ssize_t end = skip_value(p, n, pos, depth);
    return end;
}

/* differing_fields(left, right) -> None | NotImplemented | (differing, plain, only): see
 * parity/encoding/fields.py, whose Python function is the reference; NotImplemented leaves a pair to it
 * (key lists that differ, keys out of order, nesting deeper than C goes, other types than bytes). */
static PyObject *py_differing_fields(PyObject *self, PyObject *args) {
    PyObject *left, *right;
    if (!PyArg_ParseTuple(args, "OO:differing_fields", &left, &right)) return NULL;
    if (!PyBytes_CheckExact(left) || !PyBytes_CheckExact(right)) Py_RETURN_NOTIMPLEMENTED;
    const unsigned char *lp = (const unsigned char *)PyBytes_AS_STRING(left);
    const unsigned char *rp = (const unsigned char *)PyBytes_AS_STRING(right);
    Py_ssize_t ln = PyBytes_GET_SIZE(left), rn = PyBytes_GET_SIZE(right);
    if (ln == 0 || rn == 0 || lp[0] != 0x64 || rp[0] != 0x64) Py_RETURN_NONE;
    uint64_t counts[2] = {0, 0};
    Py_ssize_t pos[2] = {1, 1};
    const unsigned char *ps[2] = {lp, rp};
    Py_ssize_t ns[2] = {ln, rn};
    for (int side = 0; side < 2; side++) {
        for (int shift = 0;; shift += 7) {
            if (pos[side] >= ns[side]) Py_RETURN_NONE;
            unsigned char b = ps[side][pos[side]++];
            if (shift > 56) Py_RETURN_NOTIMPLEMENTED;
            counts[side] |= (uint64_t)(b & 0x7F) << shift;
            if (b < 0x80) break;
        }
    }
    if (counts[0] != counts[1]) Py_RETURN_NOTIMPLEMENTED;
    PyObject *differing = PyList_New(0);
    if (!differing) return NULL;
    int plain = 1;
    Py_ssize_t prev_key = -1, prev_len = 0, first_key = 1, first_len = 0;
    Py_ssize_t lpos = pos[0], rpos = pos[1];
    for (uint64_t i = 0; i < counts[0]; i++) {
        Py_ssize_t lk = skip_value(lp, ln, lpos, 1), rk = skip_value(rp, rn, rpos, 1);
        Py_ssize_t lv = lk < 0 ? lk : skip_value(lp, ln, lk, 1), rv = rk < 0 ? rk : skip_value(rp, rn, rk, 1);
        if (lv < 0 || rv < 0) {
            Py_DECREF(differing);
            if (lv == -2 || rv == -2) Py_RETURN_NOTIMPLEMENTED;
            Py_RETURN_NONE;
        }
        Py_ssize_t klen = lk - lpos;
        if (klen != rk - rpos || memcmp(lp + lpos, rp + rpos, (size_t)klen) != 0 ||
            (prev_key >= 0 && cmp_bytes((const char *)lp + prev_key, prev_len, (const char *)lp + lpos, klen) >= 0)) {
            Py_DECREF(differing); /* other keys, or keys out of order: the reference compares them as sets */
            Py_RETURN_NOTIMPLEMENTED;
        }
        if (i == 0) { first_key = lpos; first_len = klen; }
        prev_key = lpos;
        prev_len = klen;
        if (lp[lpos] != 0x73) plain = 0;
        if (lv - lk == rv - rk && memcmp(lp + lk, rp + rk, (size_t)(lv - lk)) == 0) {
            Py_ssize_t end = plain ? plain_end(lp, ln, lk, 1) : lv;
            if (end == -2) {
                Py_DECREF(differing);
                Py_RETURN_NOTIMPLEMENTED;
            }
            if (end != lv) plain = 0;
        } else {
            PyObject *entry = Py_BuildValue("(y#y#y#)", lp + lpos, klen, lp + lk, lv - lk, rp + rk, rv - rk);
            if (!entry || PyList_Append(differing, entry) < 0) {
                Py_XDECREF(entry);
                Py_DECREF(differing);
                return NULL;
            }
            Py_DECREF(entry);
        }
        lpos = lv;
        rpos = rv;
    }
    if (lpos != ln || rpos != rn) {
        Py_DECREF(differing);
        Py_RETURN_NONE;
    }
    PyObject *only = counts[0] == 1 ? PyBytes_FromStringAndSize((const char *)lp + first_key, first_len) : Py_NewRef(Py_None);
    if (!only) { Py_DECREF(differing); return NULL; }
    return Py_BuildValue("(NON)", differing, plain ? Py_True : Py_False, only);
}

static PyObject *py_configure_decoder(PyObject *self, PyObject *args) {
    PyObject *f32, *leaf, *reference;
    if (!PyArg_ParseTuple(args, "OOO:configure_decoder", &f32, &leaf, &reference)) return NULL;
    Py_INCREF(f32);
    Py_INCREF(leaf);
    Py_INCREF(reference);
    Py_XSETREF(float32_type, f32);
    Py_XSETREF(leaf_decoder, leaf);
    Py_XSETREF(reference_decoder, reference);
    Py_RETURN_NONE;
}

static PyObject *py_configure(PyObject *self, PyObject *args) {
    PyObject *k, *f, *ff = Py_None;
    if (!PyArg_ParseTuple(args, "O!O|O:configure", &PyDict_Type, &k, &f, &ff)) return NULL;
    Py_INCREF(k);
    Py_INCREF(f);
    Py_XSETREF(kinds, k);
    Py_XSETREF(fallback, f);
    if (ff != Py_None) {
        Py_INCREF(ff);
        Py_XSETREF(feature_fallback, ff);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", py_configure, METH_VARARGS,
     "configure(kinds, fallback[, feature_fallback]): numpy scalar types -> kind codes, the Python encoder "
     "for the rest, the Python feature_fingerprints for what is not a dict of str names."},
    {"encode", py_encode, METH_O, "encode(value) -> bytes: the canonical bytes of a value."},
    {"encode_many", py_encode_many, METH_O, "encode_many(values) -> list[bytes]."},
    {"fingerprint", py_fingerprint, METH_O, "fingerprint(value) -> int: xxh3_64 of the canonical bytes."},
    {"fingerprints", py_fingerprints, METH_O, "fingerprints(values) -> list[int], no intermediate bytes."},
    {"encode_fingerprints", py_encode_fingerprints, METH_O,
     "encode_fingerprints(values) -> (list[bytes], list[int]): each value's bytes and their xxh3_64."},
    {"encode_columns", py_encode_columns, METH_O,
     "encode_columns(values) -> (data, offsets, fps): the canonical bytes of all values one after the other, "
     "their int32 offsets and their xxh3_64 fingerprints, as native-order buffers."},
    {"key_fingerprint", py_key_fingerprint, METH_O,
     "key_fingerprint(value) -> bytes: the 16-byte big-endian xxh3_128 of the canonical bytes."},
    {"encode_batch", py_encode_batch, METH_VARARGS,
     "encode_batch(batch, names, null_names, float32_as_float64) -> (list[bytes], list[int]), or None: the rows "
     "of an Arrow record batch as dicts."},
    {"plain", py_plain, METH_O,
     "plain(values) -> bool: every value built only of exact dict/list/tuple/None/bool/int/float/str/bytes."},
    {"wide_float", py_wide_float, METH_O,
     "wide_float(value) -> bool: a float not strictly within +-2**63 among its dicts' and lists' values."},
    {"configure_decoder", py_configure_decoder, METH_VARARGS,
     "configure_decoder(float32_type, dec, decode_py): numpy.float32, the Python _dec for datetimes, dates and "
     "Decimals, the Python decode for what C does not take."},
    {"decode", py_decode, METH_O,
     "decode(data) -> value: canonical.decode; what C does not take is decoded by the Python reference."},
    {"decode_c", py_decode_c, METH_O,
     "decode_c(bytes) -> value: C alone; raises on anything the reference must decode or name."},
    {"dict_fields", py_dict_fields, METH_O,
     "dict_fields(bytes) -> {key bytes: value bytes} | None, or NotImplemented: nested too deep for C."},
    {"differing_fields", py_differing_fields, METH_VARARGS,
     "differing_fields(left, right) -> ([(key, left value, right value) bytes], plain, only key) | None, or "
     "NotImplemented: left to the reference (parity/encoding/fields.py)."},
    {"feature_fingerprints", py_feature_fingerprints, METH_O,
     "feature_fingerprints(dict) -> (bytes, sorted [(name, fp)], combined fp) in one encoding pass."},
    {"feature_fingerprints_many", py_feature_fingerprints_many, METH_O,
     "feature_fingerprints_many(list of dicts) -> (encodings, combined fps, offsets, name offsets, names, fps), "
     "the last four the buffers of an Arrow map<string, uint64>; or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "parity._canonical",
    "Canonical encoding v1 and XXH3 fingerprints in C (the reference is parity/canonical.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__canonical(void) {
#ifdef XXH_DISPATCH_AVX2
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
#endif
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    if (PyModule_AddStringConstant(m, "ENCODING_VERSION", ENCODING_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "API_VERSION", API_VERSION) < 0 ||
        PyModule_AddIntConstant(m, "XXHASH_VERSION_NUMBER", XXH_VERSION_NUMBER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
