"""Pure renderers: the text of nginx's and Prometheus' files, the dashboard and the status page,
from typed config through the one template engine. No Pulumi resource is made here."""
