/* Ordered address trees (a treap with subtree maxima) and the free-range allocator of a
 * device window built on them. */
#include <stdlib.h>

#include "engine.h"

static uint32_t next_priority(void)
{
    /* xorshift32 per thread, each thread seeded apart: threads that each insert a few
     * nodes must not all draw the same priorities (the treap would become a list). */
    static _Thread_local uint32_t state;
    static uint32_t threads;
    if (state == 0) {
        uint32_t n = __atomic_add_fetch(&threads, 1, __ATOMIC_RELAXED);
        state = (n * 2654435761u) ^ (uint32_t)(uintptr_t)&state ^ 2463534242u;
        if (state == 0)
            state = 2463534242u;
    }
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

static uint64_t max3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t m = a > b ? a : b;
    return m > c ? m : c;
}

static void update(struct am_node *node)
{
    node->max_len = max3(node->len, node->left ? node->left->max_len : 0,
                         node->right ? node->right->max_len : 0);
}

/* Split into keys < key and keys >= key. */
static void split(struct am_node *root, uint64_t key, struct am_node **less,
                  struct am_node **more)
{
    if (root == NULL) {
        *less = *more = NULL;
    } else if (root->key < key) {
        split(root->right, key, &root->right, more);
        update(root);
        *less = root;
    } else {
        split(root->left, key, less, &root->left);
        update(root);
        *more = root;
    }
}

/* Every key of a is below every key of b. */
static struct am_node *merge(struct am_node *a, struct am_node *b)
{
    if (a == NULL)
        return b;
    if (b == NULL)
        return a;
    if (a->prio > b->prio) {
        a->right = merge(a->right, b);
        update(a);
        return a;
    }
    b->left = merge(a, b->left);
    update(b);
    return b;
}

void am_tree_insert(struct am_node **root, struct am_node *node)
{
    struct am_node *less, *more;
    node->left = node->right = NULL;
    node->prio = next_priority();
    update(node);
    split(*root, node->key, &less, &more);
    *root = merge(merge(less, node), more);
}

static struct am_node *remove_key(struct am_node *root, uint64_t key)
{
    if (root == NULL)
        return NULL;
    if (key == root->key)
        return merge(root->left, root->right);
    if (key < root->key)
        root->left = remove_key(root->left, key);
    else
        root->right = remove_key(root->right, key);
    update(root);
    return root;
}

void am_tree_remove(struct am_node **root, uint64_t key)
{
    *root = remove_key(*root, key);
}

struct am_node *am_tree_find(struct am_node *root, uint64_t key)
{
    while (root != NULL && root->key != key)
        root = key < root->key ? root->left : root->right;
    return root;
}

struct am_node *am_tree_floor(struct am_node *root, uint64_t key)
{
    struct am_node *best = NULL;
    while (root != NULL) {
        if (root->key <= key) {
            best = root;
            root = root->right;
        } else {
            root = root->left;
        }
    }
    return best;
}

struct am_node *am_tree_after(struct am_node *root, uint64_t key)
{
    struct am_node *best = NULL;
    while (root != NULL) {
        if (root->key > key) {
            best = root;
            root = root->left;
        } else {
            root = root->right;
        }
    }
    return best;
}

struct am_node *am_tree_containing(struct am_node *root, uint64_t address)
{
    struct am_node *node = am_tree_floor(root, address);
    return node != NULL && address - node->key < node->len ? node : NULL;
}

static void clear(struct am_node *node, void (*free_node)(struct am_node *))
{
    while (node != NULL) {
        struct am_node *right = node->right;
        clear(node->left, free_node);
        free_node(node);
        node = right;
    }
}

void am_tree_clear(struct am_node **root, void (*free_node)(struct am_node *))
{
    clear(*root, free_node);
    *root = NULL;
}

/* ---- free ranges of a window --------------------------------------------------------- */

static void free_range(struct am_node *node)
{
    free(node);
}

