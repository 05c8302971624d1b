/* aclInit's configuration file, read as the runtime reads it (docs/runtime-model.md
 * §3.1.1): first the raw bytes (their digest must match the first successful aclInit's),
 * then a JSON check that wants a regular file of at most 10 MiB whose brackets nest at
 * most 10 deep, then the one setting the memory calls care about (err_msg_mode). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine.h"

#define MAX_CONFIG_BYTES ((uint64_t)10 << 20)
#define MAX_NESTING 10
/* The digest of a file too big to be read: equal to no content's. */
#define TOO_BIG_DIGEST UINT64_MAX

static uint64_t digest_of(const unsigned char *bytes, size_t size)
{
    uint64_t hash = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) {
        hash ^= bytes[i];
        hash *= 1099511628211ull;
    }
    hash ^= (uint64_t)size * 0x9E3779B97F4A7C15ull;
    return hash == TOO_BIG_DIGEST ? hash - 1 : hash;
}

/* ---- a strict JSON check (what the runtime's parser accepts) ------------------------- */

struct parser {
    const unsigned char *at, *end;
    int depth;
    bool mode_seen, mode_ok;
};

static void blanks(struct parser *p)
{
    while (p->at < p->end && (*p->at == ' ' || *p->at == '\t' || *p->at == '\n' ||
                              *p->at == '\r'))
        p->at++;
}

static int hex4(const unsigned char *at)
{
    int value = 0;
    for (int i = 0; i < 4; i++) {
        int c = at[i], digit;
        if (c >= '0' && c <= '9')
            digit = c - '0';
        else if (c >= 'a' && c <= 'f')
            digit = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            digit = c - 'A' + 10;
        else
            return -1;
        value = value * 16 + digit;
    }
    return value;
}

/* A string; its decoded text (UTF-8) up to `size` bytes in `out` when out is not NULL,
 * *length set to the decoded length (larger than size when it did not fit). */
static bool string(struct parser *p, char *out, size_t size, size_t *length)
{
    size_t n = 0;
    if (p->at >= p->end || *p->at != '"')
        return false;
    p->at++;
    while (p->at < p->end) {
        unsigned char c = *p->at++;
        uint32_t code;
        if (c == '"') {
            if (length != NULL)
                *length = n;
            return true;
        }
        if (c < 0x20)
            return false;
        if (c != '\\') {
            if (out != NULL && n < size)
                out[n] = (char)c;
            n++;
            continue;
        }
        if (p->at >= p->end)
            return false;
        c = *p->at++;
        switch (c) {
        case '"': case '\\': case '/': code = c; break;
        case 'b': code = '\b'; break;
        case 'f': code = '\f'; break;
        case 'n': code = '\n'; break;
        case 'r': code = '\r'; break;
        case 't': code = '\t'; break;
        case 'u': {
            if (p->end - p->at < 4)
                return false;
            int unit = hex4(p->at);
            if (unit < 0)
                return false;
            p->at += 4;
            if (unit >= 0xDC00 && unit <= 0xDFFF)
                return false; /* a lone low surrogate is no character */
            if (unit >= 0xD800 && unit <= 0xDBFF) {
                if (p->end - p->at < 6 || p->at[0] != '\\' || p->at[1] != 'u')
                    return false;
                int low = hex4(p->at + 2);
                if (low < 0xDC00 || low > 0xDFFF)
                    return false;
                p->at += 6;
                code = 0x10000 + (((uint32_t)unit - 0xD800) << 10) + ((uint32_t)low - 0xDC00);
            } else {
                code = (uint32_t)unit;
            }
            break;
        }
        default:
            return false;
        }
        unsigned char encoded[4];
        int bytes;
        if (code < 0x80) {
            encoded[0] = (unsigned char)code;
            bytes = 1;
        } else if (code < 0x800) {
            encoded[0] = (unsigned char)(0xC0 | (code >> 6));
            encoded[1] = (unsigned char)(0x80 | (code & 0x3F));
            bytes = 2;
        } else if (code < 0x10000) {
            encoded[0] = (unsigned char)(0xE0 | (code >> 12));
            encoded[1] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            encoded[2] = (unsigned char)(0x80 | (code & 0x3F));
            bytes = 3;
        } else {
            encoded[0] = (unsigned char)(0xF0 | (code >> 18));
            encoded[1] = (unsigned char)(0x80 | ((code >> 12) & 0x3F));
            encoded[2] = (unsigned char)(0x80 | ((code >> 6) & 0x3F));
            encoded[3] = (unsigned char)(0x80 | (code & 0x3F));
            bytes = 4;
        }
        for (int i = 0; i < bytes; i++, n++)
            if (out != NULL && n < size)
                out[n] = (char)encoded[i];
    }
    return false;
}

