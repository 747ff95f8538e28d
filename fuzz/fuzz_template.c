/*
 * The Jinja chat-template compiler and renderer.
 *
 * Input: byte 0 picks one of the test conversations
 * (engine/tests/data/templates/convs/NAME.json, the template variables,
 * in name order);
 * the rest is the template source.  If the source holds a NUL byte, what
 * follows it is parsed as JSON and, when it is an object, used as the
 * variables instead (so the fuzzer can vary messages and tools too).
 * Every rendered output must be NUL-terminated at the length returned.
 */

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_common.h"
#include "template/template.h"

#define MAX_CONVS 32

static json_t *convs[MAX_CONVS];
static size_t  n_convs;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char           dir[4096], path[4400];
    struct dirent **names;
    int             n;
    json_error_t   je;

    (void) argc;
    (void) argv;
    snprintf(dir, sizeof(dir), "%s",
             fuzz_path("engine/tests/data/templates/convs"));
    /* sorted by name: the byte picking a conversation means the same
     * file everywhere */
    n = scandir(dir, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "fuzz: %s: cannot open\n", dir);
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(names[i]->d_name);

        if (n_convs < MAX_CONVS && l >= 5
            && strcmp(names[i]->d_name + l - 5, ".json") == 0)
        {
            snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
            convs[n_convs] = json_load_file(path, 0, &je);
            if (convs[n_convs] != NULL) {
                n_convs++;
            }
        }
        free(names[i]);
    }
    free(names);
    if (n_convs == 0) {
        fprintf(stderr, "fuzz: no conversations in %s\n", dir);
        exit(1);
    }
    return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_tmpl_t   *t = NULL;
    json_t       *vars, *own = NULL;
    const char   *src, *nul;
    size_t        len, outlen = 0;
    char         *out = NULL, err[512];
    json_error_t  je;

    if (size < 1) {
        return 0;
    }
    vars = convs[data[0] % n_convs];
    src = (const char *) data + 1;
    len = size - 1;
    nul = memchr(src, '\0', len);
    if (nul != NULL) {
        own = json_loadb(nul + 1, len - (size_t) (nul + 1 - src),
                         JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (own != NULL && json_is_object(own)) {
            vars = own;
        }
        len = (size_t) (nul - src);
    }
    if (llm_tmpl_compile(&t, src, len, err, sizeof(err)) != 0) {
        goto done;
    }
    if (llm_tmpl_render_at(t, vars, 1700000000, &out, &outlen, err,
                           sizeof(err)) == 0)
    {
        if (out == NULL || out[outlen] != '\0') {
            fprintf(stderr, "render: output not NUL-terminated at %zu\n",
                    outlen);
            abort();
        }
    }
done:
    free(out);
    llm_tmpl_free(t);
    json_decref(own);
    return 0;
}
