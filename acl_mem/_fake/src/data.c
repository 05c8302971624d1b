/* Device profiles and CANN releases: what differs between chips and between releases,
 * as data (docs/runtime-model.md §0.1, §3.5, §3.8, §3.13, §7). The tables are generated
 * (tables.h) from acl_mem/_fake/profiles.py and versions.py, their one source. */
#include <string.h>
#include <strings.h>

#include "engine.h"

#include "tables.h"

/* Leading and trailing blanks do not count, nor does case (as in acl_mem.fake). */
static bool same_name(const char *given, const char *name)
{
    while (*given == ' ' || *given == '\t')
        given++;
    size_t length = strlen(given);
    while (length > 0 && (given[length - 1] == ' ' || given[length - 1] == '\t'))
        length--;
    return length == strlen(name) && strncasecmp(given, name, length) == 0;
}

const struct am_profile *am_profile_named(const char *name)
{
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (same_name(name, aliases[i].alias))
            name = aliases[i].name;
    for (size_t i = 0; i < am_profile_count; i++)
        if (same_name(name, am_profiles[i].name))
            return &am_profiles[i];
    return NULL;
}

const struct am_release *am_release_named(const char *name)
{
    for (size_t i = 0; i < am_release_count; i++)
        if (same_name(name, am_releases[i].name))
            return &am_releases[i];
    return NULL;
}
