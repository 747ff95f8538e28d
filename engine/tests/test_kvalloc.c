/* KV block allocator and prefix cache checks. */

#include <stdio.h>
#include <stdlib.h>

#include "serve/kvalloc.h"
#include "testkit.h"

static void
test_alloc(void)
{
    llm_kvalloc_t *a;
    int64_t        b[8];
    int            i;

    REQUIRE(llm_kvalloc_create(&a, 8, 4) == 0);
    for (i = 0; i < 8; i++) {
        b[i] = llm_kvalloc_get(a);
        REQUIRE(b[i] == i);
    }
    REQUIRE(llm_kvalloc_get(a) == -1);
    REQUIRE(llm_kvalloc_n_free(a) == 0);
    llm_kvalloc_ref(a, 3);
    llm_kvalloc_put(a, 3);
    REQUIRE(llm_kvalloc_n_free(a) == 0);
    llm_kvalloc_put(a, 3);
    REQUIRE(llm_kvalloc_n_free(a) == 1);
    REQUIRE(llm_kvalloc_get(a) == 3);
    for (i = 0; i < 8; i++) {
        llm_kvalloc_put(a, (uint32_t) b[i]);
    }
    REQUIRE(llm_kvalloc_n_free(a) == 8);
    llm_kvalloc_free(a);
}

static void
test_prefix(void)
{
    llm_kvalloc_t *a;
    int32_t        t1[4] = { 1, 2, 3, 4 }, t2[4] = { 5, 6, 7, 8 };
    int32_t        t3[4] = { 1, 2, 3, 5 };
    uint64_t       h1, h2, h3;
    int64_t        b1, b2, x;
    int            i, round;

    REQUIRE(llm_kvalloc_create(&a, 4, 4) == 0);
    h1 = llm_kvalloc_hash(0, t1, 4);
    h2 = llm_kvalloc_hash(h1, t2, 4);
    h3 = llm_kvalloc_hash(0, t3, 4);
    REQUIRE(h1 != h3 && h1 != h2);
    b1 = llm_kvalloc_get(a);
    b2 = llm_kvalloc_get(a);
    llm_kvalloc_publish(a, (uint32_t) b1, h1, 0, t1);
    llm_kvalloc_publish(a, (uint32_t) b2, h2, h1, t2);
    REQUIRE(llm_kvalloc_lookup(a, h3, 0, t3) == -1);
    x = llm_kvalloc_lookup(a, h1, 0, t1);
    REQUIRE(x == b1);
    llm_kvalloc_put(a, (uint32_t) x);
    llm_kvalloc_put(a, (uint32_t) b1);
    llm_kvalloc_put(a, (uint32_t) b2);
    REQUIRE(llm_kvalloc_n_free(a) == 4);
    REQUIRE(llm_kvalloc_n_cached(a) == 2);
    /* a cached, unreferenced block comes back on lookup */
    x = llm_kvalloc_lookup(a, h2, h1, t2);
    REQUIRE(x == b2);
    REQUIRE(llm_kvalloc_n_free(a) == 3);
    llm_kvalloc_put(a, (uint32_t) x);
    /* exhaust: free blocks first, then the LRU (b1 before b2) */
    for (i = 0; i < 2; i++) {
        REQUIRE(llm_kvalloc_get(a) >= 0);
    }
    REQUIRE(llm_kvalloc_get(a) == b1);
    REQUIRE(llm_kvalloc_lookup(a, h1, 0, t1) == -1);
    REQUIRE(llm_kvalloc_lookup(a, h2, h1, t2) == b2);
    llm_kvalloc_free(a);

    /* churn: publish and evict many times; the table never clogs */
    tk_begin("churn");
    REQUIRE(llm_kvalloc_create(&a, 8, 4) == 0);
    for (round = 0; round < 10000; round++) {
        int32_t  t[4] = { round, round + 1, round + 2, round + 3 };
        uint64_t h = llm_kvalloc_hash(0, t, 4);

        b1 = llm_kvalloc_get(a);
        REQUIRE(b1 >= 0);
        llm_kvalloc_publish(a, (uint32_t) b1, h, 0, t);
        llm_kvalloc_put(a, (uint32_t) b1);
        x = llm_kvalloc_lookup(a, h, 0, t);
        REQUIRE(x == b1);
        llm_kvalloc_put(a, (uint32_t) x);
    }
    REQUIRE(llm_kvalloc_n_free(a) == 8);
    llm_kvalloc_free(a);
}

int
main(void)
{
    tk_begin("alloc");
    test_alloc();
    tk_begin("prefix");
    test_prefix();
    return tk_done();
}
