/*
 * Deterministic byte-level BPE vocabulary (see vocabgen.h).
 *
 * The trainer is the textbook one: pre-tokenize the text with the
 * pre-tokenizer's regex, start every pre-token as its bytes, and merge the
 * most frequent adjacent pair (ties: the smaller pair of ids) until enough
 * merges exist.  The embedded text alone yields some 1500 merges; beyond
 * that, pseudo-words built from English-like syllables (weight 1 against
 * the text's 1000 per occurrence) keep the trainer going, so any size up
 * to LLM_VG_MAX_MERGES gets real, reachable merges.  Training is
 * incremental (see vg_pairs_t): a merge only revisits the words that hold
 * the pair.
 */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/err.h"
#include "vocabgen.h"

static const char vg_corpus[] =
    "The quick brown fox jumps over the lazy dog. A language model reads"
    " a sequence of tokens and predicts the next one. It does this by tu"
    "rning every token into a vector, mixing the vectors with attention,"
    " and passing them through a feed-forward network in each layer. In "
    "a mixture of experts, a small router picks a few experts for every "
    "token, so only part of the weights are read for each step. That is "
    "why such a model can be large and still fast on a computer without "
    "a graphics card.\n"
    "\n"
    "When you write a program, you should check every input before you t"
    "rust it. A file may be truncated, a number may be too large, and a "
    "string may not end where you think it ends. Good code returns an er"
    "ror that says what went wrong and where. It does not crash, and it "
    "never reads memory outside the buffer it was given. The same rule h"
    "olds for network servers: a client can send anything at any time, a"
    "nd the server must handle it.\n"
    "\n"
    "Hello! How are you today? I'm fine, thanks. What's the weather like"
    " where you are? It's sunny and warm here, but they said it will rai"
    "n tomorrow. We'll see. Could you tell me how to get to the station?"
    " Go straight ahead, then turn left at the second street. You can't "
    "miss it.\n"
    "\n"
    "The history of computing is full of small ideas that changed everyt"
    "hing. People built machines that could add numbers, then machines t"
    "hat could store programs, and then networks that connected the whol"
    "e world. Today, billions of people carry a computer in their pocket"
    ". They use it to talk, to read, to learn, to work and to play. Some"
    " of these programs answer questions in natural language, write summ"
    "aries, translate between languages, and help developers write code."
    "\n"
    "\n"
    "Please write a short story about a robot who learns to paint. Once "
    "upon a time, in a quiet town by the sea, there lived a small robot "
    "named Pixel. Every morning it watched the sun rise over the water a"
    "nd wondered how the sky could hold so many colors. One day it found"
    " an old box of paints in the attic of the library. It did not know "
    "what to do with them at first, but it tried, and it failed, and it "
    "tried again. Years later, people came from far away to see the pain"
    "tings of the little robot.\n"
    "\n"
    "Summary: the system has three parts. First, a gateway that accepts "
    "requests from clients, checks their keys, applies rate limits, and "
    "forwards them. Second, an engine that loads the model, keeps a cach"
    "e of keys and values for every sequence, and computes the next toke"
    "n for many sequences at once. Third, a set of tools to build, test,"
    " benchmark and measure the whole thing. Each part has its own tests"
    ", and the whole system is tested end to end.\n"
    "\n"
    "Questions and answers. What is the capital of France? Paris. How ma"
    "ny days are there in a week? Seven. Which planet is the largest in "
    "our solar system? Jupiter. Who wrote the play about the prince of D"
    "enmark? William Shakespeare. What is two plus two? Four. Is water w"
    "et? That depends on what you mean by wet.\n"
    "\n"
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "\n"
    "struct buffer {\n"
    "    char   *data;\n"
    "    size_t  len;\n"
    "    size_t  cap;\n"
    "};\n"
    "\n"
    "static int\n"
    "buffer_append(struct buffer *b, const char *p, size_t n)\n"
    "{\n"
    "    if (b->len + n > b->cap) {\n"
    "        size_t cap = b->cap ? b->cap * 2 : 64;\n"
    "        while (cap < b->len + n) {\n"
    "            cap *= 2;\n"
    "        }\n"
    "        char *d = realloc(b->data, cap);\n"
    "        if (d == NULL) {\n"
    "            return -1;\n"
    "        }\n"
    "        b->data = d;\n"
    "        b->cap = cap;\n"
    "    }\n"
    "    memcpy(b->data + b->len, p, n);\n"
    "    b->len += n;\n"
    "    return 0;\n"
    "}\n"
    "\n"
    "int\n"
    "main(int argc, char **argv)\n"
    "{\n"
    "    for (int i = 1; i < argc; i++) {\n"
    "        printf(\"argument %d: %s\\n\", i, argv[i]);\n"
    "    }\n"
    "    return 0;\n"
    "}\n"
    "\n"
    "def fibonacci(n):\n"
    "    \"\"\"Return the first n Fibonacci numbers.\"\"\"\n"
    "    result = []\n"
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        result.append(a)\n"
    "        a, b = b, a + b\n"
    "    return result\n"
    "\n"
    "\n"
    "class Tokenizer:\n"
    "    def __init__(self, vocab, merges):\n"
    "        self.vocab = vocab\n"
    "        self.merges = {pair: rank for rank, pair in enumerate(merge"
    "s)}\n"
    "\n"
    "    def encode(self, text):\n"
    "        tokens = list(text.encode(\"utf-8\"))\n"
    "        while len(tokens) > 1:\n"
    "            pairs = [(self.merges.get(p, float(\"inf\")), i)\n"
    "                     for i, p in enumerate(zip(tokens, tokens[1:]))"
    "]\n"
    "            rank, i = min(pairs)\n"
    "            if rank == float(\"inf\"):\n"
    "                break\n"
    "            tokens[i:i + 2] = [self.vocab[tokens[i], tokens[i + 1]]"
    "]\n"
    "        return tokens\n"
    "\n"
    "\n"
    "if __name__ == \"__main__\":\n"
    "    print(fibonacci(10))\n"
    "\n"
    "function getWeather(city, unit = \"celsius\") {\n"
    "  return fetch(`/api/weather?city=${encodeURIComponent(city)}&unit="
    "${unit}`)\n"
    "    .then((response) => response.json())\n"
    "    .then((data) => console.log(data.temperature));\n"
    "}\n"
    "\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\""
    ", \"unit\": \"celsius\"}}\n"
    "{\"model\": \"tiny\", \"messages\": [{\"role\": \"system\", \"conte"
    "nt\": \"You are a helpful assistant.\"}, {\"role\": \"user\", \"con"
    "tent\": \"What is the weather in Berlin?\"}], \"stream\": true, \"m"
    "ax_tokens\": 128, \"temperature\": 0.7}\n"
    "{\"id\": \"chatcmpl-123\", \"object\": \"chat.completion\", \"choic"
    "es\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"cont"
    "ent\": \"It is sunny.\"}, \"finish_reason\": \"stop\"}], \"usage\":"
    " {\"prompt_tokens\": 20, \"completion_tokens\": 5, \"total_tokens\""
    ": 25}}\n"
    "\n"
    "SELECT name, count(*) AS total FROM users WHERE created_at > '2024-"
    "01-01' GROUP BY name ORDER BY total DESC LIMIT 10;\n"
    "\n"
    "$ make -j2 && ./build/bin/server --port 8080 --threads 2\n"
    "error: cannot open file 'model.gguf': No such file or directory\n"
    "warning: unused variable 'result' [-Wunused-variable]\n"
    "\n"
    "The numbers 0 1 2 3 4 5 6 7 8 9 10 11 12 42 100 256 1000 1024 2048 "
    "4096 65536 and 3.14159 appear often, as do dates like 2026-12-02 an"
    "d times like 17:15.\n"
    "Some words in other languages: bonjour, merci, danke, gracias, ciao"
    ", hola, Stra\303\237e, caf\303\251, na\303\257ve, r\303\251sum\303\251"
    ", \346\227\245\346\234\254\350\252\236, \344\270\255\346\226\207, \321"
    "\200\321\203\321\201\321\201\320\272\320\270\320\271, \316\265\316\273"
    "\316\273\316\267\316\275\316\271\316\272\316\254, \330\271\330\261\330"
    "\250\331\211, \360\237\230\200.\n";

