# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The start of the Docker front container's command (components/docker/rotation_requests.py), joined into
# one line with nginx-start.sh: write the rotation script and the request loop into the container
# (base64, so no quoting can break them) and start the loop in the background; nginx-start.sh then
# makes nginx PID 1, and the loop becomes nginx's child and dies with the container. One statement
# a line, as template.one_line_script joins them; these comments are not part of it.
mkdir -p {{RUNTIME_DIR}};
echo {{ROTATION_BASE64}} | base64 -d > {{ROTATION_PATH}};
echo {{LOOP_BASE64}} | base64 -d > {{LOOP_PATH}};
sh {{LOOP_PATH}} &
