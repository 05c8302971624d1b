/* A fuzz target over the trace line formatter (acl_mem/_fake/src/trace_lines.c): the
 * input's first two bytes choose the room for text and the size of the thread table, the
 * rest are records. Called as acl_mem's writer calls it (again after each stop, with a
 * bigger table when it is full), the formatter must never crash or read out of bounds,
 * and what it writes must be whole lines of printable ASCII, one per record it consumed,
 * with the thread table only growing. Built with that file alone (no engine).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../include/acl_mem_fake.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_text(const char *text, long length)
{
    if (length > 0 && text[length - 1] != '\n')
        abort();
    for (long i = 0; i < length; i++)
        if ((text[i] < 0x20 || text[i] > 0x7e) && text[i] != '\n')
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t capacity = 1024 + (size_t)data[0] * 64; /* from one line's room up */
    uint32_t table = 1 + data[1] % 4;
    const uint8_t *records = data + 2;
    size_t left = size - 2;
    char *out = malloc(capacity);
    uint64_t *threads = malloc(table * sizeof *threads);
    uint32_t count = 0;
    if (out == NULL || threads == NULL) {
        free(out);
        free(threads);
        return 0;
    }
    for (int rounds = 0; left > 0; rounds++) {
        if (rounds > 100000)
            abort(); /* no progress: a hang */
        size_t used = 0;
        uint32_t before = count;
        long written = acl_mem_fake_trace_lines(records, left, &used, 5, threads, &count,
                                                table, out, capacity);
        if (written < 0) {
            if (used != 0)
                abort(); /* refused a first record it says it used */
            break;
        }
        if ((size_t)written > capacity || used > left || count < before || count > table)
            abort();
        check_text(out, written);
        long lines = 0;
        for (long i = 0; i < written; i++)
            lines += out[i] == '\n';
        size_t at = 0;
        long consumed = 0;
        while (at < used) {
            at += 8 + 8 * (size_t)records[at + 1];
            consumed++;
        }
        if (at != used || consumed != lines)
            abort(); /* one line per whole record used, no more, no less */
        if (used == 0 && written == 0 && count == before) {
            /* the table is full: a bigger one, as the writer does */
            uint64_t *bigger = realloc(threads, 2 * table * sizeof *threads);
            if (bigger == NULL)
                break;
            threads = bigger;
            table *= 2;
        }
        records += used;
        left -= used;
    }
    free(out);
    free(threads);
    return 0;
}
