/* A fuzz target over the share record reader (acl_mem/_fake/src/share_record.c): the
 * bytes after the record magic come from the input. The reader must never crash, read
 * out of bounds or leak; a record it accepts must write out and read back the same.
 * Built with that file alone (tests/fuzz/build.sh): no library, no share directory.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "share.h"

void am_why_set(struct am_why *why, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(why->text, sizeof why->text, format, args);
    va_end(args);
}

static void same(const struct am_record *a, const struct am_record *b)
{
    if (a->owner.pid != b->owner.pid || a->owner.start != b->owner.start || a->fd != b->fd ||
        a->dev != b->dev || a->ino != b->ino || a->offset != b->offset || a->size != b->size ||
        a->device != b->device || a->flags != b->flags || a->mem_attr != b->mem_attr ||
        a->owner_freed != b->owner_freed || a->allowed_count != b->allowed_count ||
        a->holder_count != b->holder_count)
        abort();
    for (size_t i = 0; i < a->allowed_count; i++)
        if (a->allowed[i].pid != b->allowed[i].pid || a->allowed[i].start != b->allowed[i].start ||
            a->allowed[i].exact != b->allowed[i].exact)
            abort();
    for (size_t i = 0; i < a->holder_count; i++)
        if (!am_same_identity(a->holders[i], b->holders[i]))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t magic = strlen(AM_SHARE_MAGIC);
    /* As the registry hands it over: magic, bytes, a NUL after them. */
    char *text = malloc(magic + size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, AM_SHARE_MAGIC, magic);
    if (size != 0)
        memcpy(text + magic, data, size);
    text[magic + size] = '\0';
    struct am_record record = {0};
    struct am_why why = {{0}};
    if (am_record_decode(text, magic + size, &record, &why)) {
        size_t length;
        char *again = am_record_encode(&record, &length);
        struct am_record back = {0};
        if (again == NULL || !am_record_decode(again, length, &back, &why))
            abort();
        same(&record, &back);
        am_record_free(&back);
        free(again);
        am_record_free(&record);
    } else if (why.text[0] == '\0' || record.allowed != NULL || record.holders != NULL) {
        abort(); /* a refusal says why and holds nothing */
    }
    free(text);
    return 0;
}