static bool number(struct parser *p)
{
    const unsigned char *start = p->at;
    if (p->at < p->end && *p->at == '-')
        p->at++;
    if (p->at >= p->end)
        return false;
    if (*p->at == '0') {
        p->at++;
    } else if (*p->at >= '1' && *p->at <= '9') {
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    } else {
        return false;
    }
    if (p->at < p->end && *p->at == '.') {
        p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9')
            return false;
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    }
    if (p->at < p->end && (*p->at == 'e' || *p->at == 'E')) {
        p->at++;
        if (p->at < p->end && (*p->at == '+' || *p->at == '-'))
            p->at++;
        if (p->at >= p->end || *p->at < '0' || *p->at > '9')
            return false;
        while (p->at < p->end && *p->at >= '0' && *p->at <= '9')
            p->at++;
    }
    /* A number past a double's range is refused (the parser reads big integers as
     * doubles too). Read in the C locale whatever the program's locale is. */
    size_t length = (size_t)(p->at - start);
    char *text = malloc(length + 1);
    if (text == NULL)
        return false;
    memcpy(text, start, length);
    text[length] = '\0';
    static locale_t c_locale;
    if (c_locale == (locale_t)0)
        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    double value = c_locale ? strtod_l(text, NULL, c_locale) : strtod(text, NULL);
    free(text);
    return !isinf(value);
}

static bool literal(struct parser *p, const char *word)
{
    size_t length = strlen(word);
    if ((size_t)(p->end - p->at) < length || memcmp(p->at, word, length) != 0)
        return false;
    p->at += length;
    return true;
}

static bool value(struct parser *p, bool top);

static bool object(struct parser *p, bool top)
{
    p->at++;
    blanks(p);
    if (p->at < p->end && *p->at == '}') {
        p->at++;
        return true;
    }
    for (;;) {
        char key[16];
        size_t key_length = 0;
        blanks(p);
        if (!string(p, key, sizeof key, &key_length))
            return false;
        blanks(p);
        if (p->at >= p->end || *p->at != ':')
            return false;
        p->at++;
        blanks(p);
        bool is_mode = top && key_length == 12 && memcmp(key, "err_msg_mode", 12) == 0;
        if (is_mode) {
            /* The last occurrence counts, as with any JSON object. */
            char text[4];
            size_t text_length = 0;
            p->mode_seen = true;
            if (p->at < p->end && *p->at == '"') {
                if (!string(p, text, sizeof text, &text_length))
                    return false;
                p->mode_ok = text_length == 1 && (text[0] == '0' || text[0] == '1');
            } else {
                if (!value(p, false))
                    return false;
                p->mode_ok = false;
            }
        } else if (!value(p, false)) {
            return false;
        }
        blanks(p);
        if (p->at < p->end && *p->at == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->end && *p->at == '}') {
            p->at++;
            return true;
        }
        return false;
    }
}

static bool array(struct parser *p)
{
    p->at++;
    blanks(p);
    if (p->at < p->end && *p->at == ']') {
        p->at++;
        return true;
    }
    for (;;) {
        blanks(p);
        if (!value(p, false))
            return false;
        blanks(p);
        if (p->at < p->end && *p->at == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->end && *p->at == ']') {
            p->at++;
            return true;
        }
        return false;
    }
}

