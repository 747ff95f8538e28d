/*
 * The engine's log: one line per event to stderr, with a UTC timestamp
 * and level.  Only the programs and serve/ log; the libraries below
 * report through return codes, err buffers and stats, and their caller
 * decides what is worth a line.
 */

#ifndef LLM_LOG_H
#define LLM_LOG_H

/* Logging: one line per event to stderr, with a UTC timestamp and level. */
typedef enum {
    LLM_LOG_ERROR = 0,
    LLM_LOG_WARN,
    LLM_LOG_INFO,
    LLM_LOG_DEBUG
} llm_log_level_t;

void llm_log_set_level(llm_log_level_t l);
int llm_log_parse_level(const char *s);     /* -1 if unknown */
void llm_log(llm_log_level_t l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif /* LLM_LOG_H */
