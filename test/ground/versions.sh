# Sourced by the ground's build scripts: the pinned versions of versions.env,
# where GROUND_<KEY> in the environment wins over <KEY> (how `make compat`
# builds an older Kubernetes or RabbitMQ line beside the pinned one).
# shellcheck shell=bash
while IFS='=' read -r key value; do
  case "$key" in '' | '#'*) continue ;; esac
  override="GROUND_$key"
  printf -v "$key" '%s' "${!override:-$value}"
done <"$(dirname "${BASH_SOURCE[0]}")/versions.env"
unset key value override
