/*
 * Constrained decoding: an incremental byte-level JSON automaton driven by
 * a compiled JSON Schema, and a per-vocabulary token index that turns an
 * automaton state into a logits mask (docs/CONSTRAINED.md).
 *
 * Three objects, three lifetimes:
 *
 *   llm_grammar_t   a compiled schema; immutable once compiled, so one
 *                   grammar may drive any number of states.
 *   llm_gstate_t    the automaton state of one sequence: what has been
 *                   fed so far, as a small set of parallel parse stacks
 *                   (anyOf and type unions are followed exactly, not
 *                   guessed); refers to its grammar, which must outlive it.
 *   llm_tokindex_t  a trie of the byte strings of a vocabulary's tokens
 *                   (control tokens left out; end-of-generation tokens
 *                   listed apart), built once per model and shared
 *                   read-only by every sequence.
 *
 * The language accepted: optional whitespace (at most LLM_GRAMMAR_WS_MAX
 * consecutive bytes of ' ', '\n', '\t' between tokens of JSON, before and
 * after the value), one JSON value that validates against the schema,
 * nothing after it.  Strings are valid UTF-8 with no raw control bytes,
 * escapes are the JSON ones (\uXXXX only for non-surrogate code points
 * other than U+0000); object keys are written without escapes; integers
 * have at most 18 digits, fractions at most 16, exponents at most 2, so
 * that every accepted text parses with jansson and JSON.parse alike.
 * Whatever bytes the state accepts, the text can always still be completed
 * into a valid value (as long as the schema is satisfiable within
 * LLM_GRAMMAR_MAX_DEPTH).
 *
 * Every function that can fail returns 0 (or a count) on success and a
 * negative errno on failure, with a message in err where it takes one.
 */

#ifndef LLM_GRAMMAR_H
#define LLM_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "text/tokenizer.h"

#define LLM_GRAMMAR_WS_MAX       2     /* consecutive whitespace bytes */
#define LLM_GRAMMAR_MAX_DEPTH    32    /* nesting of objects and arrays */
#define LLM_GRAMMAR_MAX_THREADS  16    /* parallel parses (anyOf) kept */
#define LLM_GRAMMAR_MAX_NODES    4096  /* compiled schema nodes */
#define LLM_GRAMMAR_MAX_PROPS    64    /* properties of one object */

typedef struct llm_grammar_s   llm_grammar_t;
typedef struct llm_gstate_s    llm_gstate_t;
typedef struct llm_tokindex_s  llm_tokindex_t;


/* Compiling. */