static const char vg_chat_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to "
    "assist with the user query.\\n\\nYou are provided with function sig"
    "natures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json ob"
    "ject with function name and arguments within <tool_call></tool_call"
    "> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arg"
    "uments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|i"
    "m_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are a helpful assistant.<|im_"
    "end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\""
    " and not loop.first) or (message.role == \"assistant\" and not mess"
    "age.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content"
    " + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].rol"
    "e != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"to"
    "ol\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n";

/* The regexes llama.cpp uses for these pre-tokenizers. */
static const char vg_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+"
    "|\\s+(?!\\S)|\\s+";
static const char vg_re_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *text;
    int32_t     type;
} vg_special_t;

static const vg_special_t vg_specials[] = {
    { "<|endoftext|>", LLM_VG_CONTROL },
    { "<|im_start|>", LLM_VG_CONTROL },
    { "<|im_end|>", LLM_VG_CONTROL },
    { "<tool_call>", LLM_VG_USER_DEFINED },
    { "</tool_call>", LLM_VG_USER_DEFINED },
    { "<tool_response>", LLM_VG_USER_DEFINED },
    { "</tool_response>", LLM_VG_USER_DEFINED },
    { "<think>", LLM_VG_USER_DEFINED },
    { "</think>", LLM_VG_USER_DEFINED },
};