static bool value(struct parser *p, bool top)
{
    if (p->at >= p->end || ++p->depth > 2 * MAX_NESTING + 2)
        return false;
    bool ok;
    switch (*p->at) {
    case '{': ok = object(p, top); break;
    case '[': ok = array(p); break;
    case '"': ok = string(p, NULL, 0, NULL); break;
    case 't': ok = literal(p, "true"); break;
    case 'f': ok = literal(p, "false"); break;
    case 'n': ok = literal(p, "null"); break;
    default: ok = number(p); break;
    }
    p->depth--;
    return ok;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing past U+10FFFF. */
static bool utf8(const unsigned char *at, const unsigned char *end)
{
    while (at < end) {
        unsigned char c = *at++;
        if (c < 0x80)
            continue;
        int more;
        uint32_t code, least;
        if (c >= 0xC2 && c <= 0xDF) {
            more = 1, code = c & 0x1F, least = 0x80;
        } else if (c >= 0xE0 && c <= 0xEF) {
            more = 2, code = c & 0x0F, least = 0x800;
        } else if (c >= 0xF0 && c <= 0xF4) {
            more = 3, code = c & 0x07, least = 0x10000;
        } else {
            return false;
        }
        if (end - at < more)
            return false;
        for (int i = 0; i < more; i++) {
            if ((at[i] & 0xC0) != 0x80)
                return false;
            code = (code << 6) | (at[i] & 0x3F);
        }
        at += more;
        if (code < least || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return false;
    }
    return true;
}

static aclError check(const unsigned char *content, size_t size)
{
    const unsigned char *nul = memchr(content, 0, size);
    const unsigned char *end = nul != NULL ? nul : content + size;
    if (end == content)
        return AM_SUCCESS;
    int objects = 0, arrays = 0, deepest = 0;
    for (const unsigned char *at = content; at < end; at++) {
        if (*at == '{' && ++objects > deepest)
            deepest = objects;
        else if (*at == '}' && objects > 0)
            objects--;
        else if (*at == '[' && ++arrays > deepest)
            deepest = arrays;
        else if (*at == ']' && arrays > 0)
            arrays--;
    }
    if (deepest > MAX_NESTING)
        return AM_PARSE_FILE;
    const unsigned char *start = content;
    if (end - start >= 3 && memcmp(start, "\xEF\xBB\xBF", 3) == 0)
        start += 3;
    if (!utf8(start, end))
        return AM_PARSE_FILE;
    struct parser p = {.at = start, .end = end};
    blanks(&p);
    if (!value(&p, true))
        return AM_PARSE_FILE;
    blanks(&p);
    if (p.at != p.end)
        return AM_PARSE_FILE;
    if (p.mode_seen && !p.mode_ok)
        return AM_INVALID_PARAM;
    return AM_SUCCESS;
}

aclError am_read_config(const char *path, uint64_t *digest, aclError *checked)
{
    if (path == NULL || path[0] == '\0') {
        *digest = digest_of(NULL, 0);
        *checked = AM_SUCCESS;
        return AM_SUCCESS;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return AM_INVALID_FILE;
    struct stat info;
    if (fstat(fd, &info) != 0) {
        close(fd);
        return AM_INVALID_FILE;
    }
    if (!S_ISREG(info.st_mode)) {
        close(fd);
        if (!S_ISDIR(info.st_mode))
            return AM_INVALID_FILE; /* a FIFO or device would block or never end */
        *digest = digest_of(NULL, 0); /* a directory reads as empty ... */
        *checked = AM_INVALID_FILE;   /* ... and is no regular file */
        return AM_SUCCESS;
    }
    if ((uint64_t)info.st_size > MAX_CONFIG_BYTES) {
        close(fd);
        *digest = TOO_BIG_DIGEST;
        *checked = AM_INVALID_FILE;
        return AM_SUCCESS;
    }
    unsigned char *content = malloc(MAX_CONFIG_BYTES + 1);
    if (content == NULL) {
        close(fd);
        return AM_INVALID_FILE;
    }
    size_t size = 0;
    while (size < MAX_CONFIG_BYTES + 1) {
        ssize_t got = read(fd, content + size, MAX_CONFIG_BYTES + 1 - size);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            free(content);
            close(fd);
            return AM_INVALID_FILE;
        }
        if (got == 0)
            break;
        size += (size_t)got;
    }
    close(fd);
    *digest = size > MAX_CONFIG_BYTES ? TOO_BIG_DIGEST : digest_of(content, size);
    *checked = size > MAX_CONFIG_BYTES ? AM_INVALID_FILE : check(content, size);
    free(content);
    return AM_SUCCESS;
}
