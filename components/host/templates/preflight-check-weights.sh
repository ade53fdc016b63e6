# shellcheck shell=bash
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# preflight.sh's check_weights, where the weights are checked in place (not downloaded): the same
# program and arguments as weights-verify.sh, as a function. These comments are not sent.
check_weights() {
python3 - {{ARGS}} <<'PY'
{{PROGRAM}}
PY
}