#define VG_NSPECIAL  (sizeof(vg_specials) / sizeof(vg_specials[0]))

typedef struct {
    int64_t     weight;
    uint32_t    n;
    uint32_t   *s;
} vg_word_t;

typedef struct {
    vg_word_t  *words;
    size_t      n_words, cap_words;
    /* unique pre-token lookup while collecting */
    char      **wtext;
    size_t     *wlen;
    size_t     *whash;          /* index + 1 */
    size_t      whash_cap;
    size_t      n_syms;         /* total symbols over all words */
} vg_train_t;

static uint64_t
vg_hash(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ c[i]) * 1099511628211ull;
    }
    return h;
}

/* GPT-2's byte-to-unicode table: byte b -> code point cp[b]; order[i] is
 * the byte of token id i. */
static void
vg_byte_table(uint32_t cp[256], uint8_t order[256])
{
    int in[256] = { 0 };
    int n = 0, extra = 0;

    for (int b = 33; b <= 126; b++) {
        in[b] = 1;
    }
    for (int b = 161; b <= 172; b++) {
        in[b] = 1;
    }
    for (int b = 174; b <= 255; b++) {
        in[b] = 1;
    }
    for (int b = 0; b < 256; b++) {
        if (in[b]) {
            cp[b] = (uint32_t) b;
            order[n++] = (uint8_t) b;
        }
    }
    for (int b = 0; b < 256; b++) {
        if (!in[b]) {
            cp[b] = 256 + (uint32_t) extra++;
            order[n++] = (uint8_t) b;
        }
    }
}

static size_t
vg_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char) cp;
        return 1;
    }
    out[0] = (char) (0xc0 | (cp >> 6));
    out[1] = (char) (0x80 | (cp & 0x3f));
    return 2;                   /* code points here are all < 0x800 */
}

