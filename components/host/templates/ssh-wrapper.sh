#!/bin/sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# `ssh` for the docker CLI (components/gate/container.py's ssh_wrapper): earlier on PATH than the
# real one, it adds the Docker provider's options (the pinned host key, user and key), so nothing
# is written to known_hosts.
exec {{SSH}} {{OPTIONS}} "$@"
