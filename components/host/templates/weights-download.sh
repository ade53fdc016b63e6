# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The start of the weights' download on the host (components/docker/model_volume.py), followed by the
# hub's fetch (weights-fetch-<source>.sh) and weights-verify.sh. These comments are not sent.
set -eu
mkdir -p -- {{DEST}}
