/* c_checks: the checks the C test ranks (c_rank.c, c_nccl_rank.c) share:
 * Fail prints "FAILED (rank R): ..." and exits 1; Ok and Refused check a
 * rankd_status and free it. Header-only (static functions): each rank
 * program includes it once. Depends on rankd/rankd.h and libc. */
#ifndef RANKD_CAPI_TESTING_C_CHECKS_H_
#define RANKD_CAPI_TESTING_C_CHECKS_H_

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rankd/rankd.h"

/* This process's rank, for messages; set once the rank has joined. */
static uint32_t my_rank = 0;

static void Fail(const char* format, ...) {
  va_list args;
  va_start(args, format);
  fprintf(stderr, "FAILED (rank %u): ", my_rank);
  vfprintf(stderr, format, args);
  fprintf(stderr, "\n");
  va_end(args);
  exit(1);
}

/* Fails unless `status` is OK; frees it. */
static void Ok(rankd_status* status, const char* what) {
  if (status != NULL) {
    Fail("%s: %s: %s", what, rankd_code_name(rankd_status_code(status)),
         rankd_status_message(status));
  }
}

/* Fails unless `status` has `code` and its message contains `needle`;
 * prints "REFUSED <what>: <message>" and frees it. */
static void Refused(rankd_status* status, rankd_code code, const char* needle,
                    const char* what) {
  if (status == NULL)
    Fail("%s: accepted; expected %s", what, rankd_code_name(code));
  if (rankd_status_code(status) != code ||
      strstr(rankd_status_message(status), needle) == NULL) {
    Fail("%s: got %s '%s'; expected %s containing '%s'", what,
         rankd_code_name(rankd_status_code(status)),
         rankd_status_message(status), rankd_code_name(code), needle);
  }
  printf("REFUSED %s: %s\n", what, rankd_status_message(status));
  rankd_status_free(status);
}

#endif /* RANKD_CAPI_TESTING_C_CHECKS_H_ */
