/*
 * The wire and the engine meet here: a Generate as the protocol carries
 * it (proto/llm.proto) becomes the engine's request (decode/request.h),
 * decoded once; nothing below serve/ sees the protobuf types.
 */

#ifndef LLM_WIRE_H
#define LLM_WIRE_H

#include <stddef.h>

#include "llm.pb-c.h"
#include "decode/request.h"

/*
 * Decode g into r (llm_request_init'ed or freed): the messages become the
 * OpenAI-shaped tree the chat template reads, the JSON-text fields are
 * parsed (request.h says how a field that does not parse is reported),
 * sampling is copied as asked.  r borrows g's strings: g must outlive it.
 * Returns 0, or -ENOMEM with err set and r freed.
 */
int llm_wire_request(llm_request_t *r, const Llm__GenerateRequest *g,
    char *err, size_t errlen);

#endif /* LLM_WIRE_H */
