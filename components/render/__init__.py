"""Pure renderers: the text of nginx's and Prometheus' files, the dashboard and the status page,
from typed config through the one template engine (components/template.py). No Pulumi resource is
made here."""
