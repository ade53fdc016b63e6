# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# Fails unless the weights folder is complete (components/docker/model_volume.py): the program is
# components/host/weights_check.py, its arguments the folder, the size in GiB and, where the profile
# says what it serves, config.json's model_type and architecture. Run after a download and, as
# preflight's check_weights, where the weights are checked in place. These comments are not sent.
python3 - {{ARGS}} <<'PY'
{{PROGRAM}}
PY