/* Options of llm_grammar_compile(). */
#define LLM_GRAMMAR_STRICT   0x01  /* absent additionalProperties = false
                                      (OpenAI's strict: true) */
#define LLM_GRAMMAR_ORDERED  0x02  /* object properties only in the order
                                      the schema declares them (tool calls:
                                      "name" before "arguments") */

/*
 * Compile a JSON Schema.  schema NULL means json_object mode: any JSON
 * object.  Supported: type (a name or an array of names: object, array,
 * string, integer, number, boolean, null), properties, required,
 * additionalProperties (true, false or a schema; absent = true unless
 * LLM_GRAMMAR_STRICT), items (one schema), minItems, maxItems, enum,
 * const, anyOf and oneOf (oneOf treated as anyOf), $ref to "#", "#/$defs/.."
 * and "#/definitions/.." (recursion allowed), and the annotations
 * description, title, default, examples, $schema, $id, $comment,
 * deprecated, readOnly, writeOnly, $defs, definitions.  Anything else is an
 * error naming the keyword and its JSON pointer:
 *
 *     unsupported JSON schema keyword 'pattern' at /properties/zip
 *
 * as are an empty enum/anyOf/type list, minItems > maxItems, a schema
 * with more than LLM_GRAMMAR_MAX_NODES nodes or an object with more than
 * LLM_GRAMMAR_MAX_PROPS properties, and anyOf/oneOf/$ref/enum/const
 * combined with other validation keywords (only "type" may go with enum
 * and const: it filters their values).
 */
int llm_grammar_compile(llm_grammar_t **out, const json_t *schema,
    unsigned flags, char *err, size_t errlen);

/*
 * From an OpenAI response_format object as the gateway forwards it
 * ({"type": "json_object"} or {"type": "json_schema", "json_schema":
 * {"schema": ..., "strict": ...}}).  *out is left NULL (return 0) for
 * {"type": "text"}.  Errors name the problem in err, ready for an
 * invalid_request_error with param "response_format".
 */
int llm_grammar_from_response_format(llm_grammar_t **out, const char *json,
    size_t len, char *err, size_t errlen);
/* The same from the parsed response_format (rf NULL or not an object:
 * "response_format is not a JSON object"). */
int llm_grammar_from_response_format_json(llm_grammar_t **out,
    const json_t *rf, char *err, size_t errlen);

void llm_grammar_free(llm_grammar_t *g);


/* Running the automaton. */

int llm_gstate_create(llm_gstate_t **out, const llm_grammar_t *g);
void llm_gstate_free(llm_gstate_t *st);
/* Back to the start (nothing fed). */
void llm_gstate_reset(llm_gstate_t *st);
/* dst becomes a copy of src (same grammar). */
int llm_gstate_copy(llm_gstate_t *dst, const llm_gstate_t *src);

/*
 * Feed bytes.  All or nothing: 0 when every byte was accepted (the state
 * advanced), -EILSEQ when some byte was not (the state is unchanged).
 */
int llm_gstate_feed(llm_gstate_t *st, const char *s, size_t len);

/* Nonzero when what was fed is a complete value (end allowed here). */
int llm_gstate_complete(const llm_gstate_t *st);
/* Nonzero when some byte can still be fed (a complete value followed by
 * the whitespace bound accepts nothing more). */
int llm_gstate_can_continue(const llm_gstate_t *st);
/* Nonzero once llm_tokindex_accept() took an end-of-generation token. */
int llm_gstate_finished(const llm_gstate_t *st);

/*
 * Write into buf (NUL-terminated, at most n bytes) the bytes that could be
 * fed next, one each; returns how many.  For tests and error messages.
 */
size_t llm_gstate_next_bytes(const llm_gstate_t *st, uint8_t *buf,
    size_t n);


/* The token index. */

int llm_tokindex_create(llm_tokindex_t **out, const llm_vocab_t *v,
    char *err, size_t errlen);
void llm_tokindex_free(llm_tokindex_t *ti);
uint32_t llm_tokindex_n_vocab(const llm_tokindex_t *ti);

/* Options of llm_tokindex_mask(). */
#define LLM_GMASK_EOG  0x01  /* allow end-of-generation tokens when the
                                value is complete */

/*
 * Set logits[id] = -INFINITY for every token whose bytes the state cannot
 * accept next (a token is allowed when all its bytes are accepted in turn;
 * control tokens are never allowed; with LLM_GMASK_EOG the vocabulary's
 * end-of-generation tokens are allowed exactly when the value is complete,
 * and once the state is finished only they are).  Allowed logits are left
 * untouched.  Returns the number of allowed tokens (0: a dead end, every
 * logit is -INFINITY) or a negative errno.  n_vocab may exceed the
 * vocabulary (padded logits rows): the extra entries are masked.
 * Not thread-safe per state (it uses scratch space in st); different
 * states may be masked concurrently against one index.
 */
int llm_tokindex_mask(const llm_tokindex_t *ti, llm_gstate_t *st,
    unsigned flags, float *logits, uint32_t n_vocab);

/*
 * Advance st by the token's bytes.  An end-of-generation token finishes a
 * complete state.  -EILSEQ (state unchanged) when the token is not
 * allowed, which a caller that sampled from a masked row never sees.
 */
int llm_tokindex_accept(const llm_tokindex_t *ti, llm_gstate_t *st,
    int32_t token);

#endif /* LLM_GRAMMAR_H */
