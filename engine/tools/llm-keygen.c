/*
 * llm-keygen: makes an API key for ngx_http_llm_module's llm_keys file.
 *
 *   llm-keygen [--name NAME] [--rpm N] [--tpm N] [--quota N]
 *              [--models a,b] [--key-file PATH]
 *   llm-keygen --hash < keyfile
 *
 * Prints the new key (sk-llm- and 40 base62 characters, 238 bits from
 * getrandom(), i.e. /dev/urandom) on the first line and its keys-file line
 * (SHA-256 hex, name, options) on the second.  With --key-file the key goes
 * into that file (mode 0600) instead of stdout, and only the line is
 * printed.  --hash reads a key from stdin (never from the command line,
 * which other users can see) and prints its SHA-256 hex.  The file format
 * is in docs/KEYS.md.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/evp.h>

#define KEY_PREFIX  "sk-llm-"
#define KEY_CHARS   40

static const char base62[] =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: llm-keygen [--name NAME] [--rpm N] [--tpm N] [--quota N]\n"
        "                  [--models a,b] [--key-file PATH]\n"
        "       llm-keygen --hash < keyfile\n"
        "\n"
        "Makes a random API key (sk-llm-<40 base62>) and prints it, then\n"
        "its line for the llm_keys file: SHA-256 hex, name, options.\n"
        "\n"
        "  --name NAME      key name in logs and $llm_key_name (default: key)\n"
        "  --rpm N          requests per minute (0: unlimited)\n"
        "  --tpm N          tokens per minute (0: unlimited)\n"
        "  --quota N        total tokens (0: none)\n"
        "  --models a,b     the models the key may use (default: all)\n"
        "  --key-file PATH  write the key to PATH (mode 0600), not stdout\n"
        "  --hash           read a key from stdin, print its SHA-256 hex\n"
        "  --help           this text\n");
}

/* SHA-256 of key as 64 lowercase hex digits into hex[65]; 0 or -EIO. */
static int sha256_hex(const char *key, size_t len, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;

    if (EVP_Digest(key, len, md, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return -EIO;
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

/* Fills out[KEY_CHARS] with uniform base62 by rejection sampling; 0/-errno. */
static int random_base62(char *out)
{
    unsigned char buf[64];
    size_t got = 0;

    while (got < KEY_CHARS) {
        ssize_t n = getrandom(buf, sizeof(buf), 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        for (ssize_t i = 0; i < n && got < KEY_CHARS; i++) {
            if (buf[i] < 248)            /* 248 = 4 * 62: no modulo bias */
                out[got++] = base62[buf[i] % 62];
        }
    }
    return 0;
}

/* A value made only of characters the keys-file parser accepts there. */
static int check_field(const char *what, const char *v, const char *extra)
{
    if (*v == '\0') {
        fprintf(stderr, "llm-keygen: %s is empty\n", what);
        return -1;
    }
    for (const char *p = v; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')
            || (*p >= '0' && *p <= '9') || strchr(extra, *p))
            continue;
        fprintf(stderr, "llm-keygen: %s \"%s\" has '%c'; allowed: letters, "
                "digits and \"%s\"\n", what, v, *p, extra);
        return -1;
    }
    return 0;
}

/* A whole number up to max, as the keys-file parser accepts it. */
static int check_number(const char *what, const char *v,
                        unsigned long long max)
{
    char *end;

    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || n > max) {
        fprintf(stderr, "llm-keygen: %s expects a whole number up to %llu, "
                "not \"%s\"\n", what, max, v);
        return -1;
    }
    return 0;
}

static int do_hash(void)
{
    char buf[1024], hex[65];
    size_t len = fread(buf, 1, sizeof(buf) - 1, stdin);

    if (ferror(stdin)) {
        fprintf(stderr, "llm-keygen: reading stdin: %s\n", strerror(errno));
        return 1;
    }
    buf[len] = '\0';
    /* the gateway ignores surrounding whitespace; so does this */
    char *p = buf;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    len = strlen(p);
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'
                   || p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    if (len == 0) {
        fprintf(stderr, "llm-keygen: --hash: no key on stdin\n");
        return 1;
    }
    if (sha256_hex(p, len, hex) != 0) {
        fprintf(stderr, "llm-keygen: SHA-256 failed\n");
        return 1;
    }
    printf("%s\n", hex);
    return 0;
}

int main(int argc, char **argv)
{
    const char *name = "key", *rpm = NULL, *tpm = NULL, *quota = NULL;
    const char *models = NULL, *key_file = NULL;
    char key[sizeof(KEY_PREFIX) + KEY_CHARS], hex[65];
    int rc = 1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **dst = NULL;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--hash"))
            return do_hash();
        if (!strcmp(a, "--name"))
            dst = &name;
        else if (!strcmp(a, "--rpm"))
            dst = &rpm;
        else if (!strcmp(a, "--tpm"))
            dst = &tpm;
        else if (!strcmp(a, "--quota"))
            dst = &quota;
        else if (!strcmp(a, "--models"))
            dst = &models;
        else if (!strcmp(a, "--key-file"))
            dst = &key_file;
        if (dst == NULL) {
            fprintf(stderr, "llm-keygen: unknown option \"%s\" (--help)\n", a);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "llm-keygen: %s needs a value\n", a);
            return 2;
        }
        *dst = argv[++i];
    }

    if (check_field("--name", name, "-_.@:") != 0
        || (models && check_field("--models", models, "-_.@:/,+") != 0)
        || (rpm && check_number("--rpm", rpm, 1000000000000ULL) != 0)
        || (tpm && check_number("--tpm", tpm, 1000000000000ULL) != 0)
        || (quota && check_number("--quota", quota, 1000000000000000ULL) != 0))
        return 2;
    if (models && (models[0] == ',' || models[strlen(models) - 1] == ','
                   || strstr(models, ",,"))) {
        fprintf(stderr, "llm-keygen: --models \"%s\" has an empty name\n",
                models);
        return 2;
    }
    if (strlen(name) > 64) {
        fprintf(stderr, "llm-keygen: --name is longer than 64 characters\n");
        return 2;
    }

    memcpy(key, KEY_PREFIX, sizeof(KEY_PREFIX) - 1);
    int err = random_base62(key + sizeof(KEY_PREFIX) - 1);
    if (err) {
        fprintf(stderr, "llm-keygen: getrandom: %s\n", strerror(-err));
        return 1;
    }
    key[sizeof(key) - 1] = '\0';

    if (sha256_hex(key, strlen(key), hex) != 0) {
        fprintf(stderr, "llm-keygen: SHA-256 failed\n");
        goto out;
    }

    if (key_file) {
        int fd = open(key_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) {
            fprintf(stderr, "llm-keygen: %s: %s\n", key_file, strerror(errno));
            goto out;
        }
        size_t len = strlen(key);
        key[len] = '\n';
        ssize_t n = write(fd, key, len + 1);
        key[len] = '\0';
        if (n != (ssize_t) len + 1 || close(fd) != 0) {
            fprintf(stderr, "llm-keygen: writing %s failed\n", key_file);
            unlink(key_file);
            goto out;
        }
    } else {
        printf("%s\n", key);
    }

    printf("%s %s", hex, name);
    if (rpm)
        printf(" rpm=%s", rpm);
    if (tpm)
        printf(" tpm=%s", tpm);
    if (quota)
        printf(" quota=%s", quota);
    if (models)
        printf(" models=%s", models);
    printf("\n");
    rc = fflush(stdout) == 0 ? 0 : 1;

out:
    explicit_bzero(key, sizeof(key));
    return rc;
}
