/* c_checks: the checks the C test ranks (c_rank.c, c_nccl_rank.c) share:
 * Fail prints "FAILED (rank R): ..." and exits 1; Ok and Refused check a
 * rankd_status and free it; ExpectCause and ExpectPoisonRefusals check
 * rankd_session_poison and its kin. Header-only (static functions): each rank
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

/* Fails unless `status` is exactly the cause (`code`, `message`), as
 * rankd_session_poison_status returns it; prints "CAUSE <what>: <message>"
 * and frees it. */
static void ExpectCause(rankd_status* status, rankd_code code,
                        const char* message, const char* what) {
  if (status == NULL) Fail("%s: NULL (healthy); expected a cause", what);
  if (rankd_status_code(status) != code ||
      strcmp(rankd_status_message(status), message) != 0) {
    Fail("%s: got %s '%s'; expected %s '%s'", what,
         rankd_code_name(rankd_status_code(status)),
         rankd_status_message(status), rankd_code_name(code), message);
  }
  printf("CAUSE %s: %s\n", what, rankd_status_message(status));
  rankd_status_free(status);
}

/* The refusals of rankd_session_poison and rankd_session_abort (before
 * anything is latched) and of rankd_session_poison_status, the same on
 * every backend; `session` is healthy and stays so. */
static void ExpectPoisonRefusals(rankd_session* session) {
  typedef rankd_status* (*Latch)(rankd_session*, int32_t, const char*);
  const Latch latches[2] = {rankd_session_poison, rankd_session_abort};
  const char* names[2] = {"rankd_session_poison", "rankd_session_abort"};
  char needle[128];
  for (int i = 0; i < 2; ++i) {
    snprintf(needle, sizeof(needle), "%s: session is NULL", names[i]);
    Refused(latches[i](NULL, RANKD_ABORTED, "m"), RANKD_INVALID_ARGUMENT,
            needle, "a NULL session");
    snprintf(needle, sizeof(needle), "%s: message is NULL", names[i]);
    Refused(latches[i](session, RANKD_ABORTED, NULL), RANKD_INVALID_ARGUMENT,
            needle, "a NULL message");
    Refused(latches[i](session, RANKD_OK, "m"), RANKD_INVALID_ARGUMENT,
            "code is RANKD_OK; a cause must be an error code", "an OK cause");
    Refused(latches[i](session, 17, "m"), RANKD_INVALID_ARGUMENT,
            "code is 17, not a rankd_code", "a code past rankd_code");
    Refused(latches[i](session, -1, "m"), RANKD_INVALID_ARGUMENT,
            "code is -1, not a rankd_code", "a negative code");
  }
  Refused(rankd_session_poison_status(NULL), RANKD_INVALID_ARGUMENT,
          "rankd_session_poison_status: session is NULL",
          "poison_status of a NULL session");
  rankd_status* status = rankd_session_poison_status(session);
  if (status != NULL) {
    Fail("a refused cause was latched: %s %s",
         rankd_code_name(rankd_status_code(status)),
         rankd_status_message(status));
  }
}

#endif /* RANKD_CAPI_TESTING_C_CHECKS_H_ */
