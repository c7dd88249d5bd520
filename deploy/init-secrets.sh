#!/usr/bin/env bash
# Create deploy/secrets/sidecar_token for docker-compose.yml, once: a fresh clone has none, and
# compose refuses to start without it. An existing token is kept (clients already use it).
#
#   bash deploy/init-secrets.sh && docker compose up --build
#   export ROLLOUT_SIDECAR_TOKEN="$(cat deploy/secrets/sidecar_token)"   # for dispatchers / follow
set -euo pipefail
secrets="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/secrets"
token="$secrets/sidecar_token"
install -d -m 0700 "$secrets"
if [[ -s "$token" ]]; then
  echo "kept the existing token: $token"
else
  (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > "$token")
  echo "created $token"
fi
chmod 0644 "$token" # the container user (uid 10001) must read it; the directory stays 0700
