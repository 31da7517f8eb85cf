#!/usr/bin/env bash
# librankd.so exports exactly the functions capi/include/rankd/rankd.h
# declares (RANKD_EXPORT ... rankd_name(...)): nothing of the C++ code it
# carries, and nothing the header promises is missing.
set -euo pipefail
header="capi/include/rankd/rankd.h"
library="capi/librankd.so"
declared=$(tr '\n' ' ' < "$header" | grep -o 'RANKD_EXPORT [^(]*(' |
  grep -o 'rankd_[a-z0-9_]*($' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$library" | awk '{print $3}' |
  sed 's/@.*//' | sort -u)
if [[ "$declared" != "$exported" ]]; then
  echo "declared in $header but not exported:"
  comm -23 <(echo "$declared") <(echo "$exported")
  echo "exported but not declared:"
  comm -13 <(echo "$declared") <(echo "$exported")
  exit 1
fi
echo "librankd.so exports the $(echo "$declared" | wc -l) functions of rankd.h and nothing else"
