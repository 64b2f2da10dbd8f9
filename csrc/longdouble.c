/* INCRBYFLOAT arithmetic in C `long double`, exactly as Redis does it
 * (util.c string2ld / ld2string with LD_STR_HUMAN). Rust has no 80-bit
 * float, and f64 gives different digits (10.5 + 0.1 must be "10.6").
 * The same formatting serves Redis's addReplyHumanLongDouble of a double
 * (GEOPOS, WITHCOORD): lk_ld2string_human. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LONG_DOUBLE_CHARS (5 * 1024)

/* Redis's string2ld: the whole buffer must be a number, no leading space,
 * no NaN, no overflow, no underflow to zero. */
static int string2ld(const char *s, size_t slen, long double *dp) {
    char buf[MAX_LONG_DOUBLE_CHARS];
    long double value;
    char *eptr;

    if (slen == 0 || slen >= sizeof(buf)) return 0;
    memcpy(buf, s, slen);
    buf[slen] = '\0';

    errno = 0;
    value = strtold(buf, &eptr);
    if (isspace((unsigned char)buf[0]) || eptr[0] != '\0' ||
        (size_t)(eptr - buf) != slen ||
        (errno == ERANGE &&
         (value == HUGE_VAL || value == -HUGE_VAL || fpclassify(value) == FP_ZERO)) ||
        errno == EINVAL || isnan(value))
        return 0;
    *dp = value;
    return 1;
}

/* Redis's ld2string in LD_STR_HUMAN mode: "%.17Lf" without trailing zeros. */
static int ld2string_human(char *buf, size_t len, long double value) {
    size_t l;
    if (isinf(value)) {
        if (len < 5) return 0;
        if (value > 0) {
            memcpy(buf, "inf", 3);
            l = 3;
        } else {
            memcpy(buf, "-inf", 4);
            l = 4;
        }
    } else {
        int n = snprintf(buf, len, "%.17Lf", value);
        if (n < 0 || (size_t)n + 1 > len) return 0;
        l = (size_t)n;
        if (strchr(buf, '.') != NULL) {
            char *p = buf + l - 1;
            while (*p == '0') {
                p--;
                l--;
            }
            if (*p == '.') l--;
        }
        if (l == 2 && buf[0] == '-' && buf[1] == '0') {
            buf[0] = '0';
            l = 1;
        }
    }
    buf[l] = '\0';
    return (int)l;
}

/* cur/curlen is the stored value (has_cur == 0: missing key, counts as 0).
 * Writes the new value to out and returns its length, or
 * -1: stored value is not a float, -2: increment is not a float,
 * -3: the result is NaN or infinite, -4: out is too small. */
int lk_incrbyfloat(const char *cur, size_t curlen, int has_cur,
                   const char *incr, size_t incrlen, char *out, size_t outlen) {
    long double value = 0, by;
    if (has_cur && !string2ld(cur, curlen, &value)) return -1;
    if (!string2ld(incr, incrlen, &by)) return -2;
    value += by;
    if (isnan(value) || isinf(value)) return -3;
    int l = ld2string_human(out, outlen, value);
    return l > 0 ? l : -4;
}

/* A double as Redis's addReplyHumanLongDouble prints it: converted to long
 * double, then ld2string LD_STR_HUMAN. Returns the length written to out,
 * or 0 when out is too small. */
int lk_ld2string_human(double value, char *out, size_t outlen) {
    return ld2string_human(out, outlen, (long double)value);
}
