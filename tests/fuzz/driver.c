/* A stand-in for libFuzzer's main() where only gcc is at hand:
 *
 *   driver [-t SECONDS] [-s SEED] [-n COUNT] [-T TIMEOUT] [FILE_OR_DIR...]
 *
 * Runs every given file (a directory: each regular file in it, by name) through
 * LLVMFuzzerTestOneInput, then random inputs until SECONDS have passed (or COUNT inputs
 * were run): fresh bytes from a xorshift generator (1..4096 of them) or mutations of the
 * given files. Prints the seed and how many inputs ran. One input running longer than
 * TIMEOUT seconds (default 20) is a hang: the driver aborts.
 *
 * Before each input runs, its bytes are written to $FUZZ_LAST_INPUT (default
 * ./fuzz-last-input), whatever happens next: the file is the reproducer of a crash, a
 * sanitizer report or a hang. It is written for every input rather than only on request
 * because a crash found without it could only be reproduced by replaying the seed up to
 * the same input, and the cost is one pwrite and ftruncate on a file kept open (a few
 * microseconds, against the tens to hundreds an input takes).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_LEN 4096
#define MAX_FILE_BYTES (1u << 20)
#define MAX_SEEDS 4096

struct seed {
    uint8_t *bytes;
    size_t size;
};

static struct seed seeds[MAX_SEEDS];
static size_t seed_count;
static int last_input = -1;
static const char *last_input_path;

static uint64_t rng_state;

/* xorshift64*: fast, and the same seed gives the same inputs on any machine. */
static uint64_t next_random(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static uint64_t below(uint64_t bound)
{
    return bound == 0 ? 0 : next_random() % bound;
}

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_alarm(int signal_number)
{
    (void)signal_number;
    static const char text[] = "driver: an input ran past the timeout (a hang); it is in "
                               "the last-input file\n";
    ssize_t ignored = write(STDERR_FILENO, text, sizeof text - 1);
    (void)ignored;
    abort();
}

static void keep_last_input(const uint8_t *data, size_t size)
{
    if (last_input < 0)
        return;
    if (pwrite(last_input, data, size, 0) != (ssize_t)size || ftruncate(last_input,
                                                                        (off_t)size) != 0) {
        fprintf(stderr, "driver: cannot write %s: %s\n", last_input_path, strerror(errno));
        close(last_input);
        last_input = -1;
    }
}

static unsigned timeout_seconds = 20;

static void run_one(const uint8_t *data, size_t size)
{
    keep_last_input(data, size);
    alarm(timeout_seconds);
    LLVMFuzzerTestOneInput(data, size);
    alarm(0);
}

static bool load(const char *path, struct seed *out)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL) {
        fprintf(stderr, "driver: cannot open %s: %s\n", path, strerror(errno));
        return false;
    }
    uint8_t *bytes = malloc(MAX_FILE_BYTES);
    if (bytes == NULL) {
        fclose(file);
        return false;
    }
    size_t size = fread(bytes, 1, MAX_FILE_BYTES, file);
    fclose(file);
    out->bytes = bytes;
    out->size = size;
    return true;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Run one file and keep it as a seed for mutations. */
static void run_file(const char *path, unsigned long *files)
{
    struct seed seed;
    if (!load(path, &seed))
        exit(2);
    run_one(seed.bytes, seed.size);
    (*files)++;
    if (seed_count < MAX_SEEDS && seed.size > 0)
        seeds[seed_count++] = seed;
    else
        free(seed.bytes);
}

