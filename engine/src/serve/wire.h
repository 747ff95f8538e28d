/*
 * The wire and the engine meet here, in both directions: a Generate as
 * the protocol carries it (proto/llm.proto) becomes the engine's request
 * (decode/request.h), decoded once, and the scheduler's events become the
 * protocol's Event messages, encoded in one place.  Nothing below serve/
 * sees the protobuf types.
 */

#ifndef LLM_WIRE_H
#define LLM_WIRE_H

#include <stddef.h>

#include "llm.pb-c.h"
#include "decode/request.h"
#include "scheduler.h"
#include "text/tokenizer.h"

/*
 * Decode g into r (llm_request_init'ed or freed): the messages become the
 * OpenAI-shaped tree the chat template reads, the JSON-text fields are
 * parsed (request.h says how a field that does not parse is reported),
 * sampling is copied as asked.  r borrows g's strings: g must outlive it.
 * Returns 0, or -ENOMEM with err set and r freed.
 */
int llm_wire_request(llm_request_t *r, const Llm__GenerateRequest *g,
    char *err, size_t errlen);

/* Receives the Event a scheduler event became (valid during the call). */
typedef void (*llm_wire_send_pt)(void *ud, const Llm__Event *pe);

/*
 * Encode ev as the protocol's Event and hand it to send.  A Delta's
 * logprobs carry each token's bytes from v.
 */
void llm_wire_event(const llm_sched_event_t *ev, const llm_vocab_t *v,
    llm_wire_send_pt send, void *ud);

#endif /* LLM_WIRE_H */