/* Add one pre-token (bytes p[0..n)) with weight w. */
static int
vg_add_word(vg_train_t *t, const char *p, size_t n, int64_t w)
{
    uint64_t h;
    size_t i, mask;

    if (n == 0) {
        return 0;
    }
    if (t->whash_cap == 0 || (t->n_words + 1) * 2 > t->whash_cap) {
        size_t cap = t->whash_cap ? t->whash_cap * 2 : 4096;
        size_t *nh = calloc(cap, sizeof(size_t));
        if (nh == NULL) {
            return -ENOMEM;
        }
        for (size_t k = 0; k < t->n_words; k++) {
            h = vg_hash(t->wtext[k], t->wlen[k]);
            for (i = h & (cap - 1); nh[i]; i = (i + 1) & (cap - 1)) {
            }
            nh[i] = k + 1;
        }
        free(t->whash);
        t->whash = nh;
        t->whash_cap = cap;
    }
    mask = t->whash_cap - 1;
    h = vg_hash(p, n);
    for (i = h & mask; t->whash[i]; i = (i + 1) & mask) {
        size_t k = t->whash[i] - 1;
        if (t->wlen[k] == n && memcmp(t->wtext[k], p, n) == 0) {
            t->words[k].weight += w;
            return 0;
        }
    }
    if (t->n_words == t->cap_words) {
        size_t cap = t->cap_words ? t->cap_words * 2 : 1024;
        vg_word_t *nw = realloc(t->words, cap * sizeof(*nw));
        char **nt = realloc(t->wtext, cap * sizeof(*nt));
        size_t *nl;
        if (nw) {
            t->words = nw;
        }
        if (nt) {
            t->wtext = nt;
        }
        nl = realloc(t->wlen, cap * sizeof(*nl));
        if (nl) {
            t->wlen = nl;
        }
        if (nw == NULL || nt == NULL || nl == NULL) {
            return -ENOMEM;
        }
        t->cap_words = cap;
    }
    vg_word_t *wd = &t->words[t->n_words];
    wd->weight = w;
    wd->n = (uint32_t) n;
    wd->s = malloc(n * sizeof(uint32_t));
    t->wtext[t->n_words] = malloc(n);
    if (wd->s == NULL || t->wtext[t->n_words] == NULL) {
        free(wd->s);
        free(t->wtext[t->n_words]);
        return -ENOMEM;
    }
    memcpy(t->wtext[t->n_words], p, n);
    t->wlen[t->n_words] = n;
    for (size_t k = 0; k < n; k++) {
        wd->s[k] = (unsigned char) p[k];
    }
    t->whash[i] = t->n_words + 1;
    t->n_words++;
    t->n_syms += n;
    return 0;
}

