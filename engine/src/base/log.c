/*
 * The engine's log (log.h).  One write(2) per line, so lines from several
 * threads never interleave.
 */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static llm_log_level_t llm_log_level = LLM_LOG_INFO;

void
llm_log_set_level(llm_log_level_t l)
{
    llm_log_level = l;
}

int
llm_log_parse_level(const char *s)
{
    static const char *names[] = { "error", "warn", "info", "debug" };

    for (int i = 0; i < 4; i++) {
        if (strcmp(s, names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

void
llm_log(llm_log_level_t l, const char *fmt, ...)
{
    static const char *names[] = { "error", "warn", "info", "debug" };
    struct timespec    ts;
    struct tm          tm;
    char               line[2048];
    int                n;
    va_list            ap;

    if (l > llm_log_level) {
        return;
    }
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(line, sizeof(line),
                 "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ [%s] llm-engine: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                 tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, names[l]);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t) n - 1, fmt, ap);
    va_end(ap);
    if (n > (int) sizeof(line) - 2) {
        n = (int) sizeof(line) - 2;
    }
    line[n++] = '\n';
    (void) !write(STDERR_FILENO, line, (size_t) n);
}
