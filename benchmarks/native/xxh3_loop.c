/* The kernel benchmark's C baseline: xxh3_64 of n byte strings packed in one buffer, one thread, no Python
 * object per string. parity's kernels encode records to canonical bytes *and* hash them; this loop only hashes
 * bytes encoded beforehand, so it is the floor a kernel is measured against at the same thread count.
 * Built by benchmarks/contenders.py with the system C compiler against the vendored xxHash header. */
#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include "xxhash.h"

void xxh3_many(const char *buffer, const int64_t *offsets, int64_t n, uint64_t *out) {
    for (int64_t i = 0; i < n; i++) {
        out[i] = XXH3_64bits(buffer + offsets[i], (size_t)(offsets[i + 1] - offsets[i]));
    }
}