/* Pre-tokenize text with the regex and add every piece. */
static int
vg_pretokenize(vg_train_t *t, const char *re_src, const char *text,
    int64_t w, char *err, size_t errlen)
{
    pcre2_code *re;
    pcre2_match_data *md;
    PCRE2_SIZE eoff, off = 0, len = strlen(text);
    int ecode, rc = 0;

    re = pcre2_compile((PCRE2_SPTR) re_src, PCRE2_ZERO_TERMINATED,
        PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
    if (re == NULL) {
        llm_err(err, errlen, "vocabgen: pre-tokenizer regex does not compile "
            "at offset %zu", (size_t) eoff);
        return -EINVAL;
    }
    md = pcre2_match_data_create_from_pattern(re, NULL);
    if (md == NULL) {
        pcre2_code_free(re);
        return -ENOMEM;
    }
    while (off < len) {
        int m = pcre2_match(re, (PCRE2_SPTR) text, len, off, 0, md, NULL);
        PCRE2_SIZE *ov;
        if (m < 0) {
            break;
        }
        ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= off) {
            off++;
            continue;
        }
        rc = vg_add_word(t, text + ov[0], ov[1] - ov[0], w);
        if (rc != 0) {
            break;
        }
        off = ov[1];
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc;
}

/* Pseudo-English words, " " + 1..3 syllables, from a fixed LCG. */
static int
vg_add_synthetic(vg_train_t *t, size_t count)
{
    static const char *on[] = { "b", "c", "d", "f", "g", "h", "j", "k", "l",
        "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch", "cl", "dr",
        "gr", "pl", "sh", "st", "th", "tr", "", "qu" };
    static const char *nu[] = { "a", "e", "i", "o", "u", "ai", "ea", "ou",
        "ee", "y" };
    static const char *co[] = { "", "", "", "n", "r", "s", "t", "l", "m",
        "nd", "st", "ck", "ng" };
    uint64_t x = 0x2545f4914f6cdd1dull;
    char buf[64];
    int rc;

    for (size_t i = 0; i < count; i++) {
        size_t n = 0;
        int syl;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        syl = 1 + (int) ((x >> 60) % 3);
        buf[n++] = ' ';
        for (int k = 0; k < syl; k++) {
            const char *a, *b, *c;
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            a = on[(x >> 33) % (sizeof(on) / sizeof(on[0]))];
            b = nu[(x >> 43) % (sizeof(nu) / sizeof(nu[0]))];
            c = co[(x >> 53) % (sizeof(co) / sizeof(co[0]))];
            n += (size_t) snprintf(buf + n, sizeof(buf) - n, "%s%s%s", a, b,
                c);
        }
        rc = vg_add_word(t, buf, n, 1);
        if (rc != 0) {
            return rc;
        }
    }
    return 0;
}

static void
vg_train_free(vg_train_t *t)
{
    for (size_t i = 0; i < t->n_words; i++) {
        free(t->words[i].s);
        free(t->wtext[i]);
    }
    free(t->words);
    free(t->wtext);
    free(t->wlen);
    free(t->whash);
}

uint32_t
llm_vocabgen_min_size(void)
{
    return 256 + VG_NSPECIAL;
}

void
llm_vocabgen_free(llm_vocabgen_t *v)
{
    if (v->tokens != NULL) {
        for (uint32_t i = 0; i < v->n_tokens; i++) {
            free(v->tokens[i]);
        }
    }
    if (v->merges != NULL) {
        for (uint32_t i = 0; i < v->n_merges; i++) {
            free(v->merges[i]);
        }
    }
    free(v->tokens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof(*v));
}

/*
 * Incremental trainer state.  count(pair) is the weighted number of
 * adjacent positions holding it, over all words.  Each pair keeps the
 * words it was ever seen in (stale entries are rechecked); a max-heap of
 * (count, key) entries finds the best pair, entries going stale lazily:
 * an old pair's count only ever drops, and a new pair is pushed with its
 * count after each merge, so the first entry whose count is current is
 * the true maximum (ties: smaller key), exactly as a full recount finds.
 */
typedef struct {
    uint64_t    key;            /* left << 32 | right */
    int64_t     count;
    uint32_t   *words;
    uint32_t    n_words, cap_words;
    uint32_t    pushed;         /* merge round it was last pushed in */
} vg_pair_t;

typedef struct {
    int64_t     count;
    uint64_t    key;
} vg_heap_t;

typedef struct {
    vg_pair_t  *pairs;
    size_t      n_pairs, cap_pairs;
    uint32_t   *slots;          /* open addressing, pair index + 1 */
    size_t      n_slots;
    vg_heap_t  *heap;
    size_t      n_heap, cap_heap;
    uint32_t   *touched;        /* pairs changed in this round */
    size_t      n_touched, cap_touched;
} vg_pairs_t;

static vg_pair_t *
vg_pair(vg_pairs_t *ps, uint64_t key, int create)
{
    size_t mask = ps->n_slots - 1;
    size_t j = (size_t) ((key * 0x9e3779b97f4a7c15ull) >> 17) & mask;

    while (ps->slots[j] != 0) {
        vg_pair_t *p = &ps->pairs[ps->slots[j] - 1];
        if (p->key == key) {
            return p;
        }
        j = (j + 1) & mask;
    }
    if (!create) {
        return NULL;
    }
    if ((ps->n_pairs + 1) * 2 > ps->n_slots) {
        /* grow the table and re-place every pair */
        size_t n = ps->n_slots * 2;
        uint32_t *sl = calloc(n, sizeof(uint32_t));
        if (sl == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < ps->n_pairs; i++) {
            size_t k = (size_t) ((ps->pairs[i].key * 0x9e3779b97f4a7c15ull)
                                 >> 17) & (n - 1);
            while (sl[k] != 0) {
                k = (k + 1) & (n - 1);
            }
            sl[k] = (uint32_t) i + 1;
        }
        free(ps->slots);
        ps->slots = sl;
        ps->n_slots = n;
        return vg_pair(ps, key, create);
    }
    if (ps->n_pairs == ps->cap_pairs) {
        size_t cap = ps->cap_pairs ? ps->cap_pairs * 2 : 4096;
        vg_pair_t *np = realloc(ps->pairs, cap * sizeof(*np));
        if (np == NULL) {
            return NULL;
        }
        ps->pairs = np;
        ps->cap_pairs = cap;
    }
    vg_pair_t *p = &ps->pairs[ps->n_pairs++];
    memset(p, 0, sizeof(*p));
    p->key = key;
    ps->slots[j] = (uint32_t) ps->n_pairs;
    return p;
}

static int
vg_heap_less(const vg_heap_t *a, const vg_heap_t *b)
{
    /* a below b: smaller count, or same count and larger key */
    return a->count < b->count || (a->count == b->count && a->key > b->key);
}

static int
vg_heap_push(vg_pairs_t *ps, int64_t count, uint64_t key)
{
    size_t i;

    if (ps->n_heap == ps->cap_heap) {
        size_t cap = ps->cap_heap ? ps->cap_heap * 2 : 4096;
        vg_heap_t *nh = realloc(ps->heap, cap * sizeof(*nh));
        if (nh == NULL) {
            return -ENOMEM;
        }
        ps->heap = nh;
        ps->cap_heap = cap;
    }
    i = ps->n_heap++;
    ps->heap[i].count = count;
    ps->heap[i].key = key;
    while (i > 0 && vg_heap_less(&ps->heap[(i - 1) / 2], &ps->heap[i])) {
        vg_heap_t tmp = ps->heap[i];
        ps->heap[i] = ps->heap[(i - 1) / 2];
        ps->heap[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
    return 0;
}

static vg_heap_t
vg_heap_pop(vg_pairs_t *ps)
{
    vg_heap_t top = ps->heap[0];
    size_t i = 0;

    ps->heap[0] = ps->heap[--ps->n_heap];
    for ( ;; ) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < ps->n_heap && vg_heap_less(&ps->heap[m], &ps->heap[l])) {
            m = l;
        }
        if (r < ps->n_heap && vg_heap_less(&ps->heap[m], &ps->heap[r])) {
            m = r;
        }
        if (m == i) {
            break;
        }
        vg_heap_t tmp = ps->heap[i];
        ps->heap[i] = ps->heap[m];
        ps->heap[m] = tmp;
        i = m;
    }
    return top;
}

/* Add sign * weight for every adjacent pair of word w (and index it). */
static int
vg_count_word(vg_pairs_t *ps, const vg_word_t *wd, uint32_t w, int sign,
    uint32_t round)
{
    for (uint32_t i = 0; i + 1 < wd->n; i++) {
        uint64_t key = (uint64_t) wd->s[i] << 32 | wd->s[i + 1];
        vg_pair_t *p = vg_pair(ps, key, 1);
        if (p == NULL) {
            return -ENOMEM;
        }
        p->count += sign * wd->weight;
        if (sign > 0 && (p->n_words == 0 || p->words[p->n_words - 1] != w)) {
            if (p->n_words == p->cap_words) {
                uint32_t cap = p->cap_words ? p->cap_words * 2 : 4;
                uint32_t *nw = realloc(p->words, cap * sizeof(uint32_t));
                if (nw == NULL) {
                    return -ENOMEM;
                }
                p->words = nw;
                p->cap_words = cap;
            }
            p->words[p->n_words++] = w;
        }
        if (p->pushed != round) {
            p->pushed = round;
            if (ps->n_touched == ps->cap_touched) {
                size_t cap = ps->cap_touched ? ps->cap_touched * 2 : 1024;
                uint32_t *nt = realloc(ps->touched, cap * sizeof(uint32_t));
                if (nt == NULL) {
                    return -ENOMEM;
                }
                ps->touched = nt;
                ps->cap_touched = cap;
            }
            ps->touched[ps->n_touched++] = (uint32_t) (p - ps->pairs);
        }
    }
    return 0;
}

/* Push the current count of every pair touched this round. */
static int
vg_push_touched(vg_pairs_t *ps)
{
    for (size_t i = 0; i < ps->n_touched; i++) {
        vg_pair_t *p = &ps->pairs[ps->touched[i]];
        if (p->count > 0 && vg_heap_push(ps, p->count, p->key) != 0) {
            return -ENOMEM;
        }
    }
    ps->n_touched = 0;
    return 0;
}

static void
vg_pairs_free(vg_pairs_t *ps)
{
    for (size_t i = 0; i < ps->n_pairs; i++) {
        free(ps->pairs[i].words);
    }
    free(ps->pairs);
    free(ps->slots);
    free(ps->heap);
    free(ps->touched);
}

/*
 * Learn up to want merges over t's words.  sym[] holds the byte-mapped
 * string of every symbol (256 bytes, then one per merge, appended here).
 * On return *n_done merges exist; merges[k] is "left right".
 */
static int
vg_learn(vg_train_t *t, uint32_t want, char **sym, char **merges,
    uint32_t *n_done)
{
    vg_pairs_t ps;
    uint32_t *seen = NULL;
    uint32_t m = 0;
    int rc = -ENOMEM;

    memset(&ps, 0, sizeof(ps));
    ps.n_slots = 1 << 16;
    ps.slots = calloc(ps.n_slots, sizeof(uint32_t));
    seen = calloc(t->n_words ? t->n_words : 1, sizeof(uint32_t));
    if (ps.slots == NULL || seen == NULL) {
        goto done;
    }
    for (size_t w = 0; w < t->n_words; w++) {
        if (vg_count_word(&ps, &t->words[w], (uint32_t) w, 1, 1) != 0) {
            goto done;
        }
    }
    if (vg_push_touched(&ps) != 0) {
        goto done;
    }

    while (m < want && ps.n_heap > 0) {
        vg_heap_t top = vg_heap_pop(&ps);
        vg_pair_t *p = vg_pair(&ps, top.key, 0);
        uint32_t a, b, id = 256 + m, round = m + 2;
        size_t la, lb, nw;

        if (p == NULL || p->count != top.count) {
            if (p != NULL && p->count > 0 && p->count < top.count
                && vg_heap_push(&ps, p->count, p->key) != 0)
            {
                goto done;
            }
            continue;               /* stale entry */
        }
        a = (uint32_t) (top.key >> 32);
        b = (uint32_t) top.key;
        la = strlen(sym[a]);
        lb = strlen(sym[b]);
        sym[id] = malloc(la + lb + 1);
        merges[m] = malloc(la + lb + 2);
        if (sym[id] == NULL || merges[m] == NULL) {
            goto done;
        }
        memcpy(sym[id], sym[a], la);
        memcpy(sym[id] + la, sym[b], lb + 1);
        memcpy(merges[m], sym[a], la);
        merges[m][la] = ' ';
        memcpy(merges[m] + la + 1, sym[b], lb + 1);
        m++;

        /* rewrite every word holding (a, b); p may move as pairs grow */
        nw = p->n_words;
        for (size_t k = 0; k < nw; k++) {
            uint32_t w = ps.pairs[p - ps.pairs].words[k];
            vg_word_t *wd = &t->words[w];
            uint32_t i, o = 0, hit = 0;
            size_t pi = (size_t) (p - ps.pairs);

            if (seen[w] == round) {
                continue;
            }
            seen[w] = round;
            for (i = 0; i + 1 < wd->n; i++) {
                if (wd->s[i] == a && wd->s[i + 1] == b) {
                    hit = 1;
                    break;
                }
            }
            if (!hit) {
                continue;
            }
            if (vg_count_word(&ps, wd, w, -1, round) != 0) {
                goto done;
            }
            for (i = 0; i < wd->n; i++) {
                if (i + 1 < wd->n && wd->s[i] == a && wd->s[i + 1] == b) {
                    wd->s[o++] = id;
                    i++;
                } else {
                    wd->s[o++] = wd->s[i];
                }
            }
            wd->n = o;
            if (vg_count_word(&ps, wd, w, 1, round) != 0) {
                goto done;
            }
            p = &ps.pairs[pi];      /* the array may have moved */
        }
        if (vg_push_touched(&ps) != 0) {
            goto done;
        }
    }
    rc = 0;

done:
    *n_done = m;
    if (rc != 0 && m < want) {
        free(sym[256 + m]);
        sym[256 + m] = NULL;
        free(merges[m]);
        merges[m] = NULL;
    }
    free(seen);
    vg_pairs_free(&ps);
    return rc;
}

int
llm_vocabgen_build(llm_vocabgen_t *v, uint32_t n_vocab, const char *pre,
    char *err, size_t errlen)
{
    vg_train_t t;
    uint32_t cp[256], want, n_merges = 0, id;
    uint8_t order[256];
    char **sym = NULL;
    const char *re;
    int rc;

    memset(v, 0, sizeof(*v));
    memset(&t, 0, sizeof(t));
    if (n_vocab < llm_vocabgen_min_size()) {
        llm_err(err, errlen, "vocabgen: vocabulary of %u tokens is below the "
            "minimum %u (256 bytes + %zu special tokens)", n_vocab,
            llm_vocabgen_min_size(), VG_NSPECIAL);
        return -EINVAL;
    }
    if (strcmp(pre, "qwen2") == 0) {
        re = vg_re_qwen2;
    } else if (strcmp(pre, "gpt-2") == 0) {
        re = vg_re_gpt2;
    } else {
        llm_err(err, errlen, "vocabgen: unknown pre-tokenizer '%s' (expected "
            "qwen2 or gpt-2)", pre);
        return -EINVAL;
    }
    want = n_vocab - llm_vocabgen_min_size();
    if (want > LLM_VG_MAX_MERGES) {
        want = LLM_VG_MAX_MERGES;
    }

    rc = vg_pretokenize(&t, re, vg_corpus, 1000, err, errlen);
    if (rc == 0 && want > 1000) {
        rc = vg_add_synthetic(&t, want);
    }
    v->n_tokens = n_vocab;
    v->tokens = calloc(n_vocab, sizeof(char *));
    v->types = calloc(n_vocab, sizeof(int32_t));
    v->merges = calloc(want ? want : 1, sizeof(char *));
    sym = calloc(256 + (size_t) want, sizeof(char *));
    if (rc == 0 && (v->tokens == NULL || v->types == NULL
                    || v->merges == NULL || sym == NULL))
    {
        rc = -ENOMEM;
    }
    if (rc != 0) {
        goto done;
    }

    vg_byte_table(cp, order);
    for (int b = 0; b < 256; b++) {
        char u[3];
        size_t n = vg_utf8(cp[b], u);
        sym[b] = malloc(n + 1);
        if (sym[b] == NULL) {
            rc = -ENOMEM;
            goto done;
        }
        memcpy(sym[b], u, n);
        sym[b][n] = '\0';
    }

    rc = vg_learn(&t, want, sym, v->merges, &n_merges);
    v->n_merges = n_merges;
    if (rc != 0) {
        goto done;
    }

    /* ids: bytes in GPT-2 order, merges, specials, [PADn] */
    for (id = 0; id < 256; id++) {
        v->tokens[id] = sym[order[id]];
        sym[order[id]] = NULL;
        v->types[id] = LLM_VG_NORMAL;
    }
    for (uint32_t m = 0; m < n_merges; m++, id++) {
        v->tokens[id] = sym[256 + m];
        sym[256 + m] = NULL;
        v->types[id] = LLM_VG_NORMAL;
    }
    for (size_t k = 0; k < VG_NSPECIAL; k++, id++) {
        v->tokens[id] = strdup(vg_specials[k].text);
        v->types[id] = vg_specials[k].type;
        if (v->tokens[id] == NULL) {
            rc = -ENOMEM;
            goto done;
        }
    }
    v->bos_id = 256 + n_merges;
    v->pad_id = v->bos_id;
    v->im_start_id = v->bos_id + 1;
    v->eos_id = v->bos_id + 2;
    v->eot_id = v->eos_id;
    for (; id < n_vocab; id++) {
        char buf[32];
        snprintf(buf, sizeof(buf), "[PAD%u]", id);
        v->tokens[id] = strdup(buf);
        v->types[id] = LLM_VG_UNUSED;
        if (v->tokens[id] == NULL) {
            rc = -ENOMEM;
            goto done;
        }
    }

done:
    if (sym != NULL) {
        for (size_t k = 0; k < 256 + (size_t) want; k++) {
            free(sym[k]);
        }
        free(sym);
    }
    vg_train_free(&t);
    if (rc != 0) {
        if (rc == -ENOMEM) {
            llm_err(err, errlen, "vocabgen: out of memory");
        }
        llm_vocabgen_free(v);
    }
    return rc;
}

const char *
llm_vocabgen_chat_template(void)
{
    return vg_chat_template;
}

const char *
llm_vocabgen_corpus(void)
{
    return vg_corpus;
}