void am_space_init(struct am_space *space, uint64_t base, uint64_t size)
{
    space->base = base;
    space->size = size;
    space->free = NULL;
    struct am_node *all = calloc(1, sizeof *all);
    if (all != NULL) {
        all->key = base;
        all->len = size;
        am_tree_insert(&space->free, all);
    }
}

void am_space_reset(struct am_space *space)
{
    am_tree_clear(&space->free, free_range);
    am_space_init(space, space->base, space->size);
}

static uint64_t aligned_start(const struct am_node *node, uint64_t alignment)
{
    return (node->key + alignment - 1) / alignment * alignment;
}

static bool fits(const struct am_node *node, uint64_t size, uint64_t alignment)
{
    uint64_t start = aligned_start(node, alignment);
    return start - node->key <= node->len && node->len - (start - node->key) >= size;
}

/* The lowest free range holding an aligned run of size bytes. */
static struct am_node *first_fit(struct am_node *node, uint64_t size, uint64_t alignment)
{
    if (node == NULL || node->max_len < size)
        return NULL;
    struct am_node *found = first_fit(node->left, size, alignment);
    if (found != NULL)
        return found;
    if (fits(node, size, alignment))
        return node;
    return first_fit(node->right, size, alignment);
}

/* Take [start, start + size) out of the free range `node` holding it; false (nothing
 * changed) when the bookkeeping cannot get memory. */
static bool carve(struct am_space *space, struct am_node *node, uint64_t start, uint64_t size)
{
    uint64_t head = start - node->key;
    uint64_t tail = node->len - head - size;
    struct am_node *rest = NULL;
    if (tail != 0) {
        /* Allocated before anything changes: on failure the tree is as it was. */
        rest = calloc(1, sizeof *rest);
        if (rest == NULL)
            return false;
        rest->key = start + size;
        rest->len = tail;
    }
    am_tree_remove(&space->free, node->key);
    if (head != 0) {
        node->len = head;
        am_tree_insert(&space->free, node);
    } else {
        free(node);
    }
    if (rest != NULL)
        am_tree_insert(&space->free, rest);
    return true;
}

uint64_t am_space_take(struct am_space *space, uint64_t size, uint64_t alignment)
{
    struct am_node *node = first_fit(space->free, size, alignment);
    if (node == NULL)
        return 0;
    uint64_t start = aligned_start(node, alignment);
    return carve(space, node, start, size) ? start : 0;
}

bool am_space_give(struct am_space *space, uint64_t start, uint64_t size)
{
    struct am_node *before = am_tree_floor(space->free, start);
    struct am_node *after = am_tree_after(space->free, start);
    bool joins_before = before != NULL && before->key + before->len == start;
    bool joins_after = after != NULL && after->key == start + size;
    if (joins_before && joins_after) {
        uint64_t total = before->len + size + after->len;
        am_tree_remove(&space->free, after->key);
        free(after);
        am_tree_remove(&space->free, before->key);
        before->len = total;
        am_tree_insert(&space->free, before);
    } else if (joins_before) {
        am_tree_remove(&space->free, before->key);
        before->len += size;
        am_tree_insert(&space->free, before);
    } else if (joins_after) {
        uint64_t total = size + after->len;
        am_tree_remove(&space->free, after->key);
        after->key = start;
        after->len = total;
        am_tree_insert(&space->free, after);
    } else {
        struct am_node *node = calloc(1, sizeof *node);
        if (node == NULL)
            return false;
        node->key = start;
        node->len = size;
        am_tree_insert(&space->free, node);
    }
    return true;
}

bool am_space_take_at(struct am_space *space, uint64_t start, uint64_t size)
{
    struct am_node *node = am_tree_floor(space->free, start);
    if (node == NULL || start - node->key > node->len || node->len - (start - node->key) < size)
        return false;
    return carve(space, node, start, size);
}
