/*
 * Whole-file reads for the tools and tests (a chat template, a text to
 * tokenize, a schema from stdin): one function instead of a copy per
 * program.  The engine itself maps its files (model/gguf.h).
 */

#ifndef LLM_READFILE_H
#define LLM_READFILE_H

#include <stddef.h>
#include <stdio.h>

/*
 * Everything f holds until EOF, NUL-terminated (the NUL not counted in
 * *len), in one malloc()ed buffer the caller frees.  NULL with errno set
 * on a read error or when memory runs out.
 */
char *llm_read_stream(FILE *f, size_t *len);

/* The file at path, as llm_read_stream().  NULL with errno set. */
char *llm_read_file(const char *path, size_t *len);

#endif /* LLM_READFILE_H */
