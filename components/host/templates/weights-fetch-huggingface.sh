# shellcheck shell=sh
# shellcheck disable=SC1083 # the doubled braces are placeholders components/template.py fills
# The download from Hugging Face (components/docker/model_volume.py), after weights-download.sh. OPTIONS:
# every configured value quoted and glued to its option (--revision=…, --local-dir=…), the
# repository after `--`, so none can be read as an option. These comments are not sent.
huggingface-cli download {{OPTIONS}}
