/*
 * The engine's error convention (docs/STYLE.md): a function that can fail
 * returns a negative errno and writes one line of context into the
 * caller's buffer.  llm_err() writes that line; err may be NULL or errlen
 * 0 when the caller wants no message.
 */

#ifndef LLM_ERR_H
#define LLM_ERR_H

#include <stddef.h>

void llm_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* LLM_ERR_H */
