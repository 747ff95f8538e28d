/*
 * One line of error context into the caller's buffer (err.h).
 */

#include <stdarg.h>
#include <stdio.h>

#include "err.h"

void
llm_err(char *err, size_t errlen, const char *fmt, ...)
{
    va_list  ap;

    if (err == NULL || errlen == 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
