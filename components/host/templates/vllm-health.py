# The serving container's health check (components/docker/vllm_server.py), run as `python3 -c` in the
# container: vLLM's /health (python3 is in every vLLM image; curl is not). One line, as it has
# always been (the check is an input of the container: another text would replace it); these
# comments are not part of it.
import sys,urllib.request;sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:{{PORT}}/health',timeout=5).status==200 else 1)
