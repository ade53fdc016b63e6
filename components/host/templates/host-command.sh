# shellcheck shell=sh
# The command line of every host command (components/docker/target.py): bash runs the script that came on
# stdin, read whole first, so that none of the script's own commands reads the rest of it as its
# input. These comments are not part of it.
bash -c "$(cat)"
