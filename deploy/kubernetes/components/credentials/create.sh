#!/bin/sh
# Writes a new job's credentials next to this file (credentials/node.key,
# operator.token: 32 random bytes each, hex, mode 0600), which
# the component here turns into the Secret rankd-credentials. The same as
# `rankctl credentials create DIR`, for machines without rankctl. Refuses
# to overwrite: to rotate, remove the folder, run again, re-apply and
# restart the job's pods (docs/operations.md, "Credentials").
# Usage: create.sh [DIR]   (default: credentials/ next to this script)
set -eu
dir=${1:-"$(dirname "$0")/credentials"}
if [ -e "$dir/node.key" ] || [ -e "$dir/operator.token" ]; then
  echo "create.sh: $dir already holds credentials; remove it to issue new ones" >&2
  exit 1
fi
umask 077
mkdir -p "$dir"
# No rank credential: each pod's rankd hands its ranks tokens of their own
# (RANKD_ISSUE_RANK_TOKENS in the ConfigMap).
for f in node.key operator.token; do
  if command -v openssl >/dev/null 2>&1; then
    openssl rand -hex 32 >"$dir/$f"
  else
    od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$dir/$f"
    echo >>"$dir/$f"
  fi
done
echo "wrote $dir/{node.key,operator.token}"