static void run_path(const char *path, unsigned long *files)
{
    struct stat info;
    if (stat(path, &info) != 0) {
        fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (!S_ISDIR(info.st_mode)) {
        run_file(path, files);
        return;
    }
    DIR *dir = opendir(path);
    if (dir == NULL) {
        fprintf(stderr, "driver: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    char **names = NULL;
    size_t count = 0, capacity = 0;
    for (struct dirent *entry; (entry = readdir(dir)) != NULL;) {
        if (entry->d_name[0] == '.')
            continue; /* ".", ".." and the directory's .gitkeep */
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 64;
            char **grown = realloc(names, capacity * sizeof *names);
            if (grown == NULL)
                exit(2);
            names = grown;
        }
        size_t length = strlen(path) + strlen(entry->d_name) + 2;
        names[count] = malloc(length);
        if (names[count] == NULL)
            exit(2);
        snprintf(names[count], length, "%s/%s", path, entry->d_name);
        count++;
    }
    closedir(dir);
    /* Sorted, so that a run is the same on every file system. */
    qsort(names, count, sizeof *names, by_name);
    for (size_t i = 0; i < count; i++) {
        if (stat(names[i], &info) == 0 && S_ISREG(info.st_mode))
            run_file(names[i], files);
        free(names[i]);
    }
    free(names);
}

/* A few edits of one seed: flips, random bytes, inserted and deleted runs, a chunk of
 * another seed, a repeated chunk (the same calls again). */
static size_t mutate(uint8_t *buffer)
{
    const struct seed *base = &seeds[below(seed_count)];
    size_t size = base->size < MAX_LEN ? base->size : MAX_LEN;
    memcpy(buffer, base->bytes, size);
    unsigned edits = 1 + (unsigned)below(8);
    for (unsigned e = 0; e < edits; e++) {
        switch (below(6)) {
        case 0:
            if (size > 0)
                buffer[below(size)] ^= (uint8_t)(1u << below(8));
            break;
        case 1:
            if (size > 0)
                buffer[below(size)] = (uint8_t)next_random();
            break;
        case 2: { /* insert random bytes */
            size_t at = below(size + 1), length = 1 + below(16);
            if (size + length > MAX_LEN)
                break;
            memmove(buffer + at + length, buffer + at, size - at);
            for (size_t i = 0; i < length; i++)
                buffer[at + i] = (uint8_t)next_random();
            size += length;
            break;
        }
        case 3: { /* delete a run (the first two bytes, the play, stay) */
            if (size <= 3)
                break;
            size_t at = 2 + below(size - 2), length = 1 + below(16);
            if (length > size - at)
                length = size - at;
            memmove(buffer + at, buffer + at + length, size - at - length);
            size -= length;
            break;
        }
        case 4: { /* splice in a chunk of another seed */
            const struct seed *other = &seeds[below(seed_count)];
            size_t from = below(other->size), length = 1 + below(64);
            if (length > other->size - from)
                length = other->size - from;
            size_t at = below(size + 1);
            if (size + length > MAX_LEN)
                break;
            memmove(buffer + at + length, buffer + at, size - at);
            memcpy(buffer + at, other->bytes + from, length);
            size += length;
            break;
        }
        default: { /* repeat a chunk of itself */
            if (size < 3)
                break;
            size_t from = 2 + below(size - 2), length = 1 + below(32);
            if (length > size - from)
                length = size - from;
            if (size + length > MAX_LEN)
                break;
            memmove(buffer + size, buffer + from, length);
            size += length;
            break;
        }
        }
    }
    return size;
}

static void usage(void)
{
    fprintf(stderr, "usage: driver [-t SECONDS] [-s SEED] [-n COUNT] [-T TIMEOUT] "
                    "[FILE_OR_DIR...]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double seconds = 0;
    uint64_t seed = 0;
    unsigned long long limit = 0;
    int option;
    while ((option = getopt(argc, argv, "t:s:n:T:")) != -1) {
        switch (option) {
        case 't': seconds = strtod(optarg, NULL); break;
        case 's': seed = strtoull(optarg, NULL, 0); break;
        case 'n': limit = strtoull(optarg, NULL, 0); break;
        case 'T': timeout_seconds = (unsigned)strtoul(optarg, NULL, 0); break;
        default: usage();
        }
    }
    if (seed == 0)
        seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_state = seed ? seed : 1;

    last_input_path = getenv("FUZZ_LAST_INPUT");
    if (last_input_path == NULL || last_input_path[0] == '\0')
        last_input_path = "fuzz-last-input";
    last_input = open(last_input_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (last_input < 0)
        fprintf(stderr, "driver: cannot write %s: %s (running without it)\n",
                last_input_path, strerror(errno));
    signal(SIGALRM, on_alarm);

    fprintf(stderr, "driver: seed %" PRIu64 "\n", seed);
    double start = now_seconds();
    unsigned long files = 0;
    for (int i = optind; i < argc; i++)
        run_path(argv[i], &files);

    static uint8_t buffer[MAX_LEN];
    unsigned long long random_inputs = 0;
    double next_report = start + 30;
    while ((seconds > 0 && now_seconds() - start < seconds) ||
           (limit > 0 && seconds <= 0 && random_inputs < limit)) {
        if (limit > 0 && random_inputs >= limit)
            break;
        size_t size;
        if (seed_count > 0 && below(2) == 0) {
            size = mutate(buffer);
        } else {
            size = 1 + below(MAX_LEN);
            for (size_t i = 0; i < size; i++)
                buffer[i] = (uint8_t)next_random();
        }
        run_one(buffer, size);
        random_inputs++;
        if ((random_inputs & 63) == 0 && now_seconds() >= next_report) {
            fprintf(stderr, "driver: %llu random inputs, %.0f s\n", random_inputs,
                    now_seconds() - start);
            next_report += 30;
        }
    }
    printf("driver: seed %" PRIu64 ": ran %llu inputs (%lu files, %llu random) in %.1f s\n",
           seed, (unsigned long long)files + random_inputs, files, random_inputs,
           now_seconds() - start);
    if (last_input >= 0)
        close(last_input);
    return 0;
}
